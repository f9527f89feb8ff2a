"""First `assemble build --cuda 13.2` of the example workspace vs a second (no-op) one.

The first build starts from a fresh workspace copy and an empty artifact store, with the
hermetic CUDA toolkit and the torch build venv already in the shared cache (their one-time
set-up is timed and printed separately when it happens). It checks out, compiles both
dependencies, merges and audits. The no-op build must rebuild nothing: target under 2 s.

    python benchmarks/build_noop.py [--cuda 13.2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
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

from assembler.cache import cache_root  # noqa: E402
from assembler.manifest import load_manifest  # noqa: E402
from assembler.toolchain.cuda import select_cuda  # noqa: E402
from assembler.toolchain.torchenv import ensure_build_env  # noqa: E402
from tests.example import EXAMPLE, make_upstreams  # noqa: E402


def timed_build(workspace: Path, cache: Path, cuda: str) -> tuple[float, dict]:
    env = {**os.environ, "ASSEMBLE_CACHE": str(cache)}
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "assembler", "-C", str(workspace), "build", "--cuda", cuda, "--json"],
        env=env, capture_output=True, text=True, check=False,
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"build failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return elapsed, json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cuda", default="13.2")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    shared = cache_root()
    started = time.perf_counter()
    select_cuda(args.cuda)
    ensure_build_env(load_manifest(EXAMPLE / "deps.toml").bundle.torch or "2.13.0")
    setup = time.perf_counter() - started
    print(f"toolchain + build venv (one-time, cached in {shared}): {setup:6.1f} s this run")

    first, noop = [], []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for index in range(args.rounds):
            workspace = tmp / f"ws{index}"
            shutil.copytree(EXAMPLE, workspace,
                            ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble"))
            make_upstreams(workspace / "upstreams")
            cache = tmp / f"cache{index}"  # fresh artifact store and mirrors, shared toolchains
            cache.mkdir()
            for name in ("venvs", "toolchains"):
                (cache / name).symlink_to(shared / name, target_is_directory=True)
            seconds, report = timed_build(workspace, cache, args.cuda)
            assert all(dep["status"] == "built" for dep in report["deps"]), report
            first.append(seconds)
            seconds, report = timed_build(workspace, cache, args.cuda)
            assert all(dep["status"] == "cached" for dep in report["deps"]), report
            noop.append(seconds)
    a, b = statistics.median(first), statistics.median(noop)
    print(f"first build (checkout, compile, merge, audit): {a:7.2f} s median of {args.rounds}")
    print(f"no-op build (nothing rebuilt):                 {b:7.2f} s median of {args.rounds} (target < 2 s)")
    print(f"ratio: {a / b:.1f}x")


if __name__ == "__main__":
    main()
