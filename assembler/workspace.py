"""A workspace: the directory holding deps.toml, its patches/ and forks/, the state under
.assemble/ (which rebases are pending), and the lock that serialises assemble processes
working on it.

No state path is reached through a symbolic link (``check_state_paths``, fsutil.refuse_links):
a workspace is someone else's repository or archive, and a link committed in it would turn
assemble's writes (the lock record, a log) into writes outside it.

The lock is taken by the library functions that write (checkout, export, rebase, build,
merge), never by the CLI; what to do while waiting for it is the ``on_lock_wait`` callback
given when the workspace is opened."""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from assembler.errors import InputError, LockedError, ManifestError
from assembler.fsutil import ignored_dir, open_state_file, read_regular, refuse_links, refuse_links_below
from assembler.manifest import MANIFEST_NAME, Dependency, Manifest, find_workspace, load_manifest
from assembler.manifest.load import STATE_DIR

REBASE_DIR = "rebase"  # .assemble/rebase/<dep>/ holds a rebase's journal and backups
JOURNAL_NAME = "journal.json"  # its presence is what "a rebase is pending" means
FORKS_DIR = "forks"  # the checkouts: forks/<dep>
LOCK_NAME = "lock"  # .assemble/lock
# .assemble/roots/ holds only links assemble makes and replaces, never writes through
# (toolchain/sccache.path_roots: .assemble/roots/cache names the cache).
LINKS_DIR = "roots"
# How deep a link is looked for: .assemble/<area>/<entry> (a log, a record, a dependency's
# build tree or rebase journal), forks/<dep>. Deeper paths are checked where they are written.
STATE_DEPTH = 2
FORKS_DEPTH = 1

LockWait = Callable[[Path], None]  # called once with the workspace root when the lock is held elsewhere
_P = ParamSpec("_P")
_R = TypeVar("_R")


