"""A workspace: the directory holding deps.toml, its patches/ and forks/, the state under
.assemble/ (which rebases are pending), and the lock that serialises assemble processes
working on it.

The lock is taken by the library functions that write (checkout, export, rebase, build,
merge), never by the CLI; what to do while waiting for it is the ``on_lock_wait`` callback
given when the workspace is opened."""

from __future__ import annotations

import fcntl
import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from assembler.errors import LockedError, ManifestError
from assembler.fsutil import ignored_dir
from assembler.manifest import MANIFEST_NAME, Dependency, Manifest, find_workspace, load_manifest

STATE_DIR = ".assemble"
REBASE_DIR = "rebase"  # .assemble/rebase/<dep>/ holds a rebase's journal and backups
JOURNAL_NAME = "journal.json"  # its presence is what "a rebase is pending" means

LockWait = Callable[[Path], None]  # called once with the workspace root when the lock is held elsewhere
_P = ParamSpec("_P")
_R = TypeVar("_R")


@dataclass
class Workspace:
    root: Path
    manifest: Manifest
    on_lock_wait: LockWait | None = field(default=None, repr=False, compare=False)
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

    @property
    def rebase_dir(self) -> Path:
        return self.state_dir / REBASE_DIR

    def rebase_journal(self, name: str) -> Path:
        """Where the journal of a rebase of dependency ``name`` lives while it is pending."""
        return self.rebase_dir / name / JOURNAL_NAME

    def rebases_pending(self) -> list[str]:
        """Dependencies with a rebase in progress (started, neither finished nor aborted)."""
        root = self.rebase_dir
        return sorted(p.parent.name for p in root.glob(f"*/{JOURNAL_NAME}")) if root.is_dir() else []

    def rebase_pending(self, name: str) -> bool:
        return self.rebase_journal(name).is_file()

    def reload(self) -> None:
        self.manifest = load_manifest(self.manifest_path)

    @contextmanager
    def lock(self) -> Iterator[None]:
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
            self._acquire(fd)
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _acquire(self, fd: int) -> None:
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
                if not waiting and self.on_lock_wait is not None:
                    self.on_lock_wait(self.root)
                waiting = True
                time.sleep(0.05)


def locked(function: Callable[Concatenate[Workspace, _P], _R]) -> Callable[Concatenate[Workspace, _P], _R]:
    """Run a library entry point that writes to the workspace under its lock (re-entrant:
    one entry point may call another)."""

    @functools.wraps(function)
    def run(workspace: Workspace, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with workspace.lock():
            return function(workspace, *args, **kwargs)

    return run


def open_workspace(directory: Path | None, on_lock_wait: LockWait | None = None) -> Workspace:
    """The workspace at ``directory`` (``--workspace``), else the nearest one above the cwd.
    ``on_lock_wait``: told when its lock is held by another assemble process (then it waits)."""
    if directory is None:
        root = find_workspace(Path.cwd())
    else:
        root = directory.resolve()
        if not (root / MANIFEST_NAME).is_file():
            raise ManifestError(f"{root}: no {MANIFEST_NAME} here", hint="pass the directory that holds deps.toml")
    return Workspace(root=root, manifest=load_manifest(root / MANIFEST_NAME), on_lock_wait=on_lock_wait)
