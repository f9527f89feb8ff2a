"""Create a verify environment (torch only) in a fresh ASSEMBLE_CACHE: uv (hard links from uv's
cache, today's path) against pip (the fallback, and the only path before), in one run.

The precondition of the figure is "torch already in the installer's cache": one untimed warm-up
creation per installer comes first (uv fills its cache; pip gets the same chance with its own).
Each timed round is `ensure_torch_env` in a subprocess on a new, empty ASSEMBLE_CACHE, so
nothing of assemble's own cache helps. Both installers must end with the same torch build.

    python benchmarks/env_uv.py [--torch 2.13.0 --torch 2.14.1] [--rounds 3] [--pip-rounds 1] [--no-pip-warm-up]
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
ENSURE = (
    "import json, sys; from assembler.verify.envs import ensure_torch_env; "
    "env = ensure_torch_env(sys.argv[1]); print(json.dumps({'installed': env.installed, 'path': str(env.path)}))"
)


def create(tool: str, version: str, scratch: Path) -> tuple[float, str]:
    """Seconds to create the verify env for ``version`` with ``tool`` in a fresh cache, and the torch it got."""
    cache = Path(tempfile.mkdtemp(prefix=f"bench-{tool}-", dir=scratch))
    env = {**os.environ, "ASSEMBLE_CACHE": str(cache), "ASSEMBLE_INSTALLER": tool}
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", ENSURE, version], env=env, capture_output=True, text=True, cwd=ROOT,
                            check=False)
    elapsed = time.perf_counter() - started
    shutil.rmtree(cache, ignore_errors=True)
    if result.returncode != 0:
        sys.exit(f"{tool} could not create torch {version}: {result.stderr.strip()[-2000:]}")
    return elapsed, json.loads(result.stdout.strip().splitlines()[-1])["installed"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch", action="append", default=[], help="torch versions (default 2.13.0)")
    parser.add_argument("--rounds", type=int, default=3, help="timed uv rounds per version (median reported)")
    parser.add_argument("--pip-rounds", type=int, default=1, help="timed pip rounds per version")
    parser.add_argument("--no-pip-warm-up", action="store_true",
                        help="skip pip's untimed warm-up (it serves local indexes and find-links without a download "
                             "cache)")
    parser.add_argument("--scratch", type=Path, default=None,
                        help="where the fresh caches go (default: a temporary directory; keep it on the uv cache's "
                             "filesystem, or uv copies instead of linking)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from assembler.toolchain.installer import installer, uv_version

    versions = args.torch or ["2.13.0"]
    os.environ.pop("ASSEMBLE_INSTALLER", None)
    print(f"uv {uv_version()}, pip fallback: {installer().name if uv_version() is None else 'pip ' + _pip()}",
          file=sys.stderr)
    results = []
    with tempfile.TemporaryDirectory(prefix="assemble-bench-env-", dir=args.scratch) as scratch_dir:
        scratch = Path(scratch_dir)
        for version in versions:
            row: dict[str, object] = {"torch": version}
            for tool, rounds in (("uv", args.rounds), ("pip", args.pip_rounds)):
                if tool == "pip" and args.no_pip_warm_up:
                    warm, installed = 0.0, str(row["uv"]["installed"])  # type: ignore[index]
                else:
                    warm, installed = create(tool, version, scratch)  # fills the installer's cache
                times = [create(tool, version, scratch) for _ in range(rounds)]
                if {got for _, got in times} != {installed}:
                    sys.exit(f"{tool} installed different torch builds: "
                             f"{sorted({got for _, got in times} | {installed})}")
                row[tool] = {"seconds": round(statistics.median(t for t, _ in times), 2),
                             "rounds": [round(t, 2) for t, _ in times],
                             "warm_up_seconds": round(warm, 2), "installed": installed}
                print(f"torch {version}: {tool} {statistics.median(t for t, _ in times):.1f} s (warm-up {warm:.1f} s, "
                      f"{installed})",
                      file=sys.stderr)
            uv_row, pip_row = row["uv"], row["pip"]
            assert isinstance(uv_row, dict) and isinstance(pip_row, dict)
            if uv_row["installed"] != pip_row["installed"]:
                sys.exit(f"uv picked {uv_row['installed']}, pip {pip_row['installed']}: the configuration was not "
                         "carried over")
            row["pip_over_uv"] = round(pip_row["seconds"] / uv_row["seconds"], 1)
            results.append(row)
            print(f"torch {version}: uv {uv_row['seconds']} s vs pip {pip_row['seconds']} s: {row['pip_over_uv']}x",
                  file=sys.stderr)
    print(json.dumps({"benchmark": "env_uv", "uv": uv_version(), "results": results}, indent=2))


def _pip() -> str:
    import importlib.metadata

    return importlib.metadata.version("pip")


if __name__ == "__main__":
    main()
