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

It also prints the floor: every ELF member inflated whole, in this process, by each library
installed (libdeflate too, whole buffers), no ELF reading at all. `size` must read every fatbin
entry header, and the headers are spread over the whole ``.nv_fatbin`` section (FA2's: bytes 5.6
to 302.8 MB of a 308 MB object), so no reader of a deflated member can do with less than
inflating it to the end of that section: the floor bounds `size` from below.
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
    done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          env={**os.environ, "ASSEMBLE_INFLATER": inflater})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def _floor_libraries() -> dict[str, object]:
    found: dict[str, object] = {}
    for name in CHOICES:
        module = _module(name)
        if module is not None:
            found[name] = module
    try:
        import deflate  # type: ignore[import-not-found, unused-ignore]  # libdeflate: measured when installed

        found["libdeflate"] = deflate
    except ImportError:
        pass
    return found


def floor(wheel: Path, rounds: int) -> None:
    """CPU seconds to inflate every ELF member whole with each library (best of ``rounds``)."""
    import re

    from assembler.audit.member import _data_offset
    from assembler.audit.wheelsource import elf_members
    from assembler.audit.zipindex import read_index

    elves, _ = elf_members(str(wheel), read_index(str(wheel), re.compile(rb"")))
    fd = os.open(wheel, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        packed = [(i.file_size, os.pread(fd, i.compress_size, _data_offset(fd, i, size))) for i in elves
                  if i.compress_type == 8]
    finally:
        os.close(fd)
    total = sum(n for n, _ in packed)
    for name, module in _floor_libraries().items():
        best = None
        for _ in range(rounds):
            started = time.process_time()
            out = 0
            for file_size, data in packed:
                if name == "libdeflate":
                    out += len(module.deflate_decompress(data, file_size))  # type: ignore[attr-defined]
                    continue
                decoder = module.decompressobj(-15)  # type: ignore[attr-defined]
                for at in range(0, len(data), 1 << 18):
                    out += len(decoder.decompress(data[at:at + (1 << 18)], 1 << 20))
                    while decoder.unconsumed_tail:
                        out += len(decoder.decompress(decoder.unconsumed_tail, 1 << 20))
            seconds = time.process_time() - started
            if out != total:
                raise SystemExit(f"{name}: inflated {out} bytes, the zip declares {total}")
            best = seconds if best is None else min(best, seconds)
        print(f"  floor {name:10s} CPU {best:6.2f} s   ({len(packed)} ELF members, {total / 1e6:.0f} MB inflated "
              "whole)")


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
        floor(wheel, args.rounds)
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
