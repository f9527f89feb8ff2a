"""Atomic file replacement: a reader (or a crash) sees the old file or the new one, never half."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a fsynced temporary file in the same directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_if_changed(path: Path, data: bytes | str) -> bool:
    """Like atomic_write, but leaves the file (and its mtime) alone when the bytes are equal."""
    payload = data.encode() if isinstance(data, str) else data
    if path.is_file() and path.read_bytes() == payload:
        return False
    atomic_write(path, payload)
    return True
