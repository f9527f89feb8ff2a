"""Zip entries that share bytes (issue 29, item 17): 200 central-directory entries pointing at one
local header made `audit` list 201 STABLE objects and `size` print a negative "(zip structure)".
pip refuses such a wheel; so does the one zip reader that `audit`, `size` and `sbom` use: every
entry's bytes, from its local header to the end of its data, must lie before the next entry's
local header and before the central directory (exit 2, naming both entries)."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest

from tests.conftest import run_assemble
from tests.hostile_wheels import WHEEL_NAME, Archive, compile_seed, member, wheel_entries

HINT = "pip refuses a wheel whose entries overlap"


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return compile_seed(tmp_path_factory.mktemp("seed")).read_bytes()


def central_entries(data: bytes) -> list[tuple[int, int]]:
    """(position, length) of each central-directory entry of the archive ``data`` (no comment, no ZIP64)."""
    _, _, _, _, count, _, cd_offset, _ = struct.unpack_from("<4s4H2LH", data, len(data) - 22)
    found, pos = [], cd_offset
    for _ in range(count):
        name_len, extra_len, comment_len = struct.unpack_from("<3H", data, pos + 28)
        length = 46 + name_len + extra_len + comment_len
        found.append((pos, length))
        pos += length
    return found


def with_central(data: bytes, entries: list[bytes]) -> bytes:
    """``data`` with its central directory replaced by ``entries`` (the members' bytes unchanged)."""
    _, _, _, _, _, _, cd_offset, _ = struct.unpack_from("<4s4H2LH", data, len(data) - 22)
    central = b"".join(entries)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(central), cd_offset, 0)
    return data[:cd_offset] + central + end


def renamed(entry: bytes, name: bytes, offset: int | None = None) -> bytes:
    """A central-directory entry with another name (and local header offset)."""
    name_len, extra_len, _ = struct.unpack_from("<3H", entry, 28)
    head = bytearray(entry[:46])
    struct.pack_into("<H", head, 28, len(name))
    if offset is not None:
        struct.pack_into("<L", head, 42, offset)
    return bytes(head) + name + entry[46 + name_len : 46 + name_len + extra_len]


def assert_refused(args: list[str], *needles: str) -> None:
    done = run_assemble(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    first = done.stderr.splitlines()[0]
    for needle in needles:
        assert needle in first, first
    assert HINT in done.stderr


def test_two_hundred_entries_sharing_one_local_header_are_refused(seed: bytes, tmp_path: Path) -> None:
    """The issue's wheel: the .so's central entry repeated 200 times under other names, every copy
    pointing at the one local header (audit said 201 STABLE objects, size a negative zip structure)."""
    sound = Archive(wheel_entries({"pkg/_C.abi3.so": seed})).write(tmp_path / "sound.whl").read_bytes()
    entries = [sound[pos : pos + length] for pos, length in central_entries(sound)]
    copies = [renamed(entries[0], f"pkg/_C{i}.abi3.so".encode()) for i in range(200)]
    wheel = tmp_path / WHEEL_NAME
    wheel.write_bytes(with_central(sound, [*entries, *copies]))
    for args in (["audit", str(wheel)], ["size", str(wheel)], ["audit", "--json", str(wheel)],
                 ["size", "--json", str(wheel)]):
        if "--json" in args:
            done = run_assemble(*args)
            assert done.returncode == 2, done.stdout + done.stderr
            error = json.loads(done.stdout)["error"]
            assert "overlap" in error["message"] and HINT in error["hint"], error
            continue
        assert_refused(args, WHEEL_NAME, "pkg/_C.abi3.so", "pkg/_C", "overlap")


def test_an_entry_whose_local_header_lies_inside_another_members_data(seed: bytes, tmp_path: Path) -> None:
    """A second entry pointing into the middle of the shared object's data (a "quoted" overlap),
    listed first in the central directory: sorted by offset, the two ranges still meet."""
    sound = Archive(wheel_entries({"pkg/_C.abi3.so": seed}, method=0)).write(tmp_path / "sound.whl").read_bytes()
    entries = [sound[pos : pos + length] for pos, length in central_entries(sound)]
    inner = renamed(entries[2], b"pkg-1.0.dist-info/RECORD", offset=4096)  # inside the stored seed
    wheel = tmp_path / WHEEL_NAME
    wheel.write_bytes(with_central(sound, [inner, *entries]))
    assert_refused(["audit", str(wheel)], "'pkg/_C.abi3.so' and 'pkg-1.0.dist-info/RECORD' overlap")
    assert_refused(["size", str(wheel)], "'pkg/_C.abi3.so' and 'pkg-1.0.dist-info/RECORD' overlap")


def local_record(name: bytes, data: bytes, extra: bytes = b"") -> bytes:
    """A stored member's local header, name, extra field and data."""
    return struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0x21, zlib.crc32(data), len(data), len(data),
                       len(name), len(extra)) + name + extra + data


