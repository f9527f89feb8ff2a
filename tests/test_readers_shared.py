"""One set of binary readers (issue 31, item 5): `size` finds sections with audit.elf's public
``find_section`` (no private ``_table`` borrowed across packages), the zip index is zipfile's
(benchmarks/readers.py: the hand walk was no faster), and what zipfile lets through that a wheel
read in place must not (a NUL in a name, which zipfile cuts the name at) is still refused."""

from __future__ import annotations

import ast
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from assembler.audit.elf import find_section
from assembler.audit.member import FileSource, open_member
from assembler.audit.zipindex import read_index
from tests.conftest import run_assemble
from tests.hostile_wheels import WHEEL_NAME, Archive, compile_seed, wheel_entries

ROOT = Path(__file__).resolve().parent.parent
SOURCE = """
__attribute__((section(".nv_fatbin"), used)) const unsigned char fatbin[3000] = {1, 2, 3};
__attribute__((section(".other"), used)) const unsigned char other[40] = {4};
unsigned char zeros[4096];  /* .bss: SHT_NOBITS, no bytes in the file */
int f(void) { return fatbin[0] + other[0] + zeros[0]; }
"""


@pytest.fixture(scope="module")
def shared_object(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real shared object, built by cc, with a ``.nv_fatbin`` section."""
    out = tmp_path_factory.mktemp("sections")
    (out / "s.c").write_text(SOURCE)
    subprocess.run(["cc", "-O1", "-fPIC", "-shared", "-o", str(out / "s.so"), str(out / "s.c")], check=True,
                   capture_output=True)
    return out / "s.so"


def pyelftools_section(path: Path, name: str) -> tuple[int, int] | None:
    with path.open("rb") as f:
        section = ELFFile(f).get_section_by_name(name)
        return (None if section is None or section["sh_type"] == "SHT_NOBITS"
                else (section["sh_offset"], section["sh_size"]))


def test_find_section_agrees_with_pyelftools(shared_object: Path, tmp_path: Path) -> None:
    """On disk and deflated in a wheel, where `assemble size` reads .nv_fatbin from."""
    source = FileSource(str(shared_object), shared_object.name)
    try:
        for name in (".nv_fatbin", ".other", ".dynsym", ".bss", ".absent"):
            assert find_section(source, name) == pyelftools_section(shared_object, name), name
    finally:
        source.close()
    wheel = Archive(wheel_entries({"pkg/_C.abi3.so": shared_object.read_bytes()})).write(tmp_path / WHEEL_NAME)
    [info] = read_index(str(wheel), re.compile(rb"\.so$"))
    member = open_member(info)
    try:
        assert find_section(member, ".nv_fatbin") == pyelftools_section(shared_object, ".nv_fatbin")
    finally:
        member.close()


def test_no_private_reader_name_leaves_the_audit_package() -> None:
    """Every module outside assembler/audit uses the readers' public functions only."""
    found = []
    for path in sorted((ROOT / "assembler").rglob("*.py")):
        if path.parent.name == "audit":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("assembler.audit"):
                found += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_")]
    assert not found, found


def test_read_index_is_zipfiles_view(shared_object: Path, tmp_path: Path) -> None:
    """Data prepended to the archive and ZIP64 extra fields, as zipfile reads them; members read in
    place give zipfile's bytes."""
    plain = tmp_path / "plain.whl"
    with zipfile.ZipFile(plain, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        with archive.open("pkg/_C.abi3.so", "w", force_zip64=True) as out:
            out.write(shared_object.read_bytes())
        archive.writestr(zipfile.ZipInfo("pkg/stored.txt"), b"stored" * 100)
    wheel = tmp_path / WHEEL_NAME
    wheel.write_bytes(b"#!/bin/sh\nexit 0\n" + plain.read_bytes())  # a stub in front: offsets move
    infos = read_index(str(wheel), re.compile(rb""))
    with zipfile.ZipFile(wheel) as archive:
        assert [(i.name, i.header_offset, i.compress_size, i.file_size) for i in infos] == [
            (z.filename, z.header_offset, z.compress_size, z.file_size) for z in archive.infolist()]
        for info in infos:
            member = open_member(info)
            try:
                assert member.read(0, member.size) == archive.read(info.name), info.name
            finally:
                member.close()


def test_a_nul_in_a_member_name_is_refused(tmp_path: Path) -> None:
    """zipfile cuts a name at its first NUL (``pkg/x.txt\\0.so`` would read as ``pkg/x.txt``); the
    audit judges the name as written, and refuses it in one line."""
    seed = compile_seed(tmp_path).read_bytes()
    entries = wheel_entries({"pkg/_C.abi3.so": seed})
    entries[0].name = b"pkg/x.txt\x00.abi3.so"
    wheel = Archive(entries).write(tmp_path / WHEEL_NAME)
    done = run_assemble("audit", str(wheel))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 2, done.stderr
    assert "pkg/x.txt\\x00.abi3.so" in done.stderr and "control characters" in done.stderr, done.stderr
