"""The reproducible zip writer: chunked parallel deflate, raw member copies, headers."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from assembler.wheel.artifact import PACK_RECORD, archive_payload, pack_files
from assembler.wheel.writer import CHUNK, ZIP_EPOCH, ReproducibleZip, resolve_epoch, urlsafe_digest

# Compressible and incompressible stretches, crossing several chunk boundaries.
BIG = (b"kernel " * 300_000) + os.urandom(CHUNK + 12_345) + bytes(CHUNK * 2)


def _local_header(path: Path, info: zipfile.ZipInfo) -> tuple[int, int, int, int]:
    """(flags, crc, compressed size, size) from the member's local header."""
    with path.open("rb") as handle:
        handle.seek(info.header_offset)
        fields = struct.unpack("<4s2B4HL2L2H", handle.read(30))
    return fields[3], fields[7], fields[8], fields[9]


def _check_headers(path: Path) -> None:
    """Local headers agree with the central directory (zipfile itself does not check this)."""
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None
        for info in archive.infolist():
            assert _local_header(path, info) == (info.flag_bits, info.CRC, info.compress_size, info.file_size)
    if shutil.which("unzip"):
        subprocess.run(["unzip", "-tqq", str(path)], check=True)


def test_chunked_deflate_is_one_valid_stream_independent_of_threads(tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    source.write_bytes(BIG)
    outputs = []
    for jobs in (1, 3):
        target = tmp_path / f"out{jobs}.zip"
        with ReproducibleZip(target, epoch=ZIP_EPOCH, jobs=jobs) as archive:
            written = archive.write_file("pkg/big.bin", source)
            archive.write_bytes("pkg/same.bin", BIG)
        _check_headers(target)
        with zipfile.ZipFile(target) as check:
            assert check.read("pkg/big.bin") == BIG == check.read("pkg/same.bin")
            a, b = check.infolist()
        assert a.compress_size < len(BIG) * 0.7
        assert written.sha256 == urlsafe_digest(hashlib.sha256(BIG).digest()) and written.size == len(BIG)
        outputs.append(target.read_bytes())
        # A file and the same bytes in memory deflate identically (loose vs packed artifacts).
        assert _raw(target, a) == _raw(target, b)
    assert outputs[0] == outputs[1]


def _raw(path: Path, info: zipfile.ZipInfo) -> bytes:
    with path.open("rb") as handle:
        handle.seek(info.header_offset)
        fields = struct.unpack("<4s2B4HL2L2H", handle.read(30))
        handle.seek(info.header_offset + 30 + fields[10] + fields[11])
        return handle.read(info.compress_size)


def test_copy_member_copies_compressed_bytes(tmp_path: Path) -> None:
    files = tmp_path / "files"
    (files / "pkg").mkdir(parents=True)
    (files / "pkg" / "big.bin").write_bytes(BIG)
    (files / "pkg" / "empty.py").write_bytes(b"")
    pack = pack_files(files, tmp_path / "files.zip", jobs=2)
    payload = archive_payload(pack)
    assert [p.relpath for p in payload] == ["pkg/big.bin", "pkg/empty.py"]
    assert all(p.sha256 for p in payload)  # from the pack's RECORD
    with zipfile.ZipFile(pack) as archive:
        assert PACK_RECORD in archive.namelist()
        source_raw = _raw(pack, archive.getinfo("pkg/big.bin"))

    merged = tmp_path / "merged.zip"
    with ReproducibleZip(merged, epoch=ZIP_EPOCH) as archive:
        copied = archive.copy_member("x/big.bin", payload[0].member, payload[0].sha256)  # type: ignore[arg-type]
        computed = archive.copy_member("x/again.bin", payload[0].member, None)  # type: ignore[arg-type]
        archive.copy_member("x/empty.py", payload[1].member, payload[1].sha256)  # type: ignore[arg-type]
    _check_headers(merged)
    assert copied.sha256 == computed.sha256 == urlsafe_digest(hashlib.sha256(BIG).digest())
    assert copied.head == BIG[:4]
    with zipfile.ZipFile(merged) as archive:
        assert _raw(merged, archive.getinfo("x/big.bin")) == source_raw
        assert archive.read("x/again.bin") == BIG and archive.read("x/empty.py") == b""
        assert archive.getinfo("x/big.bin").external_attr >> 16 == 0o100644


def test_stored_members_are_deflated_like_loose_files(tmp_path: Path) -> None:
    stored = tmp_path / "stored.whl"
    with zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("lib/libx.so.1", BIG)
    [item] = archive_payload(stored)
    loose = tmp_path / "libx.so.1"
    loose.write_bytes(BIG)
    out = tmp_path / "out.zip"
    with ReproducibleZip(out, epoch=ZIP_EPOCH, jobs=2) as archive:
        from_stored = archive.copy_member("a/libx.so.1", item.member, None)  # type: ignore[arg-type]
        archive.write_file("b/libx.so.1", loose)
    _check_headers(out)
    with zipfile.ZipFile(out) as archive:
        a, b = archive.infolist()
        assert a.compress_type == zipfile.ZIP_DEFLATED and _raw(out, a) == _raw(out, b)
        assert a.external_attr >> 16 == 0o100755  # versioned shared object
    assert from_stored.sha256 == urlsafe_digest(hashlib.sha256(BIG).digest())


def test_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert resolve_epoch() == ZIP_EPOCH
    assert resolve_epoch(0) == ZIP_EPOCH  # zip cannot hold times before 1980
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert resolve_epoch() == 1_700_000_000
    assert resolve_epoch(1_600_000_000) == 1_600_000_000
