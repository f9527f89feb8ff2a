# ruff: noqa: F811  (the fixtures of tests/test_wheel_merge.py are imported, then requested by name)
"""Issue 21, item 3: `merge` reads artifacts as data, never trusting them.

Each case starts from the real artifacts of tests/test_wheel_merge.py (gcc-built abi3
extensions), packed as `assemble build` packs them, then lies: a RECORD digest that is not the
member's, a member whose bytes were flipped (its CRC no longer holds), a declared size that is
not the inflated one, a RECORD that inflates past its limit (a bomb) or past its declared size,
links and FIFOs in loose ``files/``, a ``files.zip`` that is a link. Each is refused with one
error naming the artifact and the member, and no wheel is written (so there is none for `audit`
to pass).
"""

from __future__ import annotations

import os
import shutil
import struct
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest

from assembler.errors import InputError
from assembler.wheel.artifact import PACK_NAME, PACK_RECORD, RECORD_LIMIT, pack_files
from tests.conftest import run_assemble
from tests.test_wheel_merge import _merge, built, workspace  # noqa: F401  (fixtures)

TABLE = "ops/kernels/table.bin"  # 1 MiB of a pattern, then 3 MiB of random bytes


def _pack(workspace: Path, dep: str) -> Path:
    """Pack ``dep``'s loose files as `assemble build` does and drop the loose copy."""
    root = workspace / "artifacts" / dep
    pack = pack_files(root / "files", root / PACK_NAME, jobs=2)
    shutil.rmtree(root / "files")
    return pack


