"""``file:///DIR``: a shared directory (NFS, a mounted volume, a CI cache directory).

Each object is written to a temporary file in its final directory, fsynced, and renamed into
place, so a reader never sees part of one. Objects are read only when they are regular files
(``fsutil.open_regular``: no link is followed, a FIFO or device is refused without blocking)
and never past their bound."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from assembler.fsutil import UnsafeFile, open_regular
from assembler.store import CHUNK, StoreUnavailable, UnusableObject, WrongSize


class FileBackend:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = f"file://{root}"

    def _path(self, name: str) -> Path:
        return self.root.joinpath(*name.split("/"))

    def exists(self, name: str) -> bool:
        """Whether a regular file is there (a link or a FIFO is not an object of ours)."""
        try:
            return stat.S_ISREG(os.lstat(self._path(name)).st_mode)
        except FileNotFoundError:
            return False
        except OSError as error:
            raise StoreUnavailable(f"{self._path(name)}: {error.strerror or error}") from None

    def _open(self, name: str) -> tuple[int, os.stat_result] | None:
        path = self._path(name)
        try:
            return open_regular(path)
        except FileNotFoundError:
            return None
        except UnsafeFile as unsafe:
            raise UnusableObject(str(unsafe)) from None
        except OSError as error:
            raise StoreUnavailable(f"{path}: {error.strerror or error}") from None

    def get(self, name: str, limit: int) -> bytes | None:
        opened = self._open(name)
        if opened is None:
            return None
        fd, info = opened
        with os.fdopen(fd, "rb") as handle:
            if info.st_size > limit:
                raise UnusableObject(f"{self._path(name)} is {info.st_size} bytes, over the limit of {limit}")
            try:
                data = handle.read(limit + 1)
            except OSError as error:
                raise StoreUnavailable(f"{self._path(name)}: {error.strerror or error}") from None
        if len(data) > limit:
            raise UnusableObject(f"{self._path(name)} grew past the limit of {limit} bytes while being read")
        return data

    def get_file(self, name: str, target: Path, size: int) -> bool:
        opened = self._open(name)
        if opened is None:
            return False
        fd, info = opened
        with os.fdopen(fd, "rb") as handle:
            if info.st_size != size:
                raise WrongSize(f"{self._path(name)} is {info.st_size} bytes, its key object says {size}")
            copied = 0
            try:
                with target.open("wb") as out:
                    while copied <= size:  # one byte past the size tells a file that grew
                        block = handle.read(min(CHUNK, size + 1 - copied))
                        if not block:
                            break
                        out.write(block)
                        copied += len(block)
            except OSError as error:
                raise StoreUnavailable(f"{self._path(name)} -> {target}: {error.strerror or error}") from None
        if copied != size:
            raise WrongSize(f"{self._path(name)} changed size while being read ({copied} bytes, not {size})")
        return True

    def put(self, name: str, data: bytes) -> None:
        self._write(name, lambda handle: handle.write(data))

    def put_file(self, name: str, source: Path) -> None:
        def copy(handle: BinaryIO) -> None:
            import shutil

            with source.open("rb") as reading:
                shutil.copyfileobj(reading, handle)

        self._write(name, copy)

    def _write(self, name: str, fill: Callable[[BinaryIO], object]) -> None:
        final = self._path(name)
        temporary = final.with_name(f".{final.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            with temporary.open("wb") as handle:
                fill(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, final)
        except OSError as error:
            temporary.unlink(missing_ok=True)
            raise StoreUnavailable(f"{final}: {error.strerror or error}") from None
