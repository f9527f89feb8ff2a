"""The few central-directory entries an audit needs, without building one object per member.

``zipfile.ZipFile`` decodes every entry into a ``ZipInfo``: 80 ms for vLLM's 5,800-member wheel,
a sixth of the audit's time budget, spent before any shared object can be read.  This reader
walks the central directory once with ``struct.unpack_from`` and decodes only the entries whose
raw name matches (shared objects, the WHEEL file).  It follows APPNOTE 6.3: ZIP64 end records
and extra fields, UTF-8 flag, data prepended to the archive.
"""

from __future__ import annotations

import os
import re
import struct
from typing import BinaryIO

from assembler.audit.member import MemberInfo, OverlappingEntries, open_regular
from assembler.errors import InputError

_EOCD = struct.Struct("<4s4H2LH")  # signature, disk, cd disk, entries here, entries, cd size, cd offset, comment
_LOCATOR64 = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_LENGTHS = struct.Struct("<3H")  # name, extra and comment lengths, 28 bytes into a central entry
_SIZES = struct.Struct("<2L")  # compressed and uncompressed sizes, 20 bytes in
_OFFSET = struct.Struct("<L")  # the local header's offset, 42 bytes in
_FLAGS = struct.Struct("<2H")  # flags and compression method, 8 bytes in
_MAX_COMMENT = 0xFFFF
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]")


class ZipError(InputError):
    """Not a zip archive, or a damaged one."""


def read_index(path: str, wanted: re.Pattern[bytes]) -> list[MemberInfo]:
    """Entries of the archive at ``path`` whose raw name matches ``wanted``, in central-directory order.

    Sizes and offsets are data: the end records must point inside the file, and every entry's
    data must end before the central directory (checked when the member is opened).
    """
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            return _read(f, path, wanted)
    except OSError as error:
        raise ZipError(f"{path}: cannot read the wheel ({error.strerror or error})") from None


def _read(f: BinaryIO, path: str, wanted: re.Pattern[bytes]) -> list[MemberInfo]:
    size = f.seek(0, os.SEEK_END)
    tail_len = min(size, _EOCD.size + _MAX_COMMENT)
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + _EOCD.size > len(tail):
        raise ZipError(f"{path}: not a readable wheel (no zip end-of-central-directory record)")
    _, _, _, _, count, cd_size, cd_offset, _ = _EOCD.unpack_from(tail, at)
    end = size - tail_len + at
    if at >= _LOCATOR64.size and tail[at - _LOCATOR64.size : at - _LOCATOR64.size + 4] == b"PK\x06\x07":
        _, _, eocd64, _ = _LOCATOR64.unpack_from(tail, at - _LOCATOR64.size)
        if eocd64 > size - _EOCD64.size:
            raise ZipError(f"{path}: not a readable wheel (ZIP64 end record outside the file)")
        f.seek(eocd64)
        raw = f.read(_EOCD64.size)
        if len(raw) != _EOCD64.size or raw[:4] != b"PK\x06\x06":
            raise ZipError(f"{path}: not a readable wheel (bad ZIP64 end record)")
        _, _, _, _, _, _, _, count, cd_size, cd_offset = _EOCD64.unpack(raw)
        end = eocd64
    prepended = end - cd_size - cd_offset  # bytes in front of the archive (0 for a plain wheel)
    if prepended < 0 or cd_size > end:
        raise ZipError(f"{path}: not a readable wheel (central directory out of bounds)")
    cd_start = end - cd_size
    f.seek(cd_start)
    directory = f.read(cd_size)
    if len(directory) != cd_size:
        raise ZipError(f"{path}: not a readable wheel (truncated central directory)")
    return _entries(path, directory, count, prepended, cd_start, wanted)


