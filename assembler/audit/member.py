"""Random access to one shared object: a plain file, or a member read in place from a wheel.

The ELF reader asks for byte ranges.  A file answers with ``pread``.  A deflated wheel member is
inflated from the start only as far as the furthest range asked for, keeping the first segment
(where the symbol tables live) and dropping the rest; ranges near the end (``.dynamic``, the
section headers) come from :mod:`assembler.audit.deflate` when that is cheaper than inflating
up to them.  Memory stays bounded by the retained head, the decoded tail and one piece.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from typing import Protocol

from assembler.audit.deflate import Tail, read_tail
from assembler.errors import InputError

_PIECE = 1 << 20  # inflate output piece
_FEED = 1 << 18  # compressed bytes per read
_HEAD_DEFAULT = _PIECE  # retained before the program headers tell how large the first segment is
_HEAD_MAX = 64 << 20  # never retain more than this of a member's head
_TAIL_MIN_SAVING = 4 << 20  # inflating fewer bytes than this to reach a range is cheaper than a tail search
_TAIL_MAX = 64 << 20  # a decoded tail is held in memory: beyond this, inflate forward instead


class TruncatedError(InputError):
    """A read past the end of the object: the ELF headers point outside the file."""


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


class FileSource:
    """A shared object on disk: every range is one ``pread`` away."""

    used_tail = False

    def __init__(self, path: str, name: str) -> None:
        self.name = name
        self._fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size

    def close(self) -> None:
        os.close(self._fd)

    def read(self, offset: int, length: int) -> bytes:
        _check_range(self, offset, length)
        return os.pread(self._fd, length, offset)

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


class StoredMember(FileSource):
    """An uncompressed wheel member: a window of the wheel file."""

    def __init__(self, info: MemberInfo) -> None:
        super().__init__(info.wheel, f"{info.wheel}: {info.name}")
        self._base = _data_offset(self._fd, info)
        self.size = info.file_size

    def read(self, offset: int, length: int) -> bytes:
        _check_range(self, offset, length)
        return os.pread(self._fd, length, self._base + offset)


class DeflatedMember:
    """A deflated wheel member, inflated lazily from the start and, for its end, from a block near it."""

    def __init__(self, info: MemberInfo) -> None:
        self.name = f"{info.wheel}: {info.name}"  # for messages
        self.size = info.file_size
        self._info = info
        self._fd = os.open(info.wheel, os.O_RDONLY)
        self._base = _data_offset(self._fd, info)
        self._retain = _HEAD_DEFAULT
        self._head = bytearray()  # member bytes [0, len(_head)), kept
        self._tail: Tail | None = None
        self._tail_allowed = True
        self._restart()

    def close(self) -> None:
        os.close(self._fd)

    def _restart(self) -> None:
        self._head.clear()
        self._decoder = zlib.decompressobj(-15)
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
                except zlib.error as error:
                    raise InputError(f"{self.name}: corrupt deflate data ({error})") from None
                self._fed += n
            start = self._pos
            self._pos += len(piece)
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


def _data_offset(fd: int, info: MemberInfo) -> int:
    """Where the member's (compressed) data starts: after its local header, name and extra field."""
    header = os.pread(fd, 30, info.header_offset)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise InputError(f"{info.wheel}: bad local header for {info.name} (corrupt wheel)")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_len + extra_len


def open_member(info: MemberInfo) -> StoredMember | DeflatedMember:
    if info.compress_type == 0:
        return StoredMember(info)
    if info.compress_type == 8:
        return DeflatedMember(info)
    raise InputError(
        f"{info.wheel}: member {info.name} uses zip compression method {info.compress_type}; "
        "wheels use deflate or stored"
    )
