"""Start-up of the everyday commands, end to end, against `git status` in the same workspace.

A fresh copy of examples/stable-abi is checked out once (mirrors, clones, series) and its
tracked branches fetched (`assemble patches`); then each of
`assemble deps`, a no-op `assemble checkout` and `assemble patches --offline` runs in a fresh
interpreter ``--rounds`` times (median reported, wall and CPU time), as does `git status` in one checkout for
comparison. Budget (issue 12): under 100 ms each. With ``--checkout-ratio`` it also runs
benchmarks/checkout_noop.py (first vs no-op checkout, target >= 10x end to end).

    python benchmarks/startup.py [--rounds 7] [--checkout-ratio]
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

from tests.example import EXAMPLE, make_upstreams  # noqa: E402

BUDGET_MS = 100.0
COMMANDS: dict[str, list[str]] = {
    "assemble deps": ["deps"],
    "assemble checkout (no-op)": ["checkout"],
    "assemble patches --offline": ["patches", "--offline"],
}


def median_ms(argv: list[str], env: dict[str, str], rounds: int, cwd: Path | None = None) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system of the process and its children: what
    the command costs on a busy machine) of ``argv`` over ``rounds`` runs after a warm-up, in ms."""
    subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)
    walls, cpus = [], []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="runs per command (median reported; default 7)")
    parser.add_argument("--checkout-ratio", action="store_true", help="also run benchmarks/checkout_noop.py")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter whose assemble is timed (default: this one). An editable install pays ~30 ms "
                             "of site start-up for its import hook; `uv venv V && uv pip install --python V/bin/python .` "
                             "gives what `uv tool install` / pipx users run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        workspace = tmp / "example"
        shutil.copytree(EXAMPLE, workspace, ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble"))
        make_upstreams(workspace / "upstreams")
        env = {**os.environ, "ASSEMBLE_CACHE": str(tmp / "cache")}
        # as installed: byte-code cached (the warm-up run writes it), not compiled on every start
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        assemble = [args.python, "-m", "assembler", "-C", str(workspace)]
        subprocess.run([*assemble, "checkout"], env=env, check=True, capture_output=True)
        subprocess.run([*assemble, "patches"], env=env, check=True, capture_output=True)  # fetches the tracked branches
        # run from the workspace's parent: `python -m` puts the working directory first on sys.path, so a
        # run from the repository would time the source tree instead of --python's installed package
        figures = {name: median_ms([*assemble, *words], env, args.rounds, cwd=tmp) for name, words in COMMANDS.items()}
        fork = next(path for path in sorted((workspace / "forks").iterdir()) if path.is_dir())
        figures["git status (one checkout)"] = median_ms(["git", "status"], env, args.rounds, cwd=fork)
        python = median_ms([args.python, "-c", "pass"], env, args.rounds)
    load = os.getloadavg()[0]
    print(f"{args.python}: start-up, median of {args.rounds}; load average {load:.1f} on {os.cpu_count()} CPUs "
          f"(python -c pass alone: {python[0]:.1f} ms wall, {python[1]:.1f} ms CPU)")
    print(f"  {'':<30} {'wall':>8}    {'CPU':>8}")
    for name, (wall, cpu) in figures.items():
        verdict = "" if name.startswith("git") else ("  within budget" if wall < BUDGET_MS else f"  OVER the {BUDGET_MS:.0f} ms budget")
        print(f"  {name:<30} {wall:8.1f} ms {cpu:8.1f} ms{verdict}")
    if args.checkout_ratio:
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "checkout_noop.py"), "--rounds", str(args.rounds)], check=True)


if __name__ == "__main__":
    main()