def central_record(name: bytes, data: bytes, offset: int) -> bytes:
    return struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0x21, zlib.crc32(data), len(data), len(data),
                       len(name), 0, 0, 0, 0, 0o100644 << 16, offset) + name


def test_an_overlap_hidden_by_a_local_extra_field(tmp_path: Path) -> None:
    """The central directory's lengths leave room, but the first member's local header carries a
    64-byte extra field, so its data (which holds the second member whole) runs past the second
    local header. Neither is named like a shared object: the local header of every entry is read."""
    inner_name, inner_data = b"pkg/inner.txt", b"0123456789"
    inner = local_record(inner_name, inner_data)
    assert len(inner) <= 64
    outer_name = b"pkg/outer.txt"
    outer_data = b"x" * 100 + inner
    outer = local_record(outer_name, outer_data, extra=struct.pack("<HH", 0xCAFE, 60) + bytes(60))
    inner_offset = 30 + len(outer_name) + 64 + 100  # where the quoted record sits, inside outer's data
    assert outer[inner_offset : inner_offset + 4] == b"PK\x03\x04"
    out = bytearray(outer)
    central = central_record(outer_name, outer_data, 0) + central_record(inner_name, inner_data, inner_offset)
    count = 2
    for entry in wheel_entries({}, method=0):
        central += central_record(entry.name, entry.data, len(out))
        out += local_record(entry.name, entry.data)
        count += 1
    cd_offset = len(out)
    out += central + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, len(central), cd_offset, 0)
    wheel = tmp_path / WHEEL_NAME
    wheel.write_bytes(bytes(out))
    for command in ("audit", "size"):
        assert_refused([command, str(wheel)], WHEEL_NAME, "'pkg/outer.txt' and 'pkg/inner.txt' overlap")


def test_a_sound_wheel_listed_out_of_order_is_read(seed: bytes, tmp_path: Path) -> None:
    """Entries need not be listed in the order they are stored: a central directory in reverse
    order is no overlap, and the zip structure is the file less every member's data."""
    sound = Archive(wheel_entries({"pkg/_C.abi3.so": seed, "pkg/empty.py": b""})).write(tmp_path / "s.whl").read_bytes()
    entries = [sound[pos : pos + length] for pos, length in central_entries(sound)]
    wheel = tmp_path / WHEEL_NAME
    wheel.write_bytes(with_central(sound, entries[::-1]))
    done = run_assemble("audit", str(wheel))
    assert done.returncode == 0, done.stdout + done.stderr
    done = run_assemble("size", "--json", str(wheel))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    structure = next(g for g in report["deps"] if g["name"] == "(zip structure)")
    members = sum(g["compressed"] for g in report["deps"] if g["name"] != "(zip structure)")
    assert structure["compressed"] == wheel.stat().st_size - members > 0


def test_member_shared_with_a_directory_entry(tmp_path: Path) -> None:
    """A directory entry (never peeked for ELF) pointing at a member's local header overlaps it all the same."""
    sound = Archive([member("pkg/a.py", b"print(1)\n"), *wheel_entries({})]).write(tmp_path / "s.whl").read_bytes()
    entries = [sound[pos : pos + length] for pos, length in central_entries(sound)]
    wheel = tmp_path / WHEEL_NAME
    wheel.write_bytes(with_central(sound, [*entries, renamed(entries[0], b"pkg/")]))
    assert_refused(["audit", str(wheel)], "'pkg/a.py'", "'pkg/'", "overlap")
