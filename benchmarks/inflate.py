"""`assemble size` and `assemble audit` with each inflater, side by side in one run.

The members of a wheel are streamed through one raw-deflate decoder (:mod:`assembler.audit.inflate`):
zlib-ng (the default when installed), ISA-L (``isal``), or CPython's zlib (the fallback).
Each command runs in a fresh process per inflater (``ASSEMBLE_INFLATER``), best wall and CPU
seconds of --rounds, and the outputs must be identical (same verdicts, same sizes).

Wheels: vllm 0.33.0 (336 MB, fetched once by benchmarks/audit_vllm.py into
``$ASSEMBLE_CACHE/wheels``) and any other wheel given with --wheel (fbgemm-gpu 1.9.0, a torch
wheel). libdeflate (``deflate``) is not among them: it inflates whole buffers only, so it
would hold each member whole, which the audit never does.

    python benchmarks/inflate.py [--rounds 3] [--wheel PATH]... [--no-vllm]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assembler.audit.inflate import CHOICES, _module  # noqa: E402

ASSEMBLE = [sys.executable, "-m", "assembler"]


def timed(cmd: list[str], inflater: str) -> tuple[float, float, str]:
    """Wall and CPU seconds (children) of one command, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, "ASSEMBLE_INFLATER": inflater})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def comparable(command: str, stdout: str) -> object:
    data = json.loads(stdout)
    data.pop("seconds", None)
    if command == "audit":
        data.get("sources", {}).pop("torch_libraries", None)
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wheel", type=Path, action="append", default=[])
    parser.add_argument("--no-vllm", action="store_true")
    args = parser.parse_args()
    wheels = list(args.wheel)
    if not args.no_vllm:
        from benchmarks.audit_vllm import fetch

        wheels.insert(0, fetch())
    inflaters = [name for name in CHOICES if _module(name) is not None]
    print(f"inflaters installed: {', '.join(inflaters)}; best of {args.rounds}")
    for wheel in wheels:
        print(f"\n{wheel.name} ({wheel.stat().st_size / 1e6:.0f} MB)")
        for command in ("size", "audit"):
            outputs = {}
            for inflater in inflaters:
                runs = [timed([*ASSEMBLE, command, "--json", str(wheel)], inflater) for _ in range(args.rounds)]
                wall, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
                outputs[inflater] = comparable(command, runs[-1][2])
                print(f"  {command:5s} {inflater:8s} wall {wall:6.2f} s   CPU {cpu:6.2f} s")
            same = all(out == outputs["zlib"] for out in outputs.values())
            print(f"  {command:5s} outputs identical across inflaters: {same}")
            if not same:
                return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
