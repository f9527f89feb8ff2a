"""Fuzzing `assemble audit` with hostile wheels and ELF files (issue 10).

Every input starts from a real shared object (``cc -shared``, once per session) and a minimal
wheel around it, then is mutated: truncated, bit-flipped, given lying sizes and offsets (in the
ELF headers, ``.dynamic``, the zip headers and end records), odd names and extra fields, or
turned into a bomb.  Each one is audited in-process through the CLI's own entry point
(``assembler.cli.main``, which maps AssembleError to its exit code), and must:

- exit 0, 1 or 2, with JSON on stdout for 0 and 1 and a single ``error:`` line for 2;
- raise nothing else (an exception escaping ``main`` is the traceback a user would see);
- never reach the ELF reader's catch-all for unforeseen layouts (each such case gets a check);
- stay under ``PEAK_BOUND_MIB`` of Python allocations (tracemalloc peak).

Deterministic (``derandomize``, no example database).  ``ASSEMBLE_FUZZ_EXAMPLES`` sets the
examples per test (default 150: the file runs in well under a minute on one core); for a longer
run: ``ASSEMBLE_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest -q tests/test_fuzz_audit.py``.
"""

from __future__ import annotations

import io
import json
import struct
import tempfile
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assembler.cli import main
from tests.fuzzing import fuzz_examples, fuzz_settings
from tests.hostile_wheels import (
    WHEEL_NAME,
    Archive,
    Entry,
    MiB,
    compile_seed,
    deflate,
    header_field_offsets,
    member,
    wheel_entries,
)

EXAMPLES = fuzz_examples(150)
PEAK_BOUND_MIB = 200
FUZZ = fuzz_settings(EXAMPLES)
RAN: Counter[str] = Counter()  # cases audited, by test; printed at the end (pytest -s)
OUTCOMES: Counter[int] = Counter()

LYING = [0, 1, 7, 8, 0x7F, 0xFF, 0xFFFF, 0x10000, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 32, 390 * MiB, 1 << 62, (1 << 64) - 1]


@cache
def seed_elf() -> bytes:
    return compile_seed(Path(tempfile.mkdtemp(prefix="fuzz-seed-"))).read_bytes()


@cache
def seed_fields() -> tuple[tuple[int, int], ...]:
    return tuple(header_field_offsets(seed_elf()))