def _rewrite(pack: Path, record: bytes) -> None:
    """The same members (deflated again) with ``record`` as the RECORD."""
    with zipfile.ZipFile(pack) as source:
        members = [(info.filename, source.read(info)) for info in source.infolist() if info.filename != PACK_RECORD]
    with zipfile.ZipFile(pack, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in members:
            out.writestr(name, data)
        out.writestr(PACK_RECORD, record)


def _refused(workspace: Path, match: str, jobs: int = 2) -> InputError:
    with pytest.raises(InputError, match=match) as raised:
        _merge(workspace, cuda="13.2", jobs=jobs)
    assert not list((workspace / "dist").glob("*.whl")) if (workspace / "dist").exists() else True
    return raised.value


def test_a_record_digest_that_is_not_the_members_is_refused(workspace: Path) -> None:
    pack = _pack(workspace, "ops")
    with zipfile.ZipFile(pack) as archive:
        record = archive.read(PACK_RECORD).decode()
    line = next(row for row in record.splitlines() if row.startswith(f"{TABLE},"))
    forged = record.replace(line, f"{TABLE},sha256={'A' * 43},{line.rsplit(',', 1)[1]}")
    _rewrite(pack, forged.encode())
    error = _refused(workspace, "RECORD says")
    assert f"{pack}: member {TABLE}" in error.message and "A" * 43 in error.message
    done = run_assemble("-C", str(workspace), "merge", "artifacts", "--cuda", "13.2", "--json")
    assert done.returncode == 2 and '"RECORD says' not in done.stdout  # one error, no wheel for audit
    assert not list((workspace / "dist").glob("*.whl"))


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_member_whose_bytes_changed_is_refused(workspace: Path, jobs: int) -> None:
    """A flipped byte inside the deflated data, CRC left as it was: today copied as it is."""
    pack = _pack(workspace, "ops")
    with zipfile.ZipFile(pack) as archive:
        info = archive.getinfo(TABLE)
    data = bytearray(pack.read_bytes())
    name_len, extra_len = struct.unpack_from("<2H", data, info.header_offset + 26)
    at = info.header_offset + 30 + name_len + extra_len + info.compress_size - 4096  # in the random part
    data[at] ^= 0x40
    pack.write_bytes(bytes(data))
    error = _refused(workspace, "CRC-32|corrupt deflate|inflates to", jobs=jobs)
    assert f"{pack}: member {TABLE}" in error.message


def test_a_declared_size_that_is_not_the_inflated_one_is_refused(workspace: Path) -> None:
    pack = _pack(workspace, "ops")
    with zipfile.ZipFile(pack) as archive:
        info = archive.getinfo("ops/__init__.py")
    data = bytearray(pack.read_bytes())
    struct.pack_into("<L", data, _central_entry(data, info.filename) + 24, info.file_size + 7)
    pack.write_bytes(bytes(data))
    _refused(workspace, r"member ops/__init__\.py: inflates to 0 bytes, its zip declares 7")


def _central_entry(data: bytes | bytearray, name: str) -> int:
    """Where ``name``'s central directory entry starts."""
    at = data.index(b"PK\x01\x02")
    while data[at:at + 4] == b"PK\x01\x02":
        name_len, extra_len, comment_len = struct.unpack_from("<3H", data, at + 28)
        if data[at + 46:at + 46 + name_len] == name.encode():
            return at
        at += 46 + name_len + extra_len + comment_len
    raise AssertionError(f"no central entry for {name}")


def _bomb(size: int) -> tuple[bytes, int]:
    """A deflate stream of ``size`` bytes of RECORD lines, and their CRC."""
    line = b"ops/x.py,sha256=" + b"A" * 43 + b",1\n"
    block = line * ((1 << 20) // len(line))
    compressor, crc, pieces, done = zlib.compressobj(9, zlib.DEFLATED, -15), 0, [], 0
    while done < size:
        pieces.append(compressor.compress(block))
        crc, done = zlib.crc32(block, crc), done + len(block)
    return b"".join(pieces) + compressor.flush(), crc


def _with_raw_record(pack: Path, stream: bytes, crc: int, declared: int) -> None:
    """Append a RECORD member with these deflated bytes and this declared size, as a bomb would."""
    with zipfile.ZipFile(pack) as source:
        members = [(info.filename, source.read(info)) for info in source.infolist() if info.filename != PACK_RECORD]
    with zipfile.ZipFile(pack, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in members:
            out.writestr(name, data)
        info = zipfile.ZipInfo(PACK_RECORD)
        info.compress_type, info.CRC, info.file_size, info.compress_size = (zipfile.ZIP_DEFLATED, crc, declared,
                                                                            len(stream))
        assert out.fp is not None
        info.header_offset = out.fp.tell()
        out.fp.write(info.FileHeader())
        out.fp.write(stream)
        out.filelist.append(info)
        out.NameToInfo[info.filename] = info
        out.start_dir = out.fp.tell()


def test_a_record_bomb_is_refused_unread(workspace: Path) -> None:
    """A RECORD over its limit (a few hundred KB that inflate to 65 MiB here, 2 GB in the issue)
    is refused from its declared size: not inflated, not held."""
    pack = _pack(workspace, "ops")
    stream, crc = _bomb(RECORD_LIMIT + (1 << 20))
    _with_raw_record(pack, stream, crc, RECORD_LIMIT + (1 << 20))
    assert len(stream) < (1 << 20)
    tracemalloc.start()
    try:
        _refused(workspace, f"RECORD declares {RECORD_LIMIT + (1 << 20)} bytes, over the limit of {RECORD_LIMIT}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < RECORD_LIMIT // 2  # inflating it would hold more than RECORD_LIMIT


def test_a_record_that_inflates_past_its_declared_size_is_refused(workspace: Path) -> None:
    pack = _pack(workspace, "ops")
    stream, crc = _bomb(8 << 20)
    _with_raw_record(pack, stream, crc, 4096)  # declares 4 KB: zipfile stops there, the CRC fails
    _refused(workspace, "not a readable zip .*CRC")


@pytest.mark.parametrize("kind", ["file link", "directory link", "fifo", "link inside"])
def test_loose_files_are_regular_files_only(workspace: Path, tmp_path: Path, kind: str) -> None:
    """A link is never followed to a file of the merging machine; a FIFO never hangs the merge."""
    files = workspace / "artifacts" / "vecadd" / "files" / "vecadd"
    secret = tmp_path / "outside-secret.py"
    secret.write_text("token = 'of the machine that merges'\n")
    if kind == "file link":
        (files / "evil.py").symlink_to(secret)
    elif kind == "directory link":
        (files / "evil").symlink_to(tmp_path)
    elif kind == "fifo":
        os.mkfifo(files / "pipe.py")
    else:
        (files / "again.py").symlink_to("__init__.py")
    error = _refused(workspace, "symbolic link in an artifact" if "link" in kind else "not a regular file")
    assert str(files) in error.message


def test_a_packed_archive_that_is_a_link_is_refused(workspace: Path, tmp_path: Path) -> None:
    pack = _pack(workspace, "ops")
    elsewhere = tmp_path / "elsewhere.zip"
    pack.rename(elsewhere)
    pack.symlink_to(elsewhere)
    _refused(workspace, "is a symbolic link: an artifact's archive must be a regular file")


def test_an_honest_packed_artifact_still_merges(workspace: Path) -> None:
    """The checks cost an inflate per member, not the result: the same wheel as before."""
    loose = _merge(workspace, "loose", cuda="13.2").wheel.read_bytes()
    _pack(workspace, "ops")
    _pack(workspace, "vecadd")
    for jobs in (1, 3):
        assert _merge(workspace, f"packed{jobs}", cuda="13.2", jobs=jobs).wheel.read_bytes() == loose


@pytest.mark.parametrize("profile", ["../../release", "Smoke", 7, ""])
def test_a_profile_that_is_no_profile_name_is_refused_never_a_silent_full_build(workspace: Path,
                                                                                profile: object) -> None:
    """artifact.json's "profile" is data from a CI runner: a path, a number or a name no
    manifest could declare is refused (naming the file), and no wheel is written."""
    import json

    where = workspace / "artifacts" / "ops" / "artifact.json"
    data = json.loads(where.read_text())
    where.write_text(json.dumps({**data, "profile": profile}))
    error = _refused(workspace, "'profile'")
    assert str(where) in error.message


def test_a_profile_in_artifact_json_reaches_the_wheels_provenance(workspace: Path) -> None:
    """The artifact's own record decides (not deps.toml), and the merged wheel's assembler.json says it."""
    import json

    where = workspace / "artifacts" / "ops" / "artifact.json"
    where.write_text(json.dumps({**json.loads(where.read_text()), "profile": "smoke"}))
    result = _merge(workspace, cuda="13.2", jobs=2)
    assert result.provenance["ops"]["profile"] == "smoke"
    assert "+cu132.smoke" in result.version
