"""Operational errors of `assemble audit`: exit 2 with one line naming the culprit, never a traceback."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from tests.audit_fixtures.build import Objects, Wheels, audit_build_fixture, make_wheel  # noqa: F401 - fixture
from tests.conftest import run_assemble


def assert_exit_2(path: Path, *needles: str) -> None:
    done = run_assemble("audit", str(path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("error: ")
    for needle in needles:
        assert needle in first, first


def test_missing_path(tmp_path: Path) -> None:
    assert_exit_2(tmp_path / "nope.whl", "nope.whl", "no such file")


def test_zip_that_is_not_a_wheel(tmp_path: Path) -> None:
    path = tmp_path / "thing.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("lib/foo.so", b"\x7fELF")
    assert_exit_2(path, "thing.zip", "not a wheel")


def test_file_that_is_neither_wheel_nor_elf(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    assert_exit_2(path, "notes.txt", "not an ELF file")


def test_non_elf_member_is_no_object_for_audit_and_size_alike(tmp_path: Path) -> None:
    """A text file named like a shared object (a linker script) is not one: both `audit` and
    `size` judge members by content, list it as not ELF, and exit 0 (audit used to exit 2)."""
    wheel = make_wheel(tmp_path / "fake-1.0-cp39-abi3-linux_x86_64.whl", {"fake/_C.abi3.so": b"INPUT(-lc)\n" * 10})
    audited = run_assemble("audit", "--check", "all", "--json", str(wheel))
    assert audited.returncode == 0, audited.stderr
    report = json.loads(audited.stdout)
    assert report["extensions"] == [] and report["not_elf"] == ["fake/_C.abi3.so"]
    sized = run_assemble("size", "--json", str(wheel))
    assert sized.returncode == 0, sized.stderr
    assert json.loads(sized.stdout)["objects"] == []
    (tmp_path / "libfake.so").write_bytes(b"INPUT(-lc)\n")  # a file given by itself: the same answer
    alone = run_assemble("audit", "--json", str(tmp_path / "libfake.so"))
    assert alone.returncode == 0 and json.loads(alone.stdout)["not_elf"] == ["libfake.so"]


@pytest.mark.integration
def test_truncated_elf_member(audit_build: tuple[Objects, Wheels], tmp_path: Path) -> None:
    head = audit_build[0].stable.read_bytes()[:6000]  # headers and symbol tables, no .dynamic
    wheel = make_wheel(tmp_path / "cut-1.0-cp39-abi3-linux_x86_64.whl", {"cut/_C.abi3.so": head})
    assert_exit_2(wheel, "cut/_C.abi3.so", "truncated ELF")


@pytest.mark.integration
def test_truncated_shared_object_file(audit_build: tuple[Objects, Wheels], tmp_path: Path) -> None:
    path = tmp_path / "cut.so"
    path.write_bytes(audit_build[0].plain.read_bytes()[:40])
    assert_exit_2(path, "cut.so", "truncated ELF")


@pytest.mark.integration
def test_corrupt_member_data(audit_build: tuple[Objects, Wheels], tmp_path: Path) -> None:
    wheel = tmp_path / "good-1.0-cp39-abi3-linux_x86_64.whl"
    shutil.copy(audit_build[1].good, wheel)
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("good/stable_ops.abi3.so")
    data = bytearray(wheel.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[start : start + 64] = b"\xff" * 64  # the first deflate block no longer decodes
    wheel.write_bytes(bytes(data))
    assert_exit_2(wheel, "good/stable_ops.abi3.so", "corrupt")


@pytest.mark.integration
def test_cut_wheel(audit_build: tuple[Objects, Wheels], tmp_path: Path) -> None:
    wheel = tmp_path / "good-1.0-cp39-abi3-linux_x86_64.whl"
    wheel.write_bytes(audit_build[1].good.read_bytes()[:-5000])  # the central directory is gone
    assert_exit_2(wheel, wheel.name, "not a readable wheel")


@pytest.mark.parametrize("refresh", [False, True])
def test_missing_torch_table(tmp_path: Path, refresh: bool) -> None:
    table = tmp_path / "table.json"
    so = tmp_path / "notes.txt"
    so.write_text("hello\n")
    args = ["--refresh-torch-table"] if refresh else [str(so)]
    done = run_assemble("audit", *args, "--torch-table", str(table))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert (done.stderr.startswith(f"error: {table}")
            or done.stderr.startswith(f"error: cannot read the torch shim table {table}"))
