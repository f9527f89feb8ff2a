"""``file:///DIR``: a shared directory (NFS, a mounted volume, a CI cache directory).

Each object is written to a temporary file in its final directory, fsynced, and renamed into
place, so a reader never sees part of one."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from assembler.store import StoreUnavailable


class FileBackend:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = f"file://{root}"

    def _path(self, name: str) -> Path:
        return self.root.joinpath(*name.split("/"))

    def exists(self, name: str) -> bool:
        return self._path(name).is_file()

    def get(self, name: str) -> bytes | None:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StoreUnavailable(f"{self._path(name)}: {error.strerror or error}") from None

    def get_file(self, name: str, target: Path) -> bool:
        try:
            shutil.copyfile(self._path(name), target)
            return True
        except FileNotFoundError:
            return False
        except OSError as error:
            raise StoreUnavailable(f"{self._path(name)}: {error.strerror or error}") from None

    def put(self, name: str, data: bytes) -> None:
        self._write(name, lambda handle: handle.write(data))

    def put_file(self, name: str, source: Path) -> None:
        def copy(handle: BinaryIO) -> None:
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
