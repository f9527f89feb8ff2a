"""A reproducible zip writer for wheels: the bytes depend only on the names, contents and modes
added, never on the clock, the umask, the machine's thread count or the order work finishes.

Three ways in, cheapest first:

* ``copy_member`` copies an already deflated member of another zip (a packed artifact, a
  scikit-build-core wheel) byte for byte, kernel to kernel: no deflate. What was written is
  then read back and inflated on the thread pool (``verified``): its CRC and size must be the
  ones the source zip declares, and its sha256, the digest RECORD gets, is computed from those
  bytes; a digest the source's RECORD claims must agree. The source is data, never trusted.
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
import dataclasses
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
from assembler.fsutil import UnsafeFile, open_regular

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
# Deflate cannot expand data by more than 1032:1, so a member declaring more is a lie refused
# before a byte is copied; with it, verifying a member inflates at most 1032x what the source
# holds (the audit's limit too, assembler/audit/limits.py).
MAX_DEFLATE_RATIO = 1032
REBUILD = "rebuild or re-download that artifact"


def resolve_epoch(epoch: int | None = None) -> int:
    """``epoch``, else $SOURCE_DATE_EPOCH, else 1980-01-01: a fixed default keeps wheels built
    from the same inputs identical without asking anything of the environment."""
    if epoch is None:
        raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
        if raw:
            try:
                epoch = int(raw)
            except ValueError:
                raise InputError(f"SOURCE_DATE_EPOCH={raw!r} is not an integer",
                                 hint="export SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)") from None
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
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15, 8,
                                  zlib.Z_DEFAULT_STRATEGY, *((history,) if history else ()))
    return compressor.compress(chunk) + compressor.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _inflated_digest(fd: int, offset: int, compress_size: int, file_size: int, crc: int, where: str) -> str:
    """The RECORD digest of the deflated member at ``offset`` of the file ``fd``, read back as it
    was written: inflated in bounded steps, never past ``file_size``; InputError unless it
    inflates to exactly ``file_size`` bytes with CRC ``crc`` (what the source zip declared)."""
    inflater, digest, seen, found = zlib.decompressobj(-15), hashlib.sha256(), 0, 0
    position, end = offset, offset + compress_size
    try:
        while position < end and not inflater.eof:
            block = os.pread(fd, min(end - position, CHUNK), position)
            if not block:
                raise InputError(f"{where}: truncated", hint=REBUILD)
            position += len(block)
            while block and not inflater.eof:
                out = inflater.decompress(block, CHUNK)
                seen += len(out)
                if seen > file_size:
                    raise InputError(f"{where}: inflates to more than the {file_size} bytes its zip declares",
                                     hint=REBUILD)
                digest.update(out)
                found = zlib.crc32(out, found)
                block = inflater.unconsumed_tail
        out = inflater.flush(CHUNK)
        seen += len(out)
        digest.update(out)
        found = zlib.crc32(out, found)
    except zlib.error as error:
        raise InputError(f"{where}: corrupt deflate data ({error})", hint=REBUILD) from None
    if not inflater.eof or seen != file_size:
        raise InputError(f"{where}: inflates to {seen}{'' if inflater.eof else '+'} bytes, its zip declares "
                         f"{file_size}", hint=REBUILD)
    if found != crc:
        raise InputError(f"{where}: CRC-32 {found:08x} of its bytes, its zip declares {crc:08x}", hint=REBUILD)
    return urlsafe_digest(digest.digest())


def _data_offset(handle: BinaryIO, member: RawMember) -> int:
    handle.seek(member.header_offset)
    raw = handle.read(_LOCAL_HEADER.size)
    fields = _LOCAL_HEADER.unpack(raw) if len(raw) == _LOCAL_HEADER.size else (b"",) * 12
    if fields[0] != b"PK\x03\x04":
        raise InputError(f"{member.archive}: corrupt zip (no local header at offset {member.header_offset})",
                         hint=REBUILD)
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
        self._output_fd: int | None = None
        self._pending: list[tuple[int, Future[str], str | None, str]] = []
        self.written: list[Written] = []

    def __enter__(self) -> ReproducibleZip:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        try:
            if kind is None:
                self.verified()  # no archive is finished with a member unchecked
        finally:
            self.close()

    def close(self) -> None:
        for _, future, _, _ in self._pending:
            future.cancel()
        self._pending.clear()
        for handle in self._sources.values():
            handle.close()
        self._sources.clear()
        for reader, _ in self._readers.values():
            reader.close()
        self._readers.clear()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._output_fd is not None:
            os.close(self._output_fd)
            self._output_fd = None
        self._zip.close()

    def flush(self) -> None:
        """Make every member written so far readable through the file system (another
        ReproducibleZip may copy from this one while it is still open)."""
        self._fp.flush()

    # -- members ---------------------------------------------------------------------------

    def write_bytes(self, name: str, data: bytes) -> Written:
        pieces = [_deflate_chunk(self.level, data[start - WINDOW if start else 0:start], data[start:start + CHUNK],
                                 start + CHUNK >= len(data))
                  for start in range(0, max(len(data), 1), CHUNK)]
        digest = urlsafe_digest(hashlib.sha256(data).digest())
        return self._member(name, len(data), zlib.crc32(data), digest, data[:4], pieces)

    def write_file(self, name: str, source: Path) -> Written:
        """Deflate the regular file ``source``; a symbolic link, FIFO or device is refused, never
        followed or read (a payload is data, not a way to ship this machine's files)."""
        try:
            fd, info = open_regular(source)
        except UnsafeFile as unsafe:
            raise InputError(f"{unsafe} in an artifact",
                             hint="artifacts hold regular files only; fix the build so it ships the "
                                  "file itself") from None
        with os.fdopen(fd, "rb") as handle:
            size = info.st_size
            if size < _INLINE or self._pool is None:
                return self._write_stream(name, size, source, self._inline_deflate(handle, size))
            return self._write_stream(name, size, source, self._pool_deflate(handle, size))

    def copy_member(self, name: str, member: RawMember, sha256: str | None, source_name: str | None = None) -> Written:
        """Copy ``member``'s compressed bytes as they are. A deflated member keeps its bytes (its
        check runs on the pool and ends in ``verified``); any other compression is inflated,
        checked and deflated again (wheels hold deflate or stored only). ``sha256`` is the digest
        the source's RECORD claims (None: it has none), ``source_name`` the member's name there."""
        where = f"{member.archive}: member {source_name or name}"
        if member.compress_type == zipfile.ZIP_STORED and member.compress_size != member.file_size:
            raise InputError(f"{where} is stored but declares {member.file_size} bytes in {member.compress_size}",
                             hint=REBUILD)
        if member.file_size > MAX_DEFLATE_RATIO * member.compress_size + 1024:
            raise InputError(f"{where} declares {member.file_size} bytes from {member.compress_size} compressed, "
                             f"more than deflate's {MAX_DEFLATE_RATIO}:1", hint=REBUILD)
        source = self._source(member.archive)
        if member.compress_type != zipfile.ZIP_DEFLATED:
            written = self._write_stream(name, member.file_size, member.archive, self._recompress(member, where))
            return self._expect(len(self.written) - 1, written.sha256, sha256, where)
        offset = _data_offset(source, member)
        head = self._head(source, offset, member, where)
        zinfo = self._zinfo(name)
        zinfo.file_size, zinfo.compress_size, zinfo.CRC = member.file_size, member.compress_size, member.crc
        zinfo.header_offset = self._fp.tell()
        self._fp.write(zinfo.FileHeader(self._zip64(member.file_size)))
        data_at = self._fp.tell()
        self._copy_range(source, offset, member.compress_size)
        self._fp.flush()  # the check reads the output file through its own descriptor
        written = self._register(zinfo, "", head)
        check = (self._output(), data_at, member.compress_size, member.file_size, member.crc, where)
        index = len(self.written) - 1
        if self._pool is None:
            return self._expect(index, _inflated_digest(*check), sha256, where)
        self._pending.append((index, self._pool.submit(_inflated_digest, *check), sha256, where))
        return written

    def verified(self) -> list[Written]:
        """Every member written so far, once the checks of the copied ones have passed (their
        sha256 filled in); InputError naming the member and its archive for the first that fails."""
        pending, self._pending = self._pending, []
        try:
            for index, future, claimed, where in pending:
                self._expect(index, future.result(), claimed, where)
        finally:
            for _, future, _, _ in pending:
                future.cancel()
        return list(self.written)

    def _expect(self, index: int, computed: str, claimed: str | None, where: str) -> Written:
        """Record ``computed`` as member ``index``'s digest; a different ``claimed`` one is an error."""
        if claimed is not None and claimed != computed:
            raise InputError(f"{where}: its bytes have sha256={computed}, its archive's RECORD says sha256={claimed}",
                             hint=f"the artifact is corrupt or was altered; {REBUILD}")
        written = dataclasses.replace(self.written[index], sha256=computed)
        self.written[index] = written
        return written

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
            raise InputError(f"{origin}: changed size while being read ({size} -> {seen} bytes)",
                             hint="do not modify artifacts while merging")
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
        raw = RawMember(self.path, zinfo.header_offset, zinfo.compress_type, zinfo.compress_size, zinfo.file_size,
                        zinfo.CRC)
        written = Written(zinfo.filename, sha256, zinfo.file_size, raw, head)
        self.written.append(written)
        return written

    @staticmethod
    def _chunks(handle: BinaryIO, size: int) -> Iterator[tuple[bytes, bytes, bool]]:
        """(history, chunk, last) for each CHUNK of ``handle``; one empty chunk for an empty file."""
        history = b""
        offset = 0
        while True:
            chunk = handle.read(CHUNK)
            offset += len(chunk)
            last = offset >= size or len(chunk) < CHUNK
            yield history, chunk, last
            if last:
                return
            history = chunk[-WINDOW:]

    def _inline_deflate(self, handle: BinaryIO, size: int) -> Iterator[tuple[bytes, bytes]]:
        for history, chunk, last in self._chunks(handle, size):
            yield chunk, _deflate_chunk(self.level, history, chunk, last)

    def _pool_deflate(self, handle: BinaryIO, size: int) -> Iterator[tuple[bytes, bytes]]:
        """Keep 2 chunks per thread in flight; yield results in order."""
        assert self._pool is not None
        pending: deque[tuple[bytes, Future[bytes]]] = deque()
        for history, chunk, last in self._chunks(handle, size):
            pending.append((chunk, self._pool.submit(_deflate_chunk, self.level, history, chunk, last)))
            while len(pending) > 2 * self.jobs:
                chunk_done, future = pending.popleft()
                yield chunk_done, future.result()
        while pending:
            chunk_done, future = pending.popleft()
            yield chunk_done, future.result()

    def _recompress(self, member: RawMember, where: str) -> Iterator[tuple[bytes, bytes]]:
        """Inflate a member zlib cannot copy (stored, bzip2, lzma) and deflate it like a file;
        zipfile stops at the declared size and checks the CRC at the end."""
        if member.archive not in self._readers:
            reader = zipfile.ZipFile(self._source(member.archive))
            self._readers[member.archive] = (reader, {i.header_offset: i for i in reader.infolist()})
        reader, by_offset = self._readers[member.archive]
        try:
            with reader.open(by_offset[member.header_offset]) as handle:
                history = b""
                chunk = handle.read(CHUNK)
                while True:
                    following = handle.read(CHUNK)
                    yield chunk, _deflate_chunk(self.level, history, chunk, not following)
                    if not following:
                        return
                    history, chunk = chunk[-WINDOW:], following
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, KeyError) as error:
            raise InputError(f"{where}: corrupt ({error})", hint=REBUILD) from None

    def _source(self, archive: Path) -> BinaryIO:
        if archive not in self._sources:
            try:
                fd, _ = open_regular(archive)
            except UnsafeFile as unsafe:
                raise InputError(f"{unsafe}: an artifact's archive must be a regular file", hint=REBUILD) from None
            self._sources[archive] = os.fdopen(fd, "rb")
        return self._sources[archive]

    def _output(self) -> int:
        """A read-only descriptor of the archive being written, for the checks (pread: no shared offset)."""
        if self._output_fd is None:
            self._output_fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return self._output_fd

    @staticmethod
    def _head(source: BinaryIO, offset: int, member: RawMember, where: str) -> bytes:
        source.seek(offset)
        try:
            return zlib.decompressobj(-15).decompress(source.read(min(member.compress_size, 4096)), 4)
        except zlib.error as error:
            raise InputError(f"{where}: corrupt deflate data ({error})", hint=REBUILD) from None

    def _copy_range(self, source: BinaryIO, offset: int, length: int) -> None:
        """Kernel-side copy (copy_file_range) where the OS has it; a buffered copy otherwise."""
        self._fp.flush()
        position = self._fp.tell()
        done = 0
        try:
            while done < length:
                copied = os.copy_file_range(source.fileno(), self._fp.fileno(), length - done, offset + done,
                                            position + done)
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
                    raise InputError(f"{source.name}: truncated zip member at offset {offset}",
                                     hint="rebuild or re-download that artifact")
                self._fp.write(block)
                remaining -= len(block)
        self._fp.seek(position + length)
