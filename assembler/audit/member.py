"""Random access to one shared object: a plain file, or a member read in place from a wheel.

The ELF reader asks for byte ranges.  A file answers with ``pread``.  A deflated wheel member is
inflated from the start only as far as the furthest range asked for, keeping the first segment
(where the symbol tables live) and dropping the rest; ranges near the end (``.dynamic``, the
section headers) come from :mod:`assembler.audit.deflate` when that is cheaper than inflating
up to them.  Memory stays bounded by the retained head, the decoded tail and one piece.

Kept by hand because the numbers demand it (benchmarks/readers.py, issue 31): audit.elf reading
every ELF member of vLLM 0.33.0 through this module takes 0.59 s, through ``ZipFile.open`` (which
inflates again from the start on every seek back) 9.5 s, 16x; torch 2.15.0's 17: 3.6 s against
7.2 s. Inflating members whole (``ZipFile.read``) would hold up to 520 MB (libtorch_cuda.so).
"""

from __future__ import annotations

import os
import re
import stat
import struct
import zlib
from dataclasses import dataclass
from typing import Protocol

from assembler.audit.deflate import Tail, read_tail
from assembler.audit.inflate import decompressobj, errors
from assembler.audit.limits import DEFLATE_MAX_RATIO, HEAD_MAX, PIECE, TAIL_MAX
from assembler.errors import InputError

_PIECE = PIECE  # inflate output piece
_FEED = 1 << 18  # compressed bytes per read
_HEAD_DEFAULT = _PIECE  # retained before the program headers tell how large the first segment is
_HEAD_MAX = HEAD_MAX  # never retain more than this of a member's head
_TAIL_MIN_SAVING = 4 << 20  # inflating fewer bytes than this to reach a range is cheaper than a tail search
_TAIL_MAX = TAIL_MAX  # a decoded tail is held in memory: beyond this, inflate forward instead
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")  # refused in member names, escaped in messages


class TruncatedError(InputError):
    """A read past the end of the object: the ELF headers point outside the file."""


class OverlappingEntries(InputError):
    """Two zip entries share bytes, or one runs into the central directory: a zip bomb's trick
    (many entries inflating one stream) or a corrupt wheel, refused wherever it is found."""

    HINT = "rebuild the wheel with a standard zip writer; pip refuses a wheel whose entries overlap"

    def __init__(self, message: str) -> None:
        super().__init__(message, hint=self.HINT)


class ByteSource(Protocol):
    """What the ELF reader needs from a shared object, wherever it lives."""

    name: str  # how messages name it: a path, or "wheel: member"
    size: int

    def read(self, offset: int, length: int) -> bytes: ...

    def retain_head(self, length: int) -> None: ...

    def prefetch_tail(self, offset: int) -> None: ...

    def cheap(self, offset: int, length: int) -> bool: ...

    @property
    def used_tail(self) -> bool: ...

    def forget_tail(self) -> None: ...


def open_regular(path: str, name: str | None = None) -> int:
    """A read-only descriptor for ``path``; InputError unless it is a regular file.

    A FIFO, socket or device named ``x.so`` or ``x.whl`` would block or never end: it is
    refused from ``stat`` before opening, and again from ``fstat`` after (opened non-blocking,
    so a FIFO swapped in between cannot hang the audit either).
    """
    shown = name or path
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise InputError(f"{shown}: not a regular file (only files and directories are audited)")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(f"{shown}: no such file or directory") from None
    except OSError as error:
        raise InputError(f"{shown}: {error.strerror or error}") from None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError as error:
        os.close(fd)
        raise InputError(f"{shown}: {error.strerror or error}") from None
    if not regular:
        os.close(fd)
        raise InputError(f"{shown}: not a regular file (only files and directories are audited)")
    return fd


