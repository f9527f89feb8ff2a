"""The members of a wheel as `audit`, `size` and `sbom` read them: ``zipfile``'s central directory,
plus the refusals a wheel read in place needs and zipfile does not make.

zipfile reads the end records (ZIP64 too), the entries, their ZIP64 extra fields and data
prepended to the archive. A hand-written walk did this until issue 31 timed both doing the same
work (benchmarks/readers.py, best of 15 on 2 shared cores): zipfile plus the overlap pass below
took 40 ms for vLLM 0.33.0's 5,802 members and 230 ms for torch 2.15.0's 13,187, the hand walk
52 ms and 216 ms: nothing to keep it for. (Bare ``ZipFile(...).infolist()`` measured 27-46 ms
on vLLM, not the 80 ms once quoted here.) What is added here: no two entries' bytes may overlap, nor
run into the central directory (the zip bomb's trick, which pip refuses); no encrypted member;
no control character in a name (it would forge lines of a message); every refusal one line
naming the wheel (and the member, where zipfile's reason allows).
"""

from __future__ import annotations

import os
import re
import struct
import zipfile
import zlib
from typing import BinaryIO

from assembler.audit.member import CONTROL_CHARACTER, MemberInfo, OverlappingEntries, open_regular, shown_name
from assembler.errors import InputError

_LOCAL_HEADER = 30  # bytes of a local header before its name


class ZipError(InputError):
    """Not a zip archive, or a damaged one."""


def read_index(path: str, wanted: re.Pattern[bytes]) -> list[MemberInfo]:
    """Entries of the archive at ``path`` whose raw name matches ``wanted``, in central-directory order.

    Sizes and offsets are data: every entry's data must end before the next local header and the
    central directory (checked here from the central directory, and again from the member's own
    local header when it is opened).
    """
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            try:
                with zipfile.ZipFile(f) as archive:
                    infos, directory_at = archive.infolist(), archive.start_dir
            except UnicodeDecodeError as error:  # a name flagged UTF-8 (bit 11) that is not
                raise ZipError(f"{path}: member name '{_shown(bytes(error.object))}' is flagged UTF-8 but is not "
                               "valid UTF-8 (corrupt wheel)") from None
            except (zipfile.BadZipFile, NotImplementedError, ValueError, EOFError, OverflowError, struct.error,
                    zlib.error) as error:
                culprit = _bad_extra_field(f) if "extra field" in str(error) else None
                where = f"{path}: {culprit}" if culprit else path
                raise ZipError(f"{where}: not a readable wheel ({_reason(error)})") from None
    except OSError as error:
        raise ZipError(f"{path}: cannot read the wheel ({error.strerror or error})") from None
    return _entries(path, infos, directory_at, wanted)


def _reason(error: Exception) -> str:
    """zipfile's reason, in the words this project's messages use."""
    text = str(error) or type(error).__name__
    if text == "File is not a zip file":
        return "no zip end-of-central-directory record"
    if text.startswith("Corrupt zip64 extra field"):
        return f"corrupt ZIP64 extra field: {text.removeprefix('Corrupt zip64 extra field. ')}"
    if match := re.fullmatch(r"Corrupt extra field ([0-9a-f]{4}) \(size=(\d+)\)", text):
        return f"corrupt extra field 0x{match[1]} (its {match[2]} bytes run past the field's end)"
    return shown_name(text)