class Workspace:
    """A workspace: its root and its manifest, and the depth of its lock held by this process.
    A plain class (not a dataclass): see report.output.Settings for the start-up reason."""

    __slots__ = ("_lock_depth", "_state_checked", "manifest", "on_lock_wait", "root")

    def __init__(self, root: Path, manifest: Manifest, on_lock_wait: LockWait | None = None) -> None:
        self.root = root
        self.manifest = manifest
        self.on_lock_wait = on_lock_wait
        self._lock_depth = 0
        self._state_checked = False

    def __repr__(self) -> str:
        return f"Workspace(root={self.root!r})"

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST_NAME

    @property
    def forks_dir(self) -> Path:
        """``forks/``, checked on first use (check_state_paths)."""
        if not self._state_checked:
            self.check_state_paths()
        return self.root / FORKS_DIR

    @property
    def state_dir(self) -> Path:
        """``.assemble/``, checked on first use (check_state_paths)."""
        if not self._state_checked:
            self.check_state_paths()
        return self.root / STATE_DIR

    def check_state_paths(self) -> None:
        """Refuse (InputError, exit 2, naming the link and ``rm LINK``) a symbolic link at
        ``.assemble`` or ``forks``, or among their entries to STATE_DEPTH and FORKS_DEPTH: every
        path assemble writes there (through this class's properties, in this process or a
        program it runs) then stays in the workspace. Cheap (a few directory listings), done
        once per Workspace, when its state is first used."""
        for name, depth, skip in ((STATE_DIR, STATE_DEPTH, (LINKS_DIR,)), (FORKS_DIR, FORKS_DEPTH, ())):
            top = self.root / name
            refuse_links(self.root, top)
            if top.exists() and not top.is_dir():
                import shlex

                raise InputError(f"{top} is not a directory: assemble keeps its {name} there",
                                 hint=f"remove it: rm {shlex.quote(str(top))}")
            refuse_links_below(top, depth, skip)
        self._state_checked = True

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
        fd = self._open_lock()
        if fd is None:  # a read-only workspace: nobody can write to it, so there is nothing to serialise
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0
            return
        try:
            self._acquire(fd)
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _open_lock(self) -> int | None:
        """The lock file's descriptor, created if needed. Where it cannot be created (a
        read-only file system, a workspace of another user) an existing one is opened for
        reading (flock needs no write access); None when there is none and none can be made."""
        path = self.state_dir / LOCK_NAME
        try:
            ignored_dir(self.state_dir, inside=self.root)
            return open_state_file(self.root, path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
        try:
            return open_state_file(self.root, path, os.O_RDONLY)
        except FileNotFoundError:
            return None

    def _acquire(self, fd: int) -> None:
        timeout = lock_timeout()
        started = time.monotonic()
        deadline = started + timeout
        waiting = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                _write_holder(fd)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = self.lock_holder()
                    raise LockedError(
                        f"{self.root}: waited {time.monotonic() - started:.1f} s for the workspace lock, held by "
                        + (holder or "another assemble process"),
                        hint=f"wait for it to finish, or raise {LOCK_TIMEOUT_ENV} (now {timeout:g} s)",
                    ) from None
                if not waiting and self.on_lock_wait is not None:
                    self.on_lock_wait(self.root)
                waiting = True
                time.sleep(0.05)


    def lock_holder(self) -> str | None:
        return lock_holder(self.root)


def lock_holder(root: Path) -> str | None:
    """Who holds the lock of the workspace at ``root``, as the holder wrote it into the lock
    file: ``pid 123 (`assemble build --cuda 13.2`, since 21:04:05)``; None when it did not say
    (an older assemble, a read-only workspace) or that process is gone. Never read through a
    link (read_regular: O_NOFOLLOW)."""
    path = root / STATE_DIR / LOCK_NAME
    try:
        refuse_links(root, path)
        text = read_regular(path, 64 * 1024).decode(errors="replace")
        pid, since, command = text.split("\n", 2)[:3]
        if not Path(f"/proc/{int(pid)}").exists():
            return None
    except (OSError, ValueError, InputError):
        return None
    clock = time.strftime("%H:%M:%S", time.localtime(float(since)))
    return f"pid {int(pid)} (`{command.strip()[:200]}`, since {clock})"


def _write_holder(fd: int) -> None:
    """Say in the lock file who holds it (pid, start time, command line), for a process that
    has to wait; a lock opened read-only says nothing."""
    import sys

    words = [os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "assemble", *sys.argv[1:]]
    if words[0] in ("__main__.py", "-m", "-c"):
        words[0] = "assemble"
    with suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{time.time():.0f}\n{' '.join(words)}\n".encode(errors="replace"), 0)


LOCK_TIMEOUT_ENV = "ASSEMBLE_LOCK_TIMEOUT"
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|min|h)?")
_UNIT_SECONDS = {None: 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def lock_timeout() -> float:
    """ASSEMBLE_LOCK_TIMEOUT in seconds (default 600): a number of seconds, or with a unit
    (90s, 10m, 1h)."""
    text = os.environ.get(LOCK_TIMEOUT_ENV, "600").strip()
    match = _DURATION_RE.fullmatch(text)
    if match is None:
        raise InputError(f"{LOCK_TIMEOUT_ENV}={text!r} is not a duration",
                         hint=f"set {LOCK_TIMEOUT_ENV} to seconds (600) or a number with a unit: 90s, 10m, 1h")
    return float(match[1]) * _UNIT_SECONDS[match[2]]


def locked(function: Callable[Concatenate[Workspace, _P], _R]) -> Callable[Concatenate[Workspace, _P], _R]:
    """Run a library entry point that writes to the workspace under its lock (re-entrant:
    one entry point may call another)."""

    def run(workspace: Workspace, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with workspace.lock():
            return function(workspace, *args, **kwargs)

    functools.update_wrapper(run, function)
    return run


def open_workspace(directory: Path | None, on_lock_wait: LockWait | None = None) -> Workspace:
    """The nearest workspace at or above ``directory`` (``-C DIR``, searched upward as git does),
    else at or above the cwd. ``on_lock_wait``: told when its lock is held by another assemble
    process (then it waits)."""
    root = find_workspace(Path.cwd() if directory is None else directory)
    return Workspace(root=root, manifest=load_manifest(root / MANIFEST_NAME), on_lock_wait=on_lock_wait)


@locked
def add_dependency(workspace: Workspace, name: str, values: dict[str, str], comment: str | None = None) -> Dependency:
    """`assemble add`: a [deps.<name>] table appended to deps.toml (tomlkit: comments and order
    kept), then the whole manifest validated as every command does; when that fails the file is
    put back as it was and the error is raised (nothing invalid stays written)."""
    from assembler.fsutil import atomic_write
    from assembler.manifest.edit import add_dependency as append

    before = workspace.manifest_path.read_text(encoding="utf-8")
    append(workspace.manifest_path, name, values, comment)
    try:
        workspace.reload()
    except ManifestError:
        atomic_write(workspace.manifest_path, before)
        workspace.reload()
        raise
    return workspace.manifest.deps[name]