class FileSource:
    """A shared object on disk: every range is one ``pread`` away."""

    used_tail = False

    def __init__(self, path: str, name: str) -> None:
        self.name = name
        self._fd = open_regular(path, name)
        self.size = os.fstat(self._fd).st_size

    def close(self) -> None:
        os.close(self._fd)

    def read(self, offset: int, length: int) -> bytes:
        _check_range(self, offset, length)
        data = os.pread(self._fd, length, offset)
        if len(data) != length:
            raise TruncatedError(f"{self.name}: the file shrank while it was read (needs bytes "
                                 f"{offset}..{offset + length})")
        return data

    def retain_head(self, length: int) -> None:
        """Nothing to retain: the file is always there."""

    def prefetch_tail(self, offset: int) -> None:
        """Nothing to prefetch: the file is always there."""

    def cheap(self, offset: int, length: int) -> bool:
        return offset >= 0 and offset + length <= self.size

    def forget_tail(self) -> None:
        """No tail is ever decoded for a file."""


@dataclass(frozen=True)
class MemberInfo:
    """Where a member's bytes sit in the wheel, from the central directory (picklable, small)."""

    wheel: str
    name: str
    header_offset: int
    compress_type: int
    compress_size: int
    file_size: int
    data_end: int | None = None  # where member data must end (the next local header or the central directory)
    next_member: str | None = None  # the member whose local header is at data_end (None: the central directory)


def shown_name(name: str) -> str:
    """A member name fit for a one-line message: control characters as ``\\xNN`` (a name cannot
    forge a line of the report)."""
    return CONTROL_CHARACTER.sub(lambda m: f"\\x{ord(m[0]):02x}", name)


class StoredMember(FileSource):
    """An uncompressed wheel member: a window of the wheel file."""

    def __init__(self, info: MemberInfo) -> None:
        super().__init__(info.wheel, f"{info.wheel}: {info.name}")
        try:
            if info.compress_size != info.file_size:
                raise InputError(
                    f"{self.name}: stored member declares {info.compress_size} bytes in the wheel but "
                    f"{info.file_size} uncompressed (corrupt wheel)"
                )
            self._base = _data_offset(self._fd, info, self.size)
        except BaseException:
            self.close()
            raise
        self.size = info.file_size

    def read(self, offset: int, length: int) -> bytes:
        _check_range(self, offset, length)
        data = os.pread(self._fd, length, self._base + offset)
        if len(data) != length:
            raise InputError(f"{self.name}: member data is cut short (the wheel shrank while it was read)")
        return data


