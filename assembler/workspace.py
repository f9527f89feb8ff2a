"""A workspace: the directory holding deps.toml, its patches/ and forks/, and the lock that
serialises assemble processes working on it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import filelock

from assembler.errors import LockedError, ManifestError
from assembler.fsutil import ignored_dir
from assembler.manifest import MANIFEST_NAME, Dependency, Manifest, find_workspace, load_manifest

if TYPE_CHECKING:
    from rich.console import Console

STATE_DIR = ".assemble"


@dataclass
class Workspace:
    root: Path
    manifest: Manifest
    _lock: filelock.FileLock | None = field(default=None, repr=False, compare=False)

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST_NAME

    @property
    def forks_dir(self) -> Path:
        return self.root / "forks"

    @property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR

    def fork_path(self, dep: Dependency) -> Path:
        return self.forks_dir / dep.name

    def reload(self) -> None:
        self.manifest = load_manifest(self.manifest_path)

    @contextmanager
    def lock(self, console: Console | None = None) -> Iterator[None]:
        """Exclusive lock for commands that write; waits (ASSEMBLE_LOCK_TIMEOUT seconds, default
        600) for another assemble process rather than interleaving with it. Re-entrant within
        one Workspace, so library code can take it under a command that already holds it."""
        ignored_dir(self.state_dir)
        lock = self._file_lock()
        timeout = float(os.environ.get("ASSEMBLE_LOCK_TIMEOUT", "600"))
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            if console is not None:
                console.print(f"waiting for another assemble process on {self.root} ...")
            try:
                lock.acquire(timeout=timeout)
            except filelock.Timeout:
                raise LockedError(
                    f"{self.root}: another assemble process has held the workspace lock for {timeout:.0f} s",
                    hint="wait for it to finish, or raise ASSEMBLE_LOCK_TIMEOUT",
                ) from None
        try:
            yield
        finally:
            lock.release()

    def _file_lock(self) -> filelock.FileLock:
        if self._lock is None:
            self._lock = filelock.FileLock(self.state_dir / "lock", is_singleton=False)
        return self._lock


def open_workspace(directory: Path | None) -> Workspace:
    """The workspace at ``directory`` (``--workspace``), else the nearest one above the cwd."""
    if directory is None:
        root = find_workspace(Path.cwd())
    else:
        root = directory.resolve()
        if not (root / MANIFEST_NAME).is_file():
            raise ManifestError(f"{root}: no {MANIFEST_NAME} here", hint="pass the directory that holds deps.toml")
    return Workspace(root=root, manifest=load_manifest(root / MANIFEST_NAME))