def _bad_extra_field(f: BinaryIO) -> str | None:
    """The name of the first entry whose extra field zipfile refused, for its message (zipfile's
    does not say): a walk of the central directory on this error path only, best effort (None
    when the directory is not where the end record says, as in a damaged ZIP64 archive)."""
    try:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - 0xFFFF - 22))
        tail = f.read()
        at = tail.rfind(b"PK\x05\x06")
        cd_size = struct.unpack_from("<L", tail, at + 12)[0]
        end = size - len(tail) + at
        f.seek(end - cd_size)
        directory, pos = f.read(cd_size), 0
        while directory[pos : pos + 4] == b"PK\x01\x02":
            csize, usize, name_len, extra_len, comment_len = struct.unpack_from("<2L3H", directory, pos + 20)
            offset = struct.unpack_from("<L", directory, pos + 42)[0]
            extra = directory[pos + 46 + name_len : pos + 46 + name_len + extra_len]
            deferred = 8 * sum(value == 0xFFFFFFFF for value in (csize, usize, offset))
            while len(extra) >= 4:
                tag, length = struct.unpack_from("<HH", extra)
                if length + 4 > len(extra) or (tag == 1 and length < deferred):
                    return _shown(directory[pos + 46 : pos + 46 + name_len])
                extra = extra[length + 4 :]
            pos += 46 + name_len + extra_len + comment_len
    except (OSError, ValueError, struct.error):
        return None
    return None


def _entries(path: str, infos: list[zipfile.ZipInfo], directory_at: int, wanted: re.Pattern[bytes]) -> list[MemberInfo]:
    """The matching entries, once no two entries' bytes overlap nor run into the central directory.

    Every entry's span, from its local header to the end of its data, is at least the 30-byte
    local header, the name and the compressed size the central directory gives: sorted by
    offset, each must end before the next one's local header (``_following``).
    """
    raw_names = [name.encode("utf-8" if info.flag_bits & 0x800 or name.isascii() else "cp437")
                 for info in infos for name in (info.orig_filename,)]
    following = _following(path, infos, raw_names, directory_at)
    found = []
    for info, raw_name in zip(infos, raw_names, strict=True):
        if not wanted.search(raw_name):
            continue
        name = info.orig_filename  # zipfile's filename stops at a NUL: the name as written is what is judged
        if info.flag_bits & 1:
            raise ZipError(f"{path}: member '{_shown(raw_name)}' is encrypted")
        if CONTROL_CHARACTER.search(name):
            raise ZipError(f"{path}: member name '{_shown(raw_name)}' holds control characters (corrupt wheel)")
        data_end, next_n = following[info.header_offset]
        found.append(MemberInfo(path, name, info.header_offset, info.compress_type, info.compress_size,
                                info.file_size, data_end, infos[next_n].orig_filename if next_n >= 0 else None))
    return found


def _following(path: str, infos: list[zipfile.ZipInfo], raw_names: list[bytes],
               directory_at: int) -> dict[int, tuple[int, int]]:
    """OverlappingEntries naming two entries whose bytes overlap (several entries sharing one local
    header is the classic zip bomb, and makes sizes add up to more than the file), or an entry
    that runs into the central directory; else, per local header offset, where that entry's
    data must end and the index of the entry whose local header is there (-1: the directory)."""
    spans = sorted([(info.header_offset, n) for n, info in enumerate(infos)])
    spans.append((directory_at, -1))
    following: dict[int, tuple[int, int]] = {}
    for i in range(len(spans) - 1):
        offset, n = spans[i]
        next_offset, next_n = spans[i + 1]
        end = offset + _LOCAL_HEADER + len(raw_names[n]) + infos[n].compress_size
        if end <= next_offset and offset >= 0:
            following[offset] = (next_offset, next_n)
            continue
        this = _shown(raw_names[n])
        if end > directory_at or offset < 0:  # its size (or place) is the fault, whatever it also covers
            raise OverlappingEntries(
                f"{path}: member '{this}': its data run past the end of the member area (local header at {offset}, "
                f"at least {end - offset} bytes, past the central directory at {directory_at}; corrupt or truncated "
                "wheel)"
            )
        raise OverlappingEntries(
            f"{path}: members '{this}' and '{_shown(raw_names[next_n])}' overlap (local headers at {offset} and "
            f"{next_offset}; the first needs at least {end - offset} bytes): overlapping entries are a zip bomb or a "
            "corrupt wheel"
        )
    return following


def _shown(raw_name: bytes) -> str:
    """A raw member name fit for a one-line message: undecodable bytes and control characters as ``\\xNN``."""
    return shown_name(raw_name.decode("utf-8", "backslashreplace"))
