"""Reading wheel members in place: the deflate tail seek, lazy inflation, and the ELF reader must give
exactly what a full extraction read by pyelftools gives."""

from __future__ import annotations

import random
import re
import zipfile
import zlib
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from assembler.audit import deflate
from assembler.audit.elf import DynamicInfo, read_dynamic
from assembler.audit.member import DeflatedMember, MemberInfo, open_member
from assembler.audit.zipindex import read_index
from tests.audit_fixtures.build import Objects, Wheels, audit_build_fixture, make_wheel  # noqa: F401 - fixture


def reference(path: Path) -> DynamicInfo:
    """What pyelftools reads from the extracted file (section headers, as nm does)."""
    with path.open("rb") as f:
        elf = ELFFile(f)
        symbols = tuple(
            (s.name, s["st_shndx"] != "SHN_UNDEF", s["st_info"]["bind"] == "STB_LOCAL",
             s["st_info"]["bind"] == "STB_WEAK")
            for i, s in enumerate(elf.get_section_by_name(".dynsym").iter_symbols())
            if i
        )
        needed = tuple(t.needed for t in elf.get_section_by_name(".dynamic").iter_tags()
                       if t.entry.d_tag == "DT_NEEDED")
    return DynamicInfo(symbols=symbols, needed=needed, soname=None)  # type: ignore[arg-type]


def member(wheel: Path, name: str) -> MemberInfo:
    with zipfile.ZipFile(wheel) as zf:
        i = zf.getinfo(name)
    return MemberInfo(str(wheel), name, i.header_offset, i.compress_type, i.compress_size, i.file_size)


def same(info: DynamicInfo, ref: DynamicInfo) -> bool:
    return tuple(tuple(s) for s in info.symbols) == ref.symbols and info.needed == ref.needed


def _mixed(size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    words = [rng.randbytes(rng.randrange(3, 12)) for _ in range(300)]
    out = bytearray()
    while len(out) < size:
        kind = rng.random()
        if kind < 0.5:
            out += b" ".join(rng.choice(words) for _ in range(200))
        elif kind < 0.8:
            out += rng.randbytes(3000)  # incompressible stretches: stored blocks
        else:
            out += out[-rng.randrange(1, 30000) :][:4000] if out else b"x"
    return bytes(out[:size])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tail_decode_matches_the_original_bytes(seed: int) -> None:
    data = _mixed(6 << 20, seed)
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    packed = packer.compress(data) + packer.flush()
    for keep in (1000, 50_000, 700_000):
        tail = deflate.read_tail(
            lambda off, n: packed[off : off + n], len(packed), len(data), len(data) - keep, budget=len(packed)
        )
        assert tail is not None, keep
        assert tail.offset == len(data) - keep and tail.data == data[-keep:]


def test_tail_of_a_random_stream_comes_from_stored_blocks() -> None:
    data = random.Random(7).randbytes(3 << 20)
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    packed = packer.compress(data) + packer.flush()
    tail = deflate.read_tail(lambda off, n: packed[off : off + n], len(packed), len(data), len(data) - 4096,
                             len(packed))
    assert tail is not None and tail.data == data[-4096:]


@pytest.mark.integration
def test_big_member_is_read_from_both_ends_and_agrees_with_pyelftools(audit_build: tuple[Objects, Wheels]) -> None:
    objects, wheels = audit_build
    src = open_member(member(wheels.good, "good/big_ops.abi3.so"))
    assert isinstance(src, DeflatedMember)
    info = read_dynamic(src)
    assert src.used_tail  # .dynamic and the section headers came from the decoded tail
    assert same(info, reference(objects.big))
    assert len(src._head) <= 1 << 20  # the first inflate piece, not the 24 MiB of data after it
    src.close()


@pytest.mark.integration
def test_without_section_headers_the_tail_is_not_trusted(audit_build: tuple[Objects, Wheels], tmp_path: Path) -> None:
    objects, _ = audit_build
    raw = bytearray(objects.big.read_bytes())
    raw[0x28:0x30] = bytes(8)  # e_shoff = 0: nothing to cross-check a decoded tail with
    raw[0x3C:0x40] = bytes(4)  # e_shnum = e_shstrndx = 0
    wheel = make_wheel(tmp_path / "stripped-1.0-cp39-abi3-linux_x86_64.whl", {"s/big.abi3.so": bytes(raw)})
    src = open_member(member(wheel, "s/big.abi3.so"))
    info = read_dynamic(src)
    assert not src.used_tail  # fell back to inflating up to .dynamic
    assert same(info, reference(objects.big))  # symbol count from DT_GNU_HASH equals the section's


@pytest.mark.integration
def test_random_access_reads_equal_the_file(audit_build: tuple[Objects, Wheels]) -> None:
    objects, wheels = audit_build
    truth = objects.big.read_bytes()
    src = open_member(member(wheels.good, "good/big_ops.abi3.so"))
    rng = random.Random(5)
    for _ in range(40):
        offset = rng.randrange(len(truth) - 70_000)
        length = rng.randrange(1, 70_000)
        assert src.read(offset, length) == truth[offset : offset + length]
    assert src.read(0, 64) == truth[:64] and src.read(len(truth) - 10, 10) == truth[-10:]
    src.close()


@pytest.mark.integration
def test_stored_members_read_directly(audit_build: tuple[Objects, Wheels], tmp_path: Path) -> None:
    objects, _ = audit_build
    wheel = tmp_path / "stored-1.0-cp39-abi3-linux_x86_64.whl"
    make_wheel(wheel, {})
    with zipfile.ZipFile(wheel, "a", zipfile.ZIP_STORED) as zf:
        zf.write(objects.unstable, "stored/unstable_ops.abi3.so")
    src = open_member(member(wheel, "stored/unstable_ops.abi3.so"))
    assert same(read_dynamic(src), reference(objects.unstable))


def test_central_directory_index_matches_zipfile(tmp_path: Path) -> None:
    path = tmp_path / "z-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("z-1.0.dist-info/WHEEL", "Tag: py3-none-any\n")
        zf.writestr("z/plain.so", b"x" * 1000)
        zf.writestr("z/ünïcode.so.1", b"y" * 10, compress_type=zipfile.ZIP_STORED)
        with zf.open("z/zip64.so", "w", force_zip64=True) as out:  # ZIP64 extra field for its sizes
            out.write(b"z" * 5000)
        zf.writestr("z/README", "not a shared object")
    prefixed = tmp_path / "prefixed.zip"  # data in front of the archive, as in self-extracting zips
    prefixed.write_bytes(b"#!/bin/sh\nexit 0\n" + path.read_bytes())
    wanted = re.compile(rb"\.so(\.\d+)*$|WHEEL$")
    for archive in (path, prefixed):
        mine = {m.name: m for m in read_index(str(archive), wanted)}
        with zipfile.ZipFile(archive) as zf:
            theirs = {i.filename: i for i in zf.infolist() if wanted.search(i.filename.encode())}
        assert set(mine) == set(theirs) == {"z-1.0.dist-info/WHEEL", "z/plain.so", "z/ünïcode.so.1", "z/zip64.so"}
        for name, info in theirs.items():
            m = mine[name]
            got = (m.compress_type, m.compress_size, m.file_size)
            assert got == (info.compress_type, info.compress_size, info.file_size), name
            src = open_member(m)
            with zipfile.ZipFile(archive) as zf:
                assert src.read(0, m.file_size) == zf.read(name)
