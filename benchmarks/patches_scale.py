"""`assemble patches --offline` on series of 250, 500 and 1,000 patches: the time per patch
must stay flat (#29 item 14: 500 patches took 31 s, 2,000 took 248 s).

Each workspace comes from ``tests/test_patches_scale.make_long_series`` (git fast-import,
fixed dates): stacked one-line patches written by ``git format-patch``, on a base with
``--history`` upstream commits below it, the tracked branch a few commits past the base. The
series is checked out first (the checkout's commits then stand for the patch files, the case
that was quadratic); ``--no-checkout`` classifies the series files instead. Before each round
the stored classifications are removed, so every run classifies.

Target: the per-patch time of the longest series within 1.3x of the shortest's. ``--source``
times another assembler tree (e.g. ``git archive`` of an older commit) for a before/after.

    python benchmarks/patches_scale.py [--sizes 250 500 1000] [--history 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_patches_scale import make_long_series  # noqa: E402


def assemble(source: Path, root: Path, cache: Path, *args: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of it and every git it ran) of ``assemble ARGS`` in a fresh
    interpreter importing ``source``'s assembler. The CPU time is the steadier of the two on a
    shared machine."""
    env = {**os.environ, "ASSEMBLE_CACHE": str(cache), "PYTHONPATH": str(source)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "assembler", "-C", str(root), *args], env=env, cwd=root,
                            capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"assemble {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[250, 500, 1000])
    parser.add_argument("--history", type=int, default=2000, help="upstream commits below the base")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-checkout", action="store_true", help="classify the series files, not a checkout")
    parser.add_argument("--source", type=Path, default=ROOT, help="the assembler source tree to time")
    args = parser.parse_args()
    source = args.source.resolve()
    with tempfile.TemporaryDirectory(prefix="patches-scale-") as tmp_name:
        tmp = Path(tmp_name)
        runs: dict[int, list[tuple[float, float]]] = {}
        for size in args.sizes:
            root, cache = tmp / f"ws{size}", tmp / f"cache{size}"
            started = time.perf_counter()
            make_long_series(root, size, args.history)
            # `checkout` fetches the mirror; without it `patches` (online) fetches it
            assemble(source, root, cache, *(["patches", "--format", "json"] if args.no_checkout else ["checkout"]))
            made = "fetched" if args.no_checkout else "checked out"
            print(f"{size} patches over {args.history} commits: generated and {made} in "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
            runs[size] = []
        for _ in range(args.rounds):  # rounds interleave the sizes: a busy machine slows all of them alike
            for size in args.sizes:
                shutil.rmtree(tmp / f"cache{size}" / "classifications", ignore_errors=True)
                runs[size].append(assemble(source, tmp / f"ws{size}", tmp / f"cache{size}",
                                           "patches", "--offline", "--format", "json"))
        print(f"{'patches':>8} {'wall':>9} {'ms/patch':>9} {'CPU':>9} {'ms/patch':>9}   (medians)")
        first = args.sizes[0]
        wall = {size: statistics.median(w for w, _ in runs[size]) for size in args.sizes}
        cpu = {size: statistics.median(c for _, c in runs[size]) for size in args.sizes}
        for size in args.sizes:
            rounds = ", ".join(f"{w:.2f} {c:.2f}" for w, c in runs[size])
            print(f"{size:8} {wall[size]:8.2f}s {1000 * wall[size] / size:9.1f} {cpu[size]:8.2f}s "
                  f"{1000 * cpu[size] / size:9.1f}  (wall, CPU: {rounds})")
        for size in args.sizes[1:]:
            by_wall, by_cpu = (wall[size] / size) / (wall[first] / first), (cpu[size] / size) / (cpu[first] / first)
            print(f"per-patch time, {size} vs {first} patches: wall {by_wall:.2f}x, CPU {by_cpu:.2f}x "
                  f"(target <= 1.3x; quadratic would be {size / first:.1f}x)")


if __name__ == "__main__":
    main()
