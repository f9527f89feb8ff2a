"""`assemble size` on hostile ``.nv_fatbin`` sections (issue 29, item 13): a 345 KB wheel whose
section was zeros took 197 s, walked 8 bytes at a time. The time now follows the headers, not
the bytes: padding is skipped a run at a time, and a section of more containers and entries than
any compiler writes is refused. Each run is bounded by RLIMIT_CPU in its own process: a walk
that is too slow dies of SIGXCPU and fails the test (no timed assertion)."""

from __future__ import annotations

import itertools
import json
import resource
import struct
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from assembler.wheel.size import FATBIN_MAGIC, MAX_FATBIN_RECORDS
from tests.hostile_wheels import WHEEL_NAME, Archive, Entry, MiB, deflate, wheel_entries

CPU_SECONDS = 20  # what one `assemble size` of these wheels may spend; the old walk needed minutes
SO = "pkg/_C.abi3.so"


def elf_with_fatbin(size: int, fill: Iterable[bytes]) -> tuple[Iterator[bytes], int]:
    """An ELF64 object whose only sections are ``.shstrtab`` and a ``.nv_fatbin`` of ``size`` bytes
    streamed from ``fill`` (never held whole): its chunks and its length."""
    names = b"\0.shstrtab\0.nv_fatbin\0"
    names_at = 64 + size
    shoff = (names_at + len(names) + 7) // 8 * 8
    header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64,
                         3, 1)
    sections = bytes(64)  # SHT_NULL
    sections += struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, names_at, len(names), 0, 0, 1, 0)  # .shstrtab
    sections += struct.pack("<IIQQQQIIQQ", 11, 1, 2, 0, 64, size, 0, 0, 8, 0)  # .nv_fatbin, PROGBITS
    tail = names + bytes(shoff - names_at - len(names)) + sections

    def chunks() -> Iterator[bytes]:
        yield header
        written = 0
        for chunk in fill:
            chunk = chunk[: size - written]
            written += len(chunk)
            yield chunk
            if written == size:
                break
        assert written == size
        yield tail

    return chunks(), shoff + len(sections)


def repeated(unit: bytes) -> Iterator[bytes]:
    chunk = unit * (MiB // len(unit))
    while True:
        yield chunk


def hostile_wheel(tmp_path: Path, size: int, fill: Iterable[bytes], prefix: bytes = b"") -> Path:
    """A small wheel (as in the issue) whose one object has that fatbin: ``prefix``, then ``fill``."""
    body, total = elf_with_fatbin(size, itertools.chain([prefix], fill))
    member = Entry(SO.encode(), deflate(body), total)
    wheel = Archive([member, *wheel_entries({})]).write(tmp_path / WHEEL_NAME)
    assert wheel.stat().st_size < 2 * MiB
    return wheel


def size_under_cpu_limit(wheel: Path) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))

    return subprocess.run([sys.executable, "-m", "assembler", "size", "--json", str(wheel)], capture_output=True,
                          text=True, preexec_fn=limit, timeout=600)


def test_a_fatbin_of_zeros_is_measured_within_the_cpu_limit(tmp_path: Path) -> None:
    """256 MiB of zeros (the issue's case, larger): all padding, no architecture."""
    size = 256 * MiB
    wheel = hostile_wheel(tmp_path, size, repeated(bytes(4096)))
    done = size_under_cpu_limit(wheel)
    assert done.returncode == 0, f"exit {done.returncode} (-24: SIGXCPU after {CPU_SECONDS} s of CPU): {done.stderr}"
    [obj] = [o for o in json.loads(done.stdout)["objects"] if o["path"] == SO]
    assert obj["fatbin"] == {"size": size, "headers": size, "archs": []}


@pytest.mark.parametrize("layout", ["containers", "entries"])
def test_more_fatbin_records_than_any_compiler_writes_are_refused(tmp_path: Path, layout: str) -> None:
    """20 MiB of empty 16-byte containers, or 80 MiB of 64-byte entries in one container: over a
    million records, each a loop turn; refused (exit 2, naming the object) within the CPU limit."""
    size = 20 * MiB if layout == "containers" else 80 * MiB
    if layout == "containers":
        wheel = hostile_wheel(tmp_path, size, repeated(struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, 0)))
    else:
        container = struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, size - 16)
        entry = struct.pack("<HHIQIIHHIIIQQQ", 2, 0, 64, 0, 0, 0, 0, 0, 90, 0, 0, 0, 0, 0)
        wheel = hostile_wheel(tmp_path, size, repeated(entry), prefix=container)
    done = size_under_cpu_limit(wheel)
    assert done.returncode == 2, f"exit {done.returncode} (-24: SIGXCPU): {done.stderr}"
    assert "Traceback" not in done.stderr
    error = json.loads(done.stdout)["error"]["message"]
    assert SO in error and f"more than {MAX_FATBIN_RECORDS} fatbin containers and entries" in error


def test_padding_between_real_containers_is_still_counted_as_headers(tmp_path: Path) -> None:
    """One real container after 1 MiB + 8 bytes of zero padding, then 24 bytes of trailing zeros:
    the entry is found, every byte is either the entry's or a header's."""
    entry = struct.pack("<HHIQIIHHIIIQQQ", 2, 0, 64, 32, 0, 0, 0, 0, 90, 0, 0, 0x100000, 0, 0) + bytes(32)
    container = struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(entry)) + entry
    body = bytes(MiB + 8) + container + bytes(24)
    wheel = hostile_wheel(tmp_path, len(body), [body])
    done = size_under_cpu_limit(wheel)
    assert done.returncode == 0, done.stderr
    [obj] = [o for o in json.loads(done.stdout)["objects"] if o["path"] == SO]
    assert obj["fatbin"]["archs"] == [{"arch": "sm_90a", "kind": "cubin", "entries": 1, "size": 96, "uncompressed": 32}]
    assert obj["fatbin"]["headers"] == MiB + 8 + 16 + 24