class DeflatedMember:
    """A deflated wheel member, inflated lazily from the start and, for its end, from a block near it."""

    def __init__(self, info: MemberInfo) -> None:
        self.name = f"{info.wheel}: {info.name}"  # for messages
        self.size = info.file_size
        self._info = info
        self._fd = open_regular(info.wheel)
        try:
            if info.file_size > info.compress_size * DEFLATE_MAX_RATIO + 1024:
                raise InputError(
                    f"{self.name}: declares {info.file_size} bytes from {info.compress_size} compressed, more than "
                    f"deflate can produce (corrupt wheel)"
                )
            self._base = _data_offset(self._fd, info, os.fstat(self._fd).st_size)
        except BaseException:
            self.close()
            raise
        self._retain = _HEAD_DEFAULT
        self._head = bytearray()  # member bytes [0, len(_head)), kept
        self._tail: Tail | None = None
        self._tail_allowed = True
        self._restart()

    def close(self) -> None:
        os.close(self._fd)

    def _restart(self) -> None:
        self._head.clear()
        self._decoder = decompressobj()
        self._fed = 0  # compressed bytes handed to the decoder
        self._pos = 0  # uncompressed bytes produced
        self._last = (0, b"")  # the most recent output piece, served again if asked

    def _read_compressed(self, offset: int, length: int) -> bytes:
        data = os.pread(self._fd, length, self._base + offset)
        if len(data) != length:
            raise InputError(f"{self.name}: member data is cut short (corrupt or truncated wheel)")
        return data

    @property
    def used_tail(self) -> bool:
        return self._tail is not None

    def check_end(self) -> None:
        """After the last byte was read: the deflate stream must end exactly there (no hidden bomb)."""
        decoder = self._decoder
        if self._pos != self.size:
            raise ValueError("check_end before the whole member was read")
        while not decoder.eof:
            if decoder.unconsumed_tail:
                extra = decoder.decompress(decoder.unconsumed_tail, 1)
            elif self._fed >= self._info.compress_size:
                raise InputError(f"{self.name}: deflate data does not end where its zip header says (corrupt wheel)")
            else:
                n = min(_FEED, self._info.compress_size - self._fed)
                try:
                    extra = decoder.decompress(self._read_compressed(self._fed, n), 1)
                except errors() as error:
                    raise InputError(f"{self.name}: corrupt deflate data ({error})") from None
                self._fed += n
            if extra:
                raise InputError(
                    f"{self.name}: inflates to more than the {self.size} bytes its zip header says (corrupt wheel)"
                )

    def retain_head(self, length: int) -> None:
        """Keep the first ``length`` bytes once inflated (the segment holding the symbol tables)."""
        self._retain = max(self._retain, min(length, _HEAD_MAX, self.size))

    def forget_tail(self) -> None:
        """Distrust the decoded tail (it did not match the rest of the file): inflate from the start instead."""
        self._tail = None
        self._tail_allowed = False

    def cheap(self, offset: int, length: int) -> bool:
        end = offset + length
        if end <= len(self._head) or (self._tail is not None and offset >= self._tail.offset):
            return True
        return self._pos <= offset and end - self._pos < _TAIL_MIN_SAVING

    def prefetch_tail(self, offset: int) -> None:
        """Make ``[offset, size)`` readable without inflating up to it, when that is cheaper."""
        if self._tail is not None and self._tail.offset <= offset:
            return
        gap = offset - max(self._pos, len(self._head))
        keep = self.size - offset
        if not self._tail_allowed or gap < 2 * keep + _TAIL_MIN_SAVING or keep > _TAIL_MAX:
            return
        ratio = self._info.compress_size / max(self.size, 1)
        self._tail = read_tail(
            self._read_compressed, self._info.compress_size, self.size, offset, budget=int(gap * ratio / 2)
        )

    def read(self, offset: int, length: int) -> bytes:
        _check_range(self, offset, length)
        end = offset + length
        if end <= len(self._head):
            return bytes(self._head[offset:end])
        if self._tail is not None and offset >= self._tail.offset:
            lo = offset - self._tail.offset
            return self._tail.data[lo : lo + length]
        start, piece = self._last
        if start <= offset and end <= start + len(piece):
            return piece[offset - start : end - start]
        if start <= offset < start + len(piece) == self._pos:  # begins in the last piece: inflate on from there
            return piece[offset - start :] + self._inflate_to(self._pos, end)
        if offset < self._pos and len(self._head) < self._pos:
            self._restart()  # went past part of it without keeping it: a second pass
        return self._inflate_to(offset, end)

    def _inflate_to(self, offset: int, end: int) -> bytes:
        """Inflate forward until ``[offset, end)`` has been produced; keep the head, return the range.

        Bytes of the range already produced are in the retained head (the caller restarts otherwise).
        """
        wanted = bytearray(self._head[offset : self._pos]) if offset < self._pos else bytearray()
        decoder = self._decoder
        while self._pos < end:
            if decoder.unconsumed_tail:
                piece = decoder.decompress(decoder.unconsumed_tail, _PIECE)
            elif decoder.eof or self._fed >= self._info.compress_size:
                raise InputError(
                    f"{self.name}: inflates to {self._pos} bytes, not the {self.size} "
                    "its zip header says (corrupt wheel)"
                )
            else:
                n = min(_FEED, self._info.compress_size - self._fed)
                try:
                    piece = decoder.decompress(self._read_compressed(self._fed, n), _PIECE)
                except errors() as error:
                    raise InputError(f"{self.name}: corrupt deflate data ({error})") from None
                self._fed += n
            start = self._pos
            self._pos += len(piece)
            if self._pos > self.size:
                raise InputError(
                    f"{self.name}: inflates to more than the {self.size} bytes its zip header says (corrupt wheel)"
                )
            self._last = (start, piece)
            if start == len(self._head) and start < self._retain:
                self._head += piece[: self._retain - start]
            lo, hi = max(offset, start), min(end, self._pos)
            if lo < hi:
                wanted += piece[lo - start : hi - start]
        return bytes(wanted)


