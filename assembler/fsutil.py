"""Atomic file replacement: a reader (or a crash) sees the old file or the new one, never half."""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
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


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """libc's renameat2, looked up once (find_library runs ldconfig, ~10 ms)."""
    import ctypes
    import ctypes.util

    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return None
    return getattr(ctypes.CDLL(libc_name, use_errno=True), "renameat2", None)


def _rename_exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically with Linux renameat2(RENAME_EXCHANGE); False where unsupported."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange)
    return result == 0


def replace_dir(staged: Path, target: Path) -> None:
    """Put the fully written directory ``staged`` in place of ``target`` in one step, so readers
    see the old series or the new one; ``staged`` is consumed."""
    import shutil

    if not target.exists():
        os.replace(staged, target)
        return
    if _rename_exchange(staged, target):
        shutil.rmtree(staged)
        return
    backup = target.with_name(f".{target.name}.old")
    shutil.rmtree(backup, ignore_errors=True)
    os.replace(target, backup)
    os.replace(staged, target)
    shutil.rmtree(backup)


def ignored_dir(path: Path) -> Path:
    """Create ``path`` holding a ``.gitignore`` of ``*`` (as venv does), so the user's own
    repository never picks up checkouts, logs or artifacts, whatever its .gitignore says."""
    ignore = path / ".gitignore"
    if not ignore.exists():
        path.mkdir(parents=True, exist_ok=True)
        atomic_write(ignore, "# created by assemble: nothing here belongs in git\n*\n")
    return path
