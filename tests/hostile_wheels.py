"""Builders of hostile wheels and ELF files for the audit's regression and fuzz tests.

``zipfile`` refuses to write most of what an attacker would (lying sizes, short ZIP64 extra
fields, non-UTF-8 names flagged UTF-8), so archives are laid out here byte by byte, following
APPNOTE: local headers, data, central directory, end record.  The seed shared object is a real
one, compiled once per session with the system C compiler.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1 << 20

SEED_C = """\
/* A tiny extension: one torch stable-shim call, one limited-API call, one entry point. */
extern void aoti_torch_get_current_cuda_stream(void);
extern void *PyLong_FromLong(long);
void kernel(void) { aoti_torch_get_current_cuda_stream(); PyLong_FromLong(1); }
void *PyInit_seed(void) { return 0; }
"""

DT_STRSZ = 10


def compile_seed(out: Path) -> Path:
    """A real ELF shared object built by ``cc -shared`` (about 15 KB)."""
    source = out / "seed.c"
    source.write_text(SEED_C)
    so = out / "seed.so"
    subprocess.run(["cc", "-O1", "-fPIC", "-shared", "-o", str(so), str(source)], check=True, capture_output=True)
    return so


def dynamic_value_offsets(elf: bytes) -> dict[int, int]:
    """File offset of each ``.dynamic`` entry's value, by tag (ELF64 little-endian, as ``cc`` builds here)."""
    phoff, phentsize, phnum = struct.unpack_from("<Q", elf, 32)[0], *struct.unpack_from("<HH", elf, 54)
    for i in range(phnum):
        p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type == 2:  # PT_DYNAMIC
            found: dict[int, int] = {}
            for at in range(p_offset, p_offset + p_filesz, 16):
                tag = struct.unpack_from("<q", elf, at)[0]
                if tag == 0:
                    break
                found.setdefault(tag, at + 8)
            return found
    raise ValueError("no PT_DYNAMIC")


def header_field_offsets(elf: bytes) -> list[tuple[int, int]]:
    """(offset, width) of every size- or offset-like field a reader trusts: ELF header, program
    headers, section headers and ``.dynamic`` values (ELF64 little-endian)."""
    fields = [(24, 8), (32, 8), (40, 8), (52, 2), (54, 2), (56, 2), (58, 2), (60, 2), (62, 2)]
    phoff, shoff = struct.unpack_from("<QQ", elf, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", elf, 54)
    for i in range(phnum):
        base = phoff + i * phentsize
        fields += [(base, 4), *((base + k, 8) for k in (8, 16, 32, 40))]
    for i in range(shnum if shoff + shnum * shentsize <= len(elf) else 0):
        base = shoff + i * shentsize
        fields += [(base + 4, 4), *((base + k, 8) for k in (16, 24, 32, 56)), (base + 40, 4)]
    fields += [(at, 8) for at in dynamic_value_offsets(elf).values()]
    return fields


def deflate(data: bytes | Iterable[bytes], level: int = 6) -> bytes:
    """Raw deflate (as in a zip member) of ``data`` or of a stream of chunks (bombs never exist whole)."""
    encoder = zlib.compressobj(level, zlib.DEFLATED, -15)
    chunks = [data] if isinstance(data, bytes) else data
    return b"".join(encoder.compress(chunk) for chunk in chunks) + encoder.flush()


def zeros(size: int) -> Iterable[bytes]:
    """``size`` zero bytes in 1 MiB chunks."""
    for start in range(0, size, MiB):
        yield bytes(min(MiB, size - start))


@dataclass
class Entry:
    """One member as written: ``data`` is what the archive holds (already deflated for method 8)."""

    name: bytes
    data: bytes
    size: int  # declared uncompressed size
    method: int = 8
    flags: int = 0
    extra: bytes = b""
    crc: int = 0
    csize: int | None = None  # declared compressed size (default: len(data))
    central_extra: bytes | None = None  # extra field in the central directory (default: ``extra``)


def member(name: str | bytes, content: bytes, method: int = 8) -> Entry:
    raw = name.encode() if isinstance(name, str) else name
    data = deflate(content) if method == 8 else content
    return Entry(raw, data, len(content), method, crc=zlib.crc32(content))


@dataclass
class Archive:
    entries: list[Entry] = field(default_factory=list)

    def write(self, path: Path) -> Path:
        out = bytearray()
        central = bytearray()
        for e in self.entries:
            offset = len(out)
            csize = len(e.data) if e.csize is None else e.csize
            small = (min(csize, 0xFFFFFFFF), min(e.size, 0xFFFFFFFF))
            out += struct.pack(
                "<4s5H3L2H", b"PK\x03\x04", 20, e.flags, e.method, 0, 0x21, e.crc, *small, len(e.name), len(e.extra)
            )
            out += e.name + e.extra + e.data
            extra = e.extra if e.central_extra is None else e.central_extra
            central += struct.pack(
                "<4s6H3L5H2L", b"PK\x01\x02", 20, 20, e.flags, e.method, 0, 0x21, e.crc, *small,
                len(e.name), len(extra), 0, 0, 0, 0o100644 << 16, min(offset, 0xFFFFFFFF),
            )
            central += e.name + extra
        cd_offset = len(out)
        out += central
        out += struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(self.entries), len(self.entries), len(central),
                           cd_offset, 0)
        path.write_bytes(bytes(out))
        return path


def wheel_entries(objects: dict[str, bytes], method: int = 8, tag: str = "cp39-abi3-linux_x86_64") -> list[Entry]:
    """The members of a minimal wheel holding ``objects`` (WHEEL, METADATA; RECORD is not read)."""
    entries = [member(name, data, method) for name, data in objects.items()]
    entries.append(member("pkg-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n", method))
    entries.append(member("pkg-1.0.dist-info/WHEEL",
                          f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(), method))
    return entries


WHEEL_NAME = "pkg-1.0-cp39-abi3-linux_x86_64.whl"

_PEAK = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=300)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "peak_kib": peak}))
"""


@dataclass(frozen=True)
class Measured:
    returncode: int
    stdout: str
    stderr: str
    peak_mib: float  # peak resident set of the `assemble audit` process


def audit_with_peak(*args: str) -> Measured:
    """`assemble audit ARGS` in a fresh process whose peak RSS is read by its own parent (getrusage)."""
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, sys.executable, "-m", "assembler", "audit", *args],
        capture_output=True, text=True, check=True, env={**os.environ, "COLUMNS": "200"},
    )
    raw = json.loads(done.stdout)
    return Measured(raw["rc"], raw["stdout"], raw["stderr"], raw["peak_kib"] / 1024)