def _check_range(source: ByteSource, offset: int, length: int) -> None:
    if offset < 0 or length < 0 or offset + length > source.size:
        raise TruncatedError(
            f"{source.name}: truncated ELF (needs bytes {offset}..{offset + length}, the file has {source.size})"
        )


def _data_offset(fd: int, info: MemberInfo, wheel_size: int) -> int:
    """Where the member's (compressed) data starts: after its local header, name and extra field.

    The data must end before the central directory (or the end of the wheel): a member whose
    declared size runs past it is corrupt, whatever its first bytes look like.
    """
    header = os.pread(fd, 30, info.header_offset) if 0 <= info.header_offset < wheel_size else b""
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise InputError(f"{info.wheel}: bad local header for {info.name} (corrupt wheel)")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    base: int = info.header_offset + 30 + name_len + extra_len
    end = min(wheel_size, info.data_end) if info.data_end is not None else wheel_size
    if base + info.compress_size > end and info.next_member is not None and end < wheel_size:
        name, other = shown_name(info.name), shown_name(info.next_member)
        raise OverlappingEntries(
            f"{info.wheel}: members '{name}' and '{other}' overlap (the data after {name}'s "
            f"local header runs past {other}'s at {end}): overlapping entries are a zip bomb or a corrupt wheel"
        )
    if base + info.compress_size > end:
        raise InputError(
            f"{info.wheel}: {info.name}: its {info.compress_size} bytes of data run past the end of the "
            f"{'member area' if end < wheel_size else 'wheel'} (corrupt or truncated wheel)"
        )
    return base


_PEEK_DEFLATE = 4096  # compressed bytes enough for any deflate block header and the first bytes after it


def peek(fd: int, info: MemberInfo, length: int = 4) -> bytes:
    """The first ``length`` bytes of a member of the wheel open at ``fd``: one local-header read
    and a few KB of deflate at most, so every member can be judged by content, not by name.
    InputError when its header or data are corrupt (the caller decides whether that matters)."""
    wheel_size = os.fstat(fd).st_size
    base = _data_offset(fd, info, wheel_size)
    want = min(length, info.file_size)
    if info.compress_type == 0 or want == 0:
        return os.pread(fd, want, base)
    if info.compress_type != 8:
        raise InputError(f"{info.wheel}: member {info.name} uses zip compression method {info.compress_type}")
    try:
        return zlib.decompressobj(-15).decompress(os.pread(fd, min(info.compress_size, _PEEK_DEFLATE), base), want)
    except zlib.error as error:
        raise InputError(f"{info.wheel}: {info.name}: corrupt deflate data ({error})") from None


def read_small_member(info: MemberInfo, limit: int) -> bytes:
    """The whole of a small member (the WHEEL file), refused over ``limit`` bytes declared or inflated."""
    if info.file_size > limit:
        raise InputError(f"{info.wheel}: {info.name} declares {info.file_size} bytes, over the {limit}-byte limit")
    source = open_member(info)
    try:
        data = source.read(0, source.size)
        if isinstance(source, DeflatedMember):
            source.check_end()
    finally:
        source.close()
    return data


def open_member(info: MemberInfo) -> StoredMember | DeflatedMember:
    if info.compress_type == 0:
        return StoredMember(info)
    if info.compress_type == 8:
        return DeflatedMember(info)
    raise InputError(
        f"{info.wheel}: member {info.name} uses zip compression method {info.compress_type}; "
        "wheels use deflate or stored"
    )
