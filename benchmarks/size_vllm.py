"""`assemble size` of the public vllm 0.33.0 wheel vs unpacking it and reading the files.

Uses the wheel benchmarks/audit_vllm.py downloads (``$ASSEMBLE_CACHE/wheels``, 336 MB; fetched
once with pip when missing). Times in one run:

1. ``assemble -C . size --json WHEEL`` (the CLI, fresh process each time, median of --rounds),
   attributed with this repository's deps.toml install globs; wall and CPU seconds;
2. the way without it: ``unzip -q WHEEL -d DIR`` then ``assemble size --json DIR`` (the same
   fatbin walk over the extracted files); ``unzip -l`` gives no per-architecture split at all,
   and ``cuobjdump`` needs each object unpacked too.

Checks that the per-dependency sums equal the zip's own member sizes exactly (and add up to the
file with the zip structure), and that the in-place split equals the one read from the
extracted files. Prints the per-dependency and per-architecture figures.

    python benchmarks/size_vllm.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.audit_vllm import WHEEL, fetch  # noqa: E402  (the one download of the wheel)

ASSEMBLE = [sys.executable, "-m", "assembler"]


def timed(cmd: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall and CPU seconds (children) of one command, and its result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return wall, cpu, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    wheel = fetch()
    runs = [timed([*ASSEMBLE, "-C", str(ROOT), "size", "--json", str(wheel)]) for _ in range(args.rounds)]
    ours = json.loads(runs[-1][2].stdout)
    with tempfile.TemporaryDirectory() as tmp:
        unzip_s, unzip_cpu, _ = timed(["unzip", "-q", str(wheel), "-d", tmp])
        tree_s, tree_cpu, tree = timed([*ASSEMBLE, "size", "--json", tmp])
    unpacked = json.loads(tree.stdout)

    problems = []
    with zipfile.ZipFile(wheel) as archive:
        infos = archive.infolist()
    if sum(g["compressed"] for g in ours["deps"]) != wheel.stat().st_size:
        problems.append("the groups do not add up to the wheel's size")
    if sum(g["uncompressed"] for g in ours["deps"]) != sum(i.file_size for i in infos):
        problems.append("the groups do not add up to the members' uncompressed sizes")
    if (sum(g["compressed"] for g in ours["deps"] if g["name"] != "(zip structure)")
        != sum(i.compress_size for i in infos)):
        problems.append("the groups do not add up to the members' compressed sizes")
    in_place = {o["path"]: o["fatbin"] for o in ours["objects"]}
    from_files = {o["path"]: o["fatbin"] for o in unpacked["objects"]}
    if in_place != from_files:
        problems.append("the in-place fatbin split differs from the one read from the extracted files")

    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    print(f"assemble size (CLI, in place)   median {wall:6.2f} s wall, {cpu:5.2f} s CPU ({args.rounds} runs, "
          f"{os.cpu_count()} CPUs)")
    print(f"unzip + assemble size DIR              {unzip_s + tree_s:6.2f} s wall, {unzip_cpu + tree_cpu:5.2f} s CPU "
          f"({(unzip_s + tree_s) / wall:.1f}x the in-place wall time)")
    print(f"\n{WHEEL}: {ours['size'] / 1e6:.1f} MB, attributed by {ours['attribution']}")
    for group in ours["deps"]:
        print(f"  {group['name']:<20} {group['files']:5d} files {group['compressed'] / 1e6:8.1f} MB compressed "
              f"{group['uncompressed'] / 1e6:8.1f} MB")
    print("CUDA code by architecture (bytes in .nv_fatbin, uncompressed payload):")
    for arch in ours["archs"]:
        print(f"  {arch['arch']:<12} {arch['kind']:<5} {arch['entries']:4d} entries {arch['size'] / 1e6:8.1f} MB "
              f"{arch['uncompressed'] / 1e6:8.1f} MB")
    print(f"sums equal the members' sizes exactly: {not problems}")
    for line in problems:
        print(f"PROBLEM: {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
