"""A workspace: the directory holding deps.toml, its patches/ and forks/, and the lock that
serialises assemble processes working on it."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

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
    _lock_depth: int = field(default=0, repr=False, compare=False)

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
        one Workspace, so library code can take it under a command that already holds it.

        A plain flock(2) rather than the filelock package used for the caches: importing
        filelock costs ~35 ms, a fifth of a no-op `assemble checkout` (benchmarks/checkout_noop.py).
        """
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        fd = os.open(ignored_dir(self.state_dir) / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._acquire(fd, console)
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _acquire(self, fd: int, console: Console | None) -> None:
        timeout = float(os.environ.get("ASSEMBLE_LOCK_TIMEOUT", "600"))
        deadline = time.monotonic() + timeout
        waiting = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockedError(
                        f"{self.root}: another assemble process has held the workspace lock for {timeout:g} s",
                        hint="wait for it to finish, or raise ASSEMBLE_LOCK_TIMEOUT",
                    ) from None
                if not waiting and console is not None:
                    console.print(f"waiting for another assemble process on {self.root} ...")
                waiting = True
                time.sleep(0.05)


def open_workspace(directory: Path | None) -> Workspace:
    """The workspace at ``directory`` (``--workspace``), else the nearest one above the cwd."""
    if directory is None:
        root = find_workspace(Path.cwd())
    else:
        root = directory.resolve()
        if not (root / MANIFEST_NAME).is_file():
            raise ManifestError(f"{root}: no {MANIFEST_NAME} here", hint="pass the directory that holds deps.toml")
    return Workspace(root=root, manifest=load_manifest(root / MANIFEST_NAME))