def _entries(
    path: str, directory: bytes, count: int, prepended: int, cd_start: int, wanted: re.Pattern[bytes]
) -> list[MemberInfo]:
    """Matching entries; no two entries' bytes may overlap, nor run into the central directory.

    Every entry's span, from its local header to the end of its data, is at least the 30-byte
    local header, the name and the compressed size the central directory gives: sorted by
    offset, each must end before the next one's local header (``_refuse_overlaps``).  A matching
    entry's data must end before the next local header (``MemberInfo.data_end``), checked again
    with its own local header's lengths when it is opened.
    """
    spans: list[tuple[int, int, int]] = []  # (local header offset, least end of its data, position in directory)
    matching: list[tuple[int, int, str, int, int]] = []  # (method, offset, name, csize, usize)
    pos = 0
    lengths = _LENGTHS.unpack_from
    sizes = _SIZES.unpack_from
    for _ in range(count):
        if directory[pos : pos + 4] != b"PK\x01\x02" or pos + _CENTRAL.size > len(directory):
            raise ZipError(f"{path}: not a readable wheel (corrupt central directory)")
        name_len, extra_len, comment_len = lengths(directory, pos + 28)
        start = pos + _CENTRAL.size
        if start + name_len + extra_len + comment_len > len(directory):
            raise ZipError(f"{path}: not a readable wheel (central directory entry runs past its end)")
        raw_name = directory[start : start + name_len]
        csize, usize = sizes(directory, pos + 20)
        offset = _OFFSET.unpack_from(directory, pos + 42)[0]
        if 0xFFFFFFFF in (usize, csize, offset):
            extra = directory[start + name_len : start + name_len + extra_len]
            usize, csize, offset = _zip64(path, _shown(raw_name), extra, usize, csize, offset)
        offset += prepended
        spans.append((offset, offset + 30 + name_len + csize, pos))
        if wanted.search(raw_name):
            flags, method = _FLAGS.unpack_from(directory, pos + 8)
            shown = _shown(raw_name)
            if flags & 1:
                raise ZipError(f"{path}: member '{shown}' is encrypted")
            if _CONTROL.search(raw_name):
                raise ZipError(f"{path}: member name '{shown}' holds control characters (corrupt wheel)")
            try:
                name = raw_name.decode("utf-8" if flags & 0x800 else "cp437")
            except UnicodeDecodeError:
                raise ZipError(
                    f"{path}: member name '{shown}' is flagged UTF-8 but is not valid UTF-8 (corrupt wheel)"
                ) from None
            matching.append((method, offset, name, csize, usize))
        pos = start + name_len + extra_len + comment_len
    following = _refuse_overlaps(path, directory, spans, cd_start)
    found = []
    for method, offset, name, csize, usize in matching:
        next_offset, next_at = following[offset]
        next_name = _name_at(directory, next_at) if next_at >= 0 else None
        found.append(MemberInfo(path, name, offset, method, csize, usize, next_offset, next_name))
    return found


def _refuse_overlaps(
    path: str, directory: bytes, spans: list[tuple[int, int, int]], cd_start: int
) -> dict[int, tuple[int, int]]:
    """ZipError naming two entries whose bytes overlap (several entries sharing one local header
    is the classic zip bomb, and makes sizes add up to more than the file), or an entry that runs
    into the central directory; else, per local header offset, where that entry's data must end
    and the directory position of the entry found there (-1: the central directory)."""
    spans.sort()
    following: dict[int, tuple[int, int]] = {}
    for (offset, end, at), (next_offset, _, next_at) in zip(spans, [*spans[1:], (cd_start, 0, -1)], strict=True):
        if end <= next_offset:
            following[offset] = (next_offset, next_at)
            continue
        this = _name_at(directory, at)
        if end > cd_start:  # its size is the fault, whatever it also covers
            raise OverlappingEntries(
                f"{path}: member '{this}': its data run past the end of the member area (local header at {offset}, "
                f"at least {end - offset} bytes, past the central directory at {cd_start}; corrupt or truncated wheel)"
            )
        raise OverlappingEntries(
            f"{path}: members '{this}' and '{_name_at(directory, next_at)}' overlap (local headers at {offset} and "
            f"{next_offset}; the first needs at least {end - offset} bytes): overlapping entries are a zip bomb or a "
            "corrupt wheel"
        )
    return following


def _name_at(directory: bytes, pos: int) -> str:
    """The shown name of the central-directory entry at ``pos`` (only for messages)."""
    name_len = _LENGTHS.unpack_from(directory, pos + 28)[0]
    return _shown(directory[pos + _CENTRAL.size : pos + _CENTRAL.size + name_len])


def _shown(raw_name: bytes) -> str:
    """A member name fit for a one-line message: undecodable bytes and control characters as ``\\xNN``."""
    text = raw_name.decode("utf-8", "backslashreplace")
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m[0]):02x}", text)


def _zip64(path: str, member: str, extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """Sizes and offset from the ZIP64 extra field, for the values the fixed header marks 0xFFFFFFFF."""
    if 0xFFFFFFFF not in (usize, csize, offset):
        return usize, csize, offset
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if pos + 4 + length > len(extra):
            raise ZipError(f"{path}: {member}: corrupt extra field {tag:#06x} (its {length} bytes run past the field's end)")
        if tag == 1:
            values = list(struct.unpack_from(f"<{length // 8}Q", extra, pos + 4))
            try:
                usize = values.pop(0) if usize == 0xFFFFFFFF else usize
                csize = values.pop(0) if csize == 0xFFFFFFFF else csize
                offset = values.pop(0) if offset == 0xFFFFFFFF else offset
            except IndexError:
                break
            return usize, csize, offset

        pos += 4 + length
    raise ZipError(f"{path}: {member}: corrupt ZIP64 extra field (sizes or offset missing)")
