"""Start-up of the everyday commands, end to end, against `git status` in the same workspace.

assemble is installed as users get it (benchmarks/installed.py: a uv venv, regular install,
byte-code compiled) unless ``--python`` names an interpreter. A fresh copy of
examples/stable-abi is checked out once (mirrors, clones, series) and its tracked branches
fetched (`assemble patches`); then each of `assemble deps`, a no-op `assemble checkout` and
`assemble patches --offline` (nothing changed since: the stored classification is reused) runs
in a fresh interpreter ``--rounds`` times (median reported, wall and CPU time), as does
`git status` in one checkout for comparison. Budget (issue 12): under 100 ms each. For the
record it also times `patches --offline` when the classification has to be computed (its
record removed before each run): that is not a start-up path. With ``--checkout-ratio`` it also
runs benchmarks/checkout_noop.py with the same interpreter (first vs no-op checkout, target >= 10x
end to end).

    python benchmarks/startup.py [--rounds 11] [--checkout-ratio] [--python PATH]
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.installed import installed_python, run_env  # noqa: E402
from tests.example import EXAMPLE, make_upstreams  # noqa: E402

BUDGET_MS = 100.0
COMMANDS: dict[str, list[str]] = {
    "assemble deps": ["deps"],
    "assemble checkout (no-op)": ["checkout"],
    "assemble patches --offline": ["patches", "--offline"],
}


def median_ms(argv: list[str], env: dict[str, str], rounds: int, cwd: Path | None = None,
              before_each: Callable[[], None] = lambda: None) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system of the process and its children: what
    the command costs on a busy machine) of ``argv`` over ``rounds`` runs after a warm-up, in ms."""
    before_each()
    subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)
    walls, cpus = [], []
    for _ in range(rounds):
        before_each()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=11, help="runs per command (median reported; default 11)")
    parser.add_argument("--checkout-ratio", action="store_true", help="also run benchmarks/checkout_noop.py")
    parser.add_argument("--python", default=None,
                        help="the interpreter whose assemble is timed (default: a fresh uv venv with this checkout installed, "
                             "as `uv tool install` / pipx give it)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        args.python = args.python or str(installed_python(tmp / "venv"))
        workspace = tmp / "example"
        shutil.copytree(EXAMPLE, workspace, ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble"))
        make_upstreams(workspace / "upstreams")
        env = run_env(ASSEMBLE_CACHE=str(tmp / "cache"))
        # the `assemble` script users run (no runpy), else `python -m assembler` for --python
        script = Path(args.python).parent / "assemble"
        launcher = [str(script)] if script.is_file() else [args.python, "-m", "assembler"]
        assemble = [*launcher, "-C", str(workspace)]
        subprocess.run([*assemble, "checkout"], env=env, check=True, capture_output=True)
        subprocess.run([*assemble, "patches"], env=env, check=True, capture_output=True)  # fetches the tracked branches
        # run from the workspace's parent: `python -m` puts the working directory first on sys.path, so a
        # run from the repository would time the source tree instead of --python's installed package
        figures = {name: median_ms([*assemble, *words], env, args.rounds, cwd=tmp) for name, words in COMMANDS.items()}
        records = workspace / ".assemble" / "patches"
        figures["patches --offline, classifying"] = median_ms(
            [*assemble, "patches", "--offline"], env, args.rounds, cwd=tmp, before_each=lambda: shutil.rmtree(records, ignore_errors=True))
        fork = next(path for path in sorted((workspace / "forks").iterdir()) if path.is_dir())
        figures["git status (one checkout)"] = median_ms(["git", "status"], env, args.rounds, cwd=fork)
        python = median_ms([args.python, "-c", "pass"], env, args.rounds)
        load = os.getloadavg()[0]
        print(f"{args.python}: start-up, median of {args.rounds}; load average {load:.1f} on {os.cpu_count()} CPUs "
              f"(python -c pass alone: {python[0]:.1f} ms wall, {python[1]:.1f} ms CPU)")
        print(f"  {'':<32} {'wall':>8}    {'CPU':>8}")
        for name, (wall, cpu) in figures.items():
            verdict = "" if name not in COMMANDS else ("  within budget" if wall < BUDGET_MS else f"  OVER the {BUDGET_MS:.0f} ms budget")
            print(f"  {name:<32} {wall:8.1f} ms {cpu:8.1f} ms{verdict}")
        if args.checkout_ratio:
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "checkout_noop.py"), "--rounds", str(args.rounds),
                            "--python", args.python], check=True)


if __name__ == "__main__":
    main()
