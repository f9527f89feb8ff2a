"""First `assemble checkout` of the example workspace vs a second (no-op) one.

Each run uses a fresh copy of examples/stable-abi and a fresh cache, so the first checkout
pays for mirrors, clones and `git am`; the second must do no fetch and little else.
Target: the second checkout is at least 10x faster. Prints both medians and the ratio.

    python benchmarks/checkout_noop.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "stable-abi"


def load_make_upstreams() -> Callable[..., dict[str, str]]:
    spec = importlib.util.spec_from_file_location("make_upstreams", EXAMPLE / "make_upstreams.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.make_upstreams


def timed_checkout(workspace: Path, cache: Path) -> float:
    env = {**os.environ, "ASSEMBLE_CACHE": str(cache)}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "assembler", "-C", str(workspace), "checkout"], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    first, second = [], []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for round_index in range(rounds):
            workspace = tmp / f"ws{round_index}"
            shutil.copytree(EXAMPLE, workspace, ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble"))
            load_make_upstreams()(workspace / "upstreams")
            cache = tmp / f"cache{round_index}"
            first.append(timed_checkout(workspace, cache))
            second.append(timed_checkout(workspace, cache))
    a, b = statistics.median(first), statistics.median(second)
    print(f"first checkout (clone + series): {a * 1000:8.1f} ms median of {rounds}")
    print(f"second checkout (no-op):         {b * 1000:8.1f} ms median of {rounds}")
    print(f"ratio: {a / b:.1f}x (target >= 10x)")


if __name__ == "__main__":
    main()