@cache
def zero_stream(size: int) -> bytes:
    """Raw deflate of ``size`` zeros, ending the stream: appended after a sync-flushed prefix."""
    encoder = zlib.compressobj(1, zlib.DEFLATED, -15)
    return b"".join(encoder.compress(bytes(MiB)) for _ in range(size // MiB)) + encoder.flush()


def deflated_with_zeros(prefix: bytes, zeros_mib: int) -> bytes:
    encoder = zlib.compressobj(6, zlib.DEFLATED, -15)
    return encoder.compress(prefix) + encoder.flush(zlib.Z_SYNC_FLUSH) + zero_stream(zeros_mib * MiB)


@pytest.fixture(scope="module", autouse=True)
def warm_cli() -> Iterator[None]:
    """One parser for all cases (building it is 30 ms, ten times an audit) and the one-time imports
    and tables loaded before tracemalloc watches: each case then measures what the input costs."""
    import assembler.cli

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(assembler.cli, "build_parser", cache(assembler.cli.build_parser))
        with tempfile.TemporaryDirectory() as tmp:
            so = Path(tmp) / "seed.abi3.so"
            so.write_bytes(seed_elf())
            with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
                assert main(["audit", "--json", str(so)]) == 0
        yield
    print(f"\nfuzz cases audited: {dict(RAN)} total {sum(RAN.values())}; exit codes {dict(sorted(OUTCOMES.items()))}")


def audit(path: Path, test: str, *extra: str) -> int:
    """`assemble audit --json PATH` in-process; asserts the contract and returns the exit code."""
    out, err = io.StringIO(), io.StringIO()
    tracemalloc.start()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            rc = main(["audit", "--json", *extra, str(path)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    RAN[test] += 1
    OUTCOMES[rc] += 1
    stderr = err.getvalue()
    assert rc in (0, 1, 2), (rc, stderr)
    assert peak < PEAK_BOUND_MIB * MiB, f"peak {peak / MiB:.0f} MiB"
    assert "unexpected layout" not in stderr, stderr
    if rc == 2:
        lines = stderr.splitlines()
        assert lines and lines[0].startswith("error: "), stderr
        assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), stderr
    else:
        json.loads(out.getvalue())
    return rc


# ---------------------------------------------------------------- ELF mutations

def _truncate(data: bytes, n: int) -> bytes:
    return data[: n % (len(data) + 1)]


def _flip(data: bytes, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for at, bit in flips:
        out[at % len(out)] ^= 1 << bit
    return bytes(out)


def _lie(data: bytes, lies: list[tuple[int, int]]) -> bytes:
    """Overwrite header fields (chosen among the seed's size/offset fields) with lying values."""
    out = bytearray(data)
    fields = seed_fields()
    for which, value in lies:
        at, width = fields[which % len(fields)]
        out[at : at + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return bytes(out)


# headers cut: inside the ELF identification, the ELF header, the first program headers
short_cuts = st.sampled_from(range(20)) | st.sampled_from(range(20, 300))
cuts = short_cuts | st.integers(0, 1 << 20)
flips = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 7)), min_size=1, max_size=8)
lies = st.lists(st.tuples(st.integers(0, 1000), st.sampled_from(LYING) | st.integers(0, (1 << 64) - 1)), min_size=1,
                max_size=4)

elf_mutation: st.SearchStrategy[Callable[[bytes], bytes]] = st.one_of(
    short_cuts.map(lambda n: lambda d: _truncate(d, n)),
    cuts.map(lambda n: lambda d: _truncate(d, n)),
    flips.map(lambda f: lambda d: _flip(d, f)),
    lies.map(lambda f: lambda d: _lie(d, f)),
    st.tuples(lies, cuts).map(lambda t: lambda d: _truncate(_lie(d, t[0]), t[1])),
    st.tuples(lies, flips).map(lambda t: lambda d: _flip(_lie(d, t[0]), t[1])),
)


@FUZZ
@given(mutate=elf_mutation, check=st.booleans())
def test_fuzz_elf(tmp_path: Path, mutate: Callable[[bytes], bytes], check: bool) -> None:
    """Each mutated object three ways: a file (pread), a stored member, a deflated member."""
    elf = mutate(seed_elf())
    path = tmp_path / "fuzz.abi3.so"
    path.write_bytes(elf)
    extra = ["--check", "all"] if check else []
    rcs = [audit(path, "elf", *extra)]
    for method in (0, 8):
        wheel = Archive(wheel_entries({"pkg/_C.abi3.so": elf}, method=method)).write(tmp_path / WHEEL_NAME)
        rcs.append(audit(wheel, "elf", *extra))
    # Where the bytes live does not change the outcome (a wheel's abi3 tag may, under --check).
    assert rcs[1] == rcs[2] and (check or rcs[0] == rcs[1]), rcs


@FUZZ
@given(lie=lies, zeros_mib=st.integers(1, 16), declared=st.sampled_from(["exact", "short", "long"]))
def test_fuzz_elf_bomb(tmp_path: Path, lie: list[tuple[int, int]], zeros_mib: int, declared: str) -> None:
    """An ELF with lying headers, padded with megabytes of zeros that deflate to almost nothing."""
    elf = _lie(seed_elf(), lie)
    size = len(elf) + zeros_mib * MiB
    size = {"exact": size, "short": size // 2, "long": size + MiB}[declared]
    so = Entry(b"pkg/_C.abi3.so", deflated_with_zeros(elf, zeros_mib), size)
    path = Archive([so, *wheel_entries({})]).write(tmp_path / WHEEL_NAME)
    audit(path, "elf-bomb")


# ---------------------------------------------------------------- wheel mutations

_CENTRAL_FIELDS = [(8, 2), (10, 2), (20, 4), (24, 4), (28, 2), (30, 2), (32, 2), (42, 4)]
_LOCAL_FIELDS = [(6, 2), (8, 2), (18, 4), (22, 4), (26, 2), (28, 2)]
_END_FIELDS = [(8, 2), (10, 2), (12, 4), (16, 4), (20, 2)]


def _zip_fields(data: bytes) -> list[tuple[int, int]]:
    """(offset, width) of the size, offset, length and flag fields of every header in ``data``."""
    fields = []
    for signature, layout in ((b"PK\x01\x02", _CENTRAL_FIELDS), (b"PK\x03\x04", _LOCAL_FIELDS),
                              (b"PK\x05\x06", _END_FIELDS)):
        at = data.find(signature)
        while at >= 0:
            fields += [(at + k, w) for k, w in layout]
            at = data.find(signature, at + 1)
    return fields


@cache
def seed_wheel(method: int) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        return Archive(wheel_entries({"pkg/_C.abi3.so": seed_elf(), "pkg/libhelper.so.1": seed_elf()}, method)).write(
            Path(tmp) / WHEEL_NAME
        ).read_bytes()


def _lie_zip(data: bytes, lies: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    fields = _zip_fields(data)
    for which, value in lies:
        at, width = fields[which % len(fields)]
        out[at : at + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return bytes(out)


def _flip_tail(data: bytes, flips: list[tuple[int, int]]) -> bytes:
    """Bit flips in the central directory and end record (the last 400 bytes)."""
    start = max(0, len(data) - 400)
    return data[:start] + _flip(data[start:], flips)


wheel_mutation: st.SearchStrategy[Callable[[bytes], bytes]] = st.one_of(
    cuts.map(lambda n: lambda d: _truncate(d, n)),
    st.integers(1, 400).map(lambda n: lambda d: d[:-n]),
    flips.map(lambda f: lambda d: _flip(d, f)),
    flips.map(lambda f: lambda d: _flip_tail(d, f)),
    lies.map(lambda f: lambda d: _lie_zip(d, f)),
    st.tuples(lies, flips).map(lambda t: lambda d: _flip_tail(_lie_zip(d, t[0]), t[1])),
)


@FUZZ
@given(mutate=wheel_mutation, method=st.sampled_from([0, 8]))
def test_fuzz_wheel(tmp_path: Path, mutate: Callable[[bytes], bytes], method: int) -> None:
    path = tmp_path / WHEEL_NAME
    path.write_bytes(mutate(seed_wheel(method)))
    audit(path, "wheel")


@FUZZ
@given(
    name=st.binary(max_size=24).map(lambda b: b"pkg/" + b + b".so"),
    flags=st.sampled_from([0, 0x800, 0x801, 0x8]),
    method=st.sampled_from([0, 8, 12, 99]),
    marked=st.sets(st.sampled_from(["size", "csize"]), min_size=1, max_size=2) | st.just(set()),
    extra=st.one_of(
        st.binary(max_size=40),
        st.tuples(st.integers(0, 40), st.lists(st.integers(0, (1 << 64) - 1), max_size=3)).map(
            lambda t: struct.pack("<HH", 1, t[0]) + b"".join(struct.pack("<Q", v) for v in t[1])
        ),
    ),
)
def test_fuzz_member_header(
    tmp_path: Path, name: bytes, flags: int, method: int, marked: set[str], extra: bytes
) -> None:
    """Odd names (non-UTF-8, control characters), flags, methods and ZIP64 extra fields."""
    so = member(name, seed_elf(), 8 if method == 12 or method == 99 else method)
    so.method, so.flags, so.central_extra = method, flags, extra
    if "size" in marked:
        so.size = 0xFFFFFFFF
    if "csize" in marked:
        so.csize = 0xFFFFFFFF
    path = Archive([so, *wheel_entries({})]).write(tmp_path / WHEEL_NAME)
    audit(path, "member-header")


@FUZZ
@given(inflated_kib=st.integers(0, 1024) | st.integers(1024, 3 * 1024),
       declared=st.sampled_from(["exact", "short", "long", "huge"]))
def test_fuzz_wheel_file_bomb(tmp_path: Path, inflated_kib: int, declared: str) -> None:
    """The WHEEL file as a bomb, declaring its size truthfully or not."""
    text = b"Wheel-Version: 1.0\nTag: cp39-abi3-linux_x86_64\n" + bytes(inflated_kib * 1024)
    size = {"exact": len(text), "short": len(text) // 3, "long": len(text) + 10, "huge": 400 * MiB}[declared]
    bomb = Entry(b"pkg-1.0.dist-info/WHEEL", deflate(text), size)
    path = Archive([member("pkg/_C.abi3.so", seed_elf()), bomb]).write(tmp_path / WHEEL_NAME)
    rc = audit(path, "wheel-bomb")
    assert rc == (0 if declared == "exact" and len(text) <= MiB else 2)


def test_every_header_prefix(tmp_path: Path) -> None:
    """Not left to chance: the seed cut at every length through its ELF header, at each program
    header and around ``.dynamic`` and the section headers, each as a file and as a stored and
    a deflated member; where the bytes live never changes the outcome."""
    elf = seed_elf()
    phoff, shoff = struct.unpack_from("<QQ", elf, 32)
    phentsize, phnum = struct.unpack_from("<HH", elf, 54)
    cuts = set(range(65))  # every length through the ELF header
    cuts |= {phoff + i * phentsize + k for i in range(phnum + 1) for k in (0, 4, 8, 40)}  # program headers
    dynamic = sorted(at for at, width in seed_fields() if width == 8 and at > phoff + phentsize * phnum and at < shoff)
    cuts |= {dynamic[0] - 8, dynamic[0], dynamic[-1] + 8, shoff, shoff + 64, len(elf) - 1}
    for n in sorted(c for c in cuts if c <= len(elf)):
        path = tmp_path / "cut.abi3.so"
        path.write_bytes(elf[:n])
        rcs = [audit(path, "prefix")]
        for method in (0, 8):
            wheel = Archive(wheel_entries({"pkg/_C.abi3.so": elf[:n]}, method=method)).write(tmp_path / WHEEL_NAME)
            rcs.append(audit(wheel, "prefix"))
        # shorter than the ELF magic it is no shared object at all (not_elf, exit 0), wherever it lives
    assert len(set(rcs)) == 1 and (rcs[0] == 2 or n > phoff + phentsize * phnum or n < 4), (n, rcs)
