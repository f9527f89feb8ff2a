"""(b) A cold build of the example in a fresh workspace and an empty local cache (a new CI
runner): with a warm Redis remote that an earlier runner filled, against no remote at all.

The redis-server is started here on a free port of 127.0.0.1 (no persistence) and stopped at
the end. Each round builds all three dependencies (`build --only` each, so no merge or audit:
what a matrix job does). Runners live at the same paths, as CI runners do (sccache 0.16 hashes
the -ffile-prefix-map arguments, which name the workspace and the cache).

    python benchmarks/remote_cache.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assembler.cache import cache_root  # noqa: E402
from assembler.toolchain.cuda import select_cuda  # noqa: E402
from assembler.toolchain.sccache import free_port  # noqa: E402
from assembler.toolchain.torchenv import ensure_build_env  # noqa: E402
from tests.build_support import ci_runner  # noqa: E402

CUDA = "13.2"
DEPS = ("vecadd", "scalekit", "rowsum")


def fresh_runner(root: Path, remote: str | None) -> tuple[Path, Path]:
    """A new runner at ``root`` (the example and an empty cache sharing the toolchains), with ``remote`` as its
    [cache]."""
    return ci_runner(root, cache_root(), None if remote is None else f'remote = "{remote}"')


def build(ws: Path, cache: Path) -> tuple[float, dict[str, object]]:
    only = [arg for dep in DEPS for arg in ("--only", dep)]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws), "build", "--cuda", CUDA, "--json", *only],
                          env={**os.environ, "ASSEMBLE_CACHE": str(cache)}, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"build failed ({done.returncode}):\n{done.stderr[-3000:]}")
    deps = {dep["dep"]: dep for dep in json.loads(done.stdout)["deps"]}
    assert all(dep["status"] == "built" for dep in deps.values()), deps
    return elapsed, {name: dep["compiler_cache"] for name, dep in deps.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    select_cuda(CUDA)
    ensure_build_env("2.13.0")
    redis = shutil.which("redis-server")
    if redis is None:
        sys.exit("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="assemble-bench-remote-") as temporary:
        server = subprocess.Popen([redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                   "no", "--dir", temporary], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            remote = f"redis://127.0.0.1:{port}/0"
            runner = Path(temporary) / "runner"
            ws, cache = fresh_runner(runner, remote)
            filled, _ = build(ws, cache)
            print(f"runner 0 fills the remote (cold, Redis empty): {filled:6.1f} s")
            times: dict[str, list[float]] = {"cold, no remote": [], "cold, warm Redis remote": []}
            stats: dict[str, object] = {}
            for _ in range(args.rounds):
                ws, cache = fresh_runner(runner, None)
                times["cold, no remote"].append(build(ws, cache)[0])
                ws, cache = fresh_runner(runner, remote)
                elapsed, stats = build(ws, cache)
                times["cold, warm Redis remote"].append(elapsed)
            print(f"fresh workspace + empty local cache, 3 dependencies (--only each), median of {args.rounds}:")
            for label, values in times.items():
                print(f"  {label:<28} {statistics.median(values):6.1f} s   {' '.join(f'{v:.1f}' for v in values)}")
            print(f"  sccache per dependency with the warm remote: {stats}")
            none, warm = (statistics.median(v) for v in times.values())
            print(f"  speed-up: {none / warm:.1f}x")
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
