"""Time `assemble verify` of a wheel on two warm torch venvs (2.13.0 CPU, 2.14.1 CUDA build).

The wheel is the example workspace's (`make demo` leaves it in examples/stable-abi/dist/), or
``--wheel``; without either, the verify demonstration wheel of the tests (stable, unstable and
CUDA-only op libraries, compiled here against torch 2.13.0). The venvs are created first if
missing (untimed, reported). Each round is the whole CLI in a subprocess: wheel install, one
probe per torch version (side by side), matrix. Also timed: each version alone.

    python benchmarks/verify_demo.py [--wheel W] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "stable-abi"
sys.path.insert(0, str(ROOT))

from assembler.toolchain.venv import site_packages  # noqa: E402
from assembler.verify.envs import ensure_torch_env  # noqa: E402
from tests.verify_fixtures.demo import MANIFEST, compiled, package_files, write_wheel  # noqa: E402

VERSIONS = ("2.13.0", "2.14.1")


def demonstration_wheel(tmp: Path) -> tuple[Path, Path]:
    env = ensure_torch_env(VERSIONS[0])
    libraries = {
        name: compiled(tmp, site_packages(env.path) / "torch", env.installed, name)
        for name in ("stable_ops", "unstable_ops", "cuda_ops")
    }
    (tmp / "deps.toml").write_text(MANIFEST)
    return write_wheel(tmp / "dist", "verifydemo", package_files(libraries)), tmp


def timed_verify(workspace: Path, wheel: Path, versions: tuple[str, ...]) -> tuple[float, dict]:
    args = [arg for version in versions for arg in ("--torch", version)]
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "assembler", "-C", str(workspace), "verify", str(wheel), *args, "--json"],
        capture_output=True, text=True, check=False,
    )
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1):
        sys.exit(f"verify failed ({result.returncode}): {result.stderr}")
    return elapsed, json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--wheel", type=Path, help="wheel to verify (workspace: examples/stable-abi)")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    for version in VERSIONS:
        started = time.perf_counter()
        env = ensure_torch_env(version)
        print(f"torch {env.installed}: {env.path} ({time.perf_counter() - started:.1f} s to ensure)")
    with tempfile.TemporaryDirectory() as tmp_name:
        wheel = options.wheel or next(iter(sorted((EXAMPLE / "dist").glob("*.whl"))), None)
        workspace = EXAMPLE
        if wheel is None:
            wheel, workspace = demonstration_wheel(Path(tmp_name))
        print(f"wheel: {wheel} ({wheel.stat().st_size / 1e6:.1f} MB)")
        timed_verify(workspace, wheel, VERSIONS)  # page cache warm, like a CI runner's second job
        both = [timed_verify(workspace, wheel, VERSIONS) for _ in range(options.rounds)]
        single = {version: timed_verify(workspace, wheel, (version,))[0] for version in VERSIONS}
    seconds = [elapsed for elapsed, _ in both]
    summary = both[-1][1]["summary"]
    print(f"matrix: {len(both[-1][1]['results'])} cells, {summary}")
    print(f"verify on {' + '.join(VERSIONS)} (warm venvs): median {statistics.median(seconds):.2f} s "
          f"over {options.rounds} rounds (min {min(seconds):.2f}, max {max(seconds):.2f})")
    for version, elapsed in single.items():
        print(f"  {version} alone: {elapsed:.2f} s")


if __name__ == "__main__":
    main()
