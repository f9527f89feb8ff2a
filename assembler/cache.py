"""Where shared, re-creatable state lives: git mirrors, toolchains, venvs, build artifacts.

An entry ``<kind>/<name>`` has a lock file ``<kind>/<name>.lock``: its creator holds it exclusively
(filelock, an flock), a command using the entry holds it shared (``in_use``), and
`assemble cache prune` deletes an entry only when it can take it exclusively, without waiting.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import platformdirs


def cache_root() -> Path:
    """$ASSEMBLE_CACHE, else the platform's user cache directory (~/.cache/assembler)."""
    override = os.environ.get("ASSEMBLE_CACHE")
    root = Path(override) if override else Path(platformdirs.user_cache_dir("assembler"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def touch(path: Path) -> None:
    """Record a use of a cache entry (``assemble cache prune --older-than`` goes by last use); a
    read-only cache is fine."""
    with contextlib.suppress(OSError):
        os.utime(path)


@contextlib.contextmanager
def in_use(entry: Path) -> Iterator[None]:
    """Hold ``entry`` shared for the block, so that no prune removes it meanwhile."""
    try:
        fd = os.open(f"{entry}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # a read-only cache: nobody prunes it from here either
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)
