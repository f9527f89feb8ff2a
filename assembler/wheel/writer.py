"""A reproducible zip writer for wheels: the bytes depend only on the names, contents and modes
added, never on the clock, the umask, the machine's thread count or the order work finishes.

Three ways in, cheapest first:

* ``copy_member`` copies an already deflated member of another zip (a packed artifact, a
  scikit-build-core wheel) byte for byte, kernel to kernel, with its CRC and size from that
  zip's directory and its sha256 from that zip's RECORD: no inflate, no deflate, no hashing.
* ``write_file`` deflates a loose file in 1 MiB chunks on a thread pool (zlib releases the GIL).
  Each chunk is primed with the previous chunk's last 32 KiB and ends on a sync flush, so the
  chunks concatenate into one ordinary deflate stream (the pigz layout). The chunk size is a
  constant, so the output does not depend on how many threads ran.
* ``write_bytes`` for the small metadata files.

zipfile writes the central directory (and zip64 records when needed); members are written here
because zipfile can neither copy compressed bytes nor compress one member on several cores.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import struct
import time
import zipfile
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from assembler.errors import InputError

# Measured with benchmarks/merge_throughput.py --levels on the vllm 0.33.0 extensions (one core):
# level 1 37.8 MB/s, 0.556 of the input; 3: 32.1, 0.545; 6: 19.6, 0.525; 9: 3.2, 0.522.
# Level 6 makes the wheel 6-9 % smaller than level 1 for half the speed; deflating happens once
# per artifact (packed artifacts are copied, not deflated again) while every user downloads the
# wheel. ZIP_STORED would make merging as fast as cp but the wheel 2.3x larger. Part of the
# output format: changing the level changes every wheel's bytes.
COMPRESSLEVEL = 6
CHUNK = 1 << 20  # deflate chunk; part of the output format like the level
WINDOW = 32 * 1024  # deflate's history window: the dictionary handed to the next chunk
ZIP_EPOCH = 315532800  # 1980-01-01T00:00:00Z, the earliest time a zip entry can hold
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_INLINE = 256 * 1024  # files below this are deflated on the calling thread (no pool round trip)


def resolve_epoch(epoch: int | None = None) -> int:
    """``epoch``, else $SOURCE_DATE_EPOCH, else 1980-01-01: a fixed default keeps wheels built
    from the same inputs identical without asking anything of the environment."""
    if epoch is None:
        raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
        if raw:
            try:
                epoch = int(raw)
            except ValueError:
                raise InputError(f"SOURCE_DATE_EPOCH={raw!r} is not an integer", hint="export SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)") from None
        else:
            epoch = ZIP_EPOCH
    return max(epoch, ZIP_EPOCH)


def urlsafe_digest(digest: bytes) -> str:
    """RECORD's hash spelling: urlsafe base64 without padding."""
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def file_mode(name: str) -> int:
    """0755 for shared objects (versioned ones too), 0644 for everything else, whatever the
    source file's mode and umask were."""
    base = name.rsplit("/", 1)[-1]
    return 0o755 if base.endswith(".so") or ".so." in base else 0o644


@dataclass(frozen=True)
class RawMember:
    """Where a member's compressed bytes are, as a zip directory describes them."""

    archive: Path
    header_offset: int
    compress_type: int
    compress_size: int
    file_size: int
    crc: int


@dataclass(frozen=True)
class Written:
    """What one added member became: its RECORD fields, where its bytes now are in the output,
    and its first bytes (to recognise ELF files without reading them again)."""

    name: str
    sha256: str
    size: int
    raw: RawMember
    head: bytes


def _deflate_chunk(level: int, history: bytes, chunk: bytes | memoryview, last: bool) -> bytes:
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY, *((history,) if history else ()))
    return compressor.compress(chunk) + compressor.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _data_offset(handle: BinaryIO, member: RawMember) -> int:
    handle.seek(member.header_offset)
    fields = _LOCAL_HEADER.unpack(handle.read(_LOCAL_HEADER.size))
    if fields[0] != b"PK\x03\x04":
        raise InputError(f"{member.archive}: corrupt zip (no local header at offset {member.header_offset})", hint="rebuild or re-download that artifact")
    return member.header_offset + _LOCAL_HEADER.size + int(fields[10]) + int(fields[11])


