"""Start-up of the everyday commands, end to end, against `git status` in the same workspace.

assemble is installed as users get it (benchmarks/installed.py: a uv venv, regular install,
byte-code compiled) unless ``--python`` names an interpreter. A fresh copy of
examples/stable-abi is checked out once (mirrors, clones, series) and its tracked branches
fetched (`assemble patches`); then each of `assemble deps`, a no-op `assemble checkout` and
`assemble patches --offline` (nothing changed since: the stored classification is reused) runs
in a fresh interpreter ``--rounds`` times (median and best wall time, median CPU time; the rounds interleave the commands), as does
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


class Timed:
    """One command of the benchmark and its timings (ms)."""

    def __init__(self, argv: list[str], cwd: Path, before_each: Callable[[], None] = lambda: None) -> None:
        self.argv, self.cwd, self.before_each = argv, cwd, before_each
        self.walls: list[float] = []
        self.cpus: list[float] = []

    def run(self, env: dict[str, str], record: bool = True) -> None:
        """Once; wall time, and CPU time (user + system of the child: what it costs on a busy machine)."""
        self.before_each()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(self.argv, env=env, cwd=self.cwd, check=True, capture_output=True)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if record:
            self.walls.append(wall * 1000)
            self.cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)


def measure(commands: dict[str, Timed], env: dict[str, str], rounds: int) -> None:
    """A warm-up of each, then ``rounds`` rounds that run every command once in turn: a machine
    that slows down or speeds up meanwhile (a shared VM) shifts all of them alike."""
    for command in commands.values():
        command.run(env, record=False)
    for _ in range(rounds):
        for command in commands.values():
            command.run(env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="runs per command (median and best reported; default 15)")
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
        records = workspace / ".assemble" / "patches"
        fork = next(path for path in sorted((workspace / "forks").iterdir()) if path.is_dir())
        commands = {name: Timed([*assemble, *words], tmp) for name, words in COMMANDS.items()}
        commands["patches --offline, classifying"] = Timed(
            [*assemble, "patches", "--offline"], tmp, before_each=lambda: shutil.rmtree(records, ignore_errors=True))
        commands["git status (one checkout)"] = Timed(["git", "status"], fork)
        commands["python -c pass"] = Timed([args.python, "-c", "pass"], tmp)
        measure(commands, env, args.rounds)
        load = os.getloadavg()[0]
        print(f"{args.python}: start-up over {args.rounds} interleaved rounds; load average {load:.1f} on {os.cpu_count()} CPUs")
        print(f"  {'':<32} {'median':>9} {'best':>9} {'CPU':>9}")
        for name, command in commands.items():
            wall = statistics.median(command.walls)
            verdict = "" if name not in COMMANDS else ("  within budget" if wall < BUDGET_MS else f"  OVER the {BUDGET_MS:.0f} ms budget")
            print(f"  {name:<32} {wall:6.1f} ms {min(command.walls):6.1f} ms {statistics.median(command.cpus):6.1f} ms{verdict}")
        if args.checkout_ratio:
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "checkout_noop.py"), "--rounds", str(args.rounds),
                            "--python", args.python], check=True)


if __name__ == "__main__":
    main()
