"""First `assemble checkout` of the example workspace vs a second (no-op) one.

Each run uses a fresh copy of examples/stable-abi and a fresh cache, so the first checkout
pays for mirrors, clones and `git am`; the second must do no fetch and little else.
Target: the second checkout is at least 10x faster. Prints both medians and the ratio, for
the CLI end to end (a fresh interpreter each time: start-up and imports included) and for the
library call in-process (what the command itself does).

    python benchmarks/checkout_noop.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.installed import installed_python, run_env  # noqa: E402
from tests.example import EXAMPLE, make_upstreams  # noqa: E402

PYTHON = [sys.executable]  # set by main (--python)


def timed_checkout(workspace: Path, cache: Path) -> float:
    env = run_env(ASSEMBLE_CACHE=str(cache))
    started = time.perf_counter()
    script = Path(PYTHON[0]).parent / "assemble"  # the script users run, else `python -m assembler`
    launcher = [str(script)] if script.is_file() else [*PYTHON, "-m", "assembler"]
    subprocess.run([*launcher, "-C", str(workspace), "checkout"], env=env, check=True, capture_output=True,
                   cwd=workspace.parent)  # not the repository: `-m` would import the source tree
    return time.perf_counter() - started


def timed_in_process(workspace: Path, cache: Path) -> float:
    os.environ["ASSEMBLE_CACHE"] = str(cache)
    from assembler.git.sync import sync_checkouts
    from assembler.workspace import open_workspace

    started = time.perf_counter()
    opened = open_workspace(workspace)
    with opened.lock():
        sync_checkouts(opened, opened.manifest.select(None))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--python", default=None,
                        help="the interpreter whose assemble is timed (default: a fresh uv venv)")
    args = parser.parse_args()
    rounds = args.rounds
    timings: dict[str, list[float]] = {"cli first": [], "cli no-op": [], "library first": [], "library no-op": []}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        PYTHON[:] = [args.python or str(installed_python(tmp / "venv"))]
        for round_index in range(rounds):
            for mode, timer in (("cli", timed_checkout), ("library", timed_in_process)):
                workspace = tmp / f"{mode}{round_index}"
                shutil.copytree(EXAMPLE, workspace,
                                ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble"))
                make_upstreams(workspace / "upstreams")
                cache = tmp / f"cache-{mode}{round_index}"
                timings[f"{mode} first"].append(timer(workspace, cache))
                timings[f"{mode} no-op"].append(timer(workspace, cache))
    for mode in ("cli", "library"):
        first, second = statistics.median(timings[f"{mode} first"]), statistics.median(timings[f"{mode} no-op"])
        print(f"{mode:8s} first checkout (mirror + clone + series): {first * 1000:8.1f} ms median of {rounds}")
        print(f"{mode:8s} second checkout (no-op):                  {second * 1000:8.1f} ms")
        print(f"{mode:8s} ratio: {first / second:.1f}x (target >= 10x)")


if __name__ == "__main__":
    main()