class ReproducibleZip:
    """Write-once zip. Use as a context manager; members must be added in the order wanted."""

    def __init__(self, path: Path, *, epoch: int, jobs: int = 1, level: int = COMPRESSLEVEL) -> None:
        self.path = path
        self.level = level
        self.jobs = max(1, jobs)
        self.date_time = time.gmtime(epoch)[:6]
        self._zip = zipfile.ZipFile(path, "w")
        self._fp: BinaryIO = self._zip.fp  # type: ignore[assignment]
        self._pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="deflate") if self.jobs > 1 else None
        self._sources: dict[Path, BinaryIO] = {}
        self._readers: dict[Path, tuple[zipfile.ZipFile, dict[int, zipfile.ZipInfo]]] = {}
        self.written: list[Written] = []

    def __enter__(self) -> ReproducibleZip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for handle in self._sources.values():
            handle.close()
        self._sources.clear()
        for reader, _ in self._readers.values():
            reader.close()
        self._readers.clear()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self._zip.close()

    def flush(self) -> None:
        """Make every member written so far readable through the file system (another
        ReproducibleZip may copy from this one while it is still open)."""
        self._fp.flush()

    # -- members ---------------------------------------------------------------------------

    def write_bytes(self, name: str, data: bytes) -> Written:
        pieces = [_deflate_chunk(self.level, data[start - WINDOW if start else 0:start], data[start:start + CHUNK], start + CHUNK >= len(data))
                  for start in range(0, max(len(data), 1), CHUNK)]
        digest = urlsafe_digest(hashlib.sha256(data).digest())
        return self._member(name, len(data), zlib.crc32(data), digest, data[:4], pieces)

    def write_file(self, name: str, source: Path) -> Written:
        size = source.stat().st_size
        if size < _INLINE or self._pool is None:
            return self._write_stream(name, size, source, self._inline_deflate(source, size))
        return self._write_stream(name, size, source, self._pool_deflate(source, size))

    def copy_member(self, name: str, member: RawMember, sha256: str | None) -> Written:
        """Copy ``member``'s compressed bytes as they are. A deflated member keeps its bytes; any
        other compression is inflated and deflated again (wheels hold deflate or stored only)."""
        source = self._source(member.archive)
        if member.compress_type != zipfile.ZIP_DEFLATED:
            return self._write_stream(name, member.file_size, member.archive, self._recompress(member))
        offset = _data_offset(source, member)
        head = self._head(source, offset, member)
        if sha256 is None:
            sha256 = urlsafe_digest(self._inflate_digest(source, offset, member))
        zinfo = self._zinfo(name)
        zinfo.file_size, zinfo.compress_size, zinfo.CRC = member.file_size, member.compress_size, member.crc
        zinfo.header_offset = self._fp.tell()
        self._fp.write(zinfo.FileHeader(self._zip64(member.file_size)))
        self._copy_range(source, offset, member.compress_size)
        return self._register(zinfo, sha256, head)

    # -- internals ---------------------------------------------------------------------------

    def _zinfo(self, name: str) -> zipfile.ZipInfo:
        if name in self._zip.NameToInfo:
            raise ValueError(f"{self.path}: {name} written twice")
        zinfo = zipfile.ZipInfo(name, date_time=self.date_time)
        zinfo.create_system = 3  # Unix, so the mode bits below mean something
        zinfo.external_attr = (stat.S_IFREG | file_mode(name)) << 16
        zinfo.compress_type = zipfile.ZIP_DEFLATED
        zinfo.CRC = zinfo.compress_size = 0
        return zinfo

    @staticmethod
    def _zip64(file_size: int) -> bool:
        """zipfile's rule, decided from the uncompressed size alone so that a copied member and
        the same file deflated here get the same header."""
        return file_size * 1.05 > zipfile.ZIP64_LIMIT

    def _member(self, name: str, size: int, crc: int, sha256: str, head: bytes, pieces: list[bytes]) -> Written:
        zinfo = self._zinfo(name)
        zinfo.file_size, zinfo.CRC = size, crc
        zinfo.compress_size = sum(len(p) for p in pieces)
        zinfo.header_offset = self._fp.tell()
        self._fp.write(zinfo.FileHeader(self._zip64(size)))
        for piece in pieces:
            self._fp.write(piece)
        return self._register(zinfo, sha256, head)

    def _write_stream(self, name: str, size: int, origin: Path, stream: Iterator[tuple[bytes, bytes]]) -> Written:
        """Write a member whose deflated pieces arrive with the uncompressed chunk they came from;
        the header is written first and rewritten with CRC and sizes once they are known."""
        zinfo = self._zinfo(name)
        zinfo.file_size = size
        zip64 = self._zip64(size)
        zinfo.header_offset = self._fp.tell()
        self._fp.write(zinfo.FileHeader(zip64))
        digest, crc, seen, compressed, head = hashlib.sha256(), 0, 0, 0, b""
        for chunk, piece in stream:
            if not head:
                head = bytes(chunk[:4])
            digest.update(chunk)
            crc = zlib.crc32(chunk, crc)
            seen += len(chunk)
            self._fp.write(piece)
            compressed += len(piece)
        if seen != size:
            raise InputError(f"{origin}: changed size while being read ({size} -> {seen} bytes)", hint="do not modify artifacts while merging")
        zinfo.CRC, zinfo.compress_size = crc, compressed
        end = self._fp.tell()
        self._fp.seek(zinfo.header_offset)
        self._fp.write(zinfo.FileHeader(zip64))
        self._fp.seek(end)
        return self._register(zinfo, urlsafe_digest(digest.digest()), head)

    def _register(self, zinfo: zipfile.ZipInfo, sha256: str, head: bytes) -> Written:
        self._zip.filelist.append(zinfo)
        self._zip.NameToInfo[zinfo.filename] = zinfo
        self._zip.start_dir = self._fp.tell()
        raw = RawMember(self.path, zinfo.header_offset, zinfo.compress_type, zinfo.compress_size, zinfo.file_size, zinfo.CRC)
        written = Written(zinfo.filename, sha256, zinfo.file_size, raw, head)
        self.written.append(written)
        return written

    def _chunks(self, source: Path, size: int) -> Iterator[tuple[bytes, bytes, bool]]:
        """(history, chunk, last) for each CHUNK of ``source``; one empty chunk for an empty file."""
        history = b""
        with source.open("rb") as handle:
            offset = 0
            while True:
                chunk = handle.read(CHUNK)
                offset += len(chunk)
                last = offset >= size or len(chunk) < CHUNK
                yield history, chunk, last
                if last:
                    return
                history = chunk[-WINDOW:]

    def _inline_deflate(self, source: Path, size: int) -> Iterator[tuple[bytes, bytes]]:
        for history, chunk, last in self._chunks(source, size):
            yield chunk, _deflate_chunk(self.level, history, chunk, last)

    def _pool_deflate(self, source: Path, size: int) -> Iterator[tuple[bytes, bytes]]:
        """Keep 2 chunks per thread in flight; yield results in order."""
        assert self._pool is not None
        pending: deque[tuple[bytes, Future[bytes]]] = deque()
        for history, chunk, last in self._chunks(source, size):
            pending.append((chunk, self._pool.submit(_deflate_chunk, self.level, history, chunk, last)))
            while len(pending) > 2 * self.jobs:
                chunk_done, future = pending.popleft()
                yield chunk_done, future.result()
        while pending:
            chunk_done, future = pending.popleft()
            yield chunk_done, future.result()

    def _recompress(self, member: RawMember) -> Iterator[tuple[bytes, bytes]]:
        """Inflate a member zlib cannot copy (stored, bzip2, lzma) and deflate it like a file."""
        if member.archive not in self._readers:
            reader = zipfile.ZipFile(member.archive)
            self._readers[member.archive] = (reader, {i.header_offset: i for i in reader.infolist()})
        reader, by_offset = self._readers[member.archive]
        with reader.open(by_offset[member.header_offset]) as handle:
            history = b""
            chunk = handle.read(CHUNK)
            while True:
                following = handle.read(CHUNK)
                yield chunk, _deflate_chunk(self.level, history, chunk, not following)
                if not following:
                    return
                history, chunk = chunk[-WINDOW:], following

    def _source(self, archive: Path) -> BinaryIO:
        if archive not in self._sources:
            self._sources[archive] = archive.open("rb")
        return self._sources[archive]

    @staticmethod
    def _head(source: BinaryIO, offset: int, member: RawMember) -> bytes:
        source.seek(offset)
        return zlib.decompressobj(-15).decompress(source.read(min(member.compress_size, 4096)), 4)

    @staticmethod
    def _inflate_digest(source: BinaryIO, offset: int, member: RawMember) -> bytes:
        """sha256 of a member whose archive has no RECORD entry for it (the slow path)."""
        source.seek(offset)
        inflater, digest, left = zlib.decompressobj(-15), hashlib.sha256(), member.compress_size
        while left:
            block = source.read(min(left, CHUNK))
            if not block:
                raise InputError(f"{member.archive}: truncated zip member at offset {member.header_offset}", hint="rebuild or re-download that artifact")
            left -= len(block)
            digest.update(inflater.decompress(block))
        digest.update(inflater.flush())
        return digest.digest()

    def _copy_range(self, source: BinaryIO, offset: int, length: int) -> None:
        """Kernel-side copy (copy_file_range) where the OS has it; a buffered copy otherwise."""
        self._fp.flush()
        position = self._fp.tell()
        done = 0
        try:
            while done < length:
                copied = os.copy_file_range(source.fileno(), self._fp.fileno(), length - done, offset + done, position + done)
                if copied == 0:
                    break
                done += copied
        except (AttributeError, OSError):
            pass
        if done < length:
            source.seek(offset + done)
            self._fp.seek(position + done)
            remaining = length - done
            while remaining:
                block = source.read(min(remaining, CHUNK))
                if not block:
                    raise InputError(f"{source.name}: truncated zip member at offset {offset}", hint="rebuild or re-download that artifact")
                self._fp.write(block)
                remaining -= len(block)
        self._fp.seek(position + length)
