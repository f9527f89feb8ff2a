"""Where shared, re-creatable state lives: git mirrors, toolchains, venvs, build artifacts.

An entry ``<kind>/<name>`` has a lock file ``<kind>/<name>.lock``: its creator holds it exclusively
(filelock, an flock), a command using the entry holds it shared (``in_use``), and
`assemble cache prune` deletes an entry only when it can take it exclusively, without waiting.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from assembler.fsutil import STALE_TMP_RE, pid_alive

if TYPE_CHECKING:
    from filelock import FileLock


def cache_root(create: bool = True) -> Path:
    """$ASSEMBLE_CACHE, else the platform's user cache directory (~/.cache/assembler); made
    unless ``create`` is false (a read that finds nothing must leave no directory behind)."""
    override = os.environ.get("ASSEMBLE_CACHE")
    if override:
        root = Path(override)
    else:  # a copy of its XDG rule spared this import: ~8 ms of CPU, under the 10 ms such a copy must save (issue 31)
        import platformdirs

        root = Path(platformdirs.user_cache_dir("assembler"))
    if create:
        root.mkdir(parents=True, exist_ok=True)
    return root


def touch(path: Path) -> None:
    """Record a use of a cache entry (``assemble cache prune --older-than`` goes by last use); a
    read-only cache is fine."""
    with contextlib.suppress(OSError):
        os.utime(path)


def lock_path(entry: Path) -> Path:
    """The one lock file of a cache entry: its creator, its users and prune all take this one."""
    return entry.with_name(f"{entry.name}.lock")


def creating(entry: Path) -> FileLock:
    """Hold ``entry`` exclusively while it is created or changed (a mirror fetched): another
    creator waits for it, and no prune removes it meanwhile."""
    import filelock  # here, not at import: filelock (and logging) cost start-up of offline commands

    return filelock.FileLock(lock_path(entry))


@contextlib.contextmanager
def in_use(entry: Path) -> Iterator[None]:
    """Hold ``entry`` shared for the block, so that no prune removes it meanwhile."""
    try:
        fd = os.open(lock_path(entry), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # a read-only cache: nobody prunes it from here either
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


# What `assemble cache` reports and prunes: kind -> directory under the cache root.
KINDS = {"mirrors": "git", "toolchains": "toolchains", "environments": "venvs", "artifacts": "artifacts",
         "compiler-cache": "sccache", "symbol-tables": "torch-exports", "evidence": "evidence", "checks": "checks",
         "workspaces": "workspaces"}  # per workspace: its builds' compile commands and last merge (builder.evidence)
# sccache's local store is one entry (sccache caps its size itself; a build's server holds it
# shared); torch's exported-symbol tables for `verify`'s diagnosis are one file each; the
# evidence of checks and builds (builder.evidence, a few kB per pin) is one entry.
_WHOLE_DIRECTORY_KINDS = ("compiler-cache", "evidence")
_FILE_KINDS = ("symbol-tables", "checks")  # checks: `assemble check`'s results, <dep>-<key>.json (check.evidence)
_LEFTOVER_PREFIXES = (".tmp-", ".trash-")


class Entry(NamedTuple):
    kind: str  # a key of KINDS
    name: str  # relative to the kind's directory, e.g. "verify-torch2.13.0-221c1bae93e44c5f", "vecadd/<key>"
    path: Path
    bytes: int  # apparent size; a file hard-linked from elsewhere in the cache is counted once
    last_used: float  # Unix time: the marker a use touches, else the newest of the entry's top level
    leftover: bool = False  # staging or trash of a creation or prune that was killed

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "path": str(self.path), "bytes": self.bytes,
                "last_used": round(self.last_used, 3), "leftover": self.leftover}


def _candidates(root: Path) -> Iterator[tuple[str, str, Path]]:
    for kind, directory in KINDS.items():
        base = root / directory
        if not base.is_dir():
            continue
        if kind in _WHOLE_DIRECTORY_KINDS:
            yield kind, directory, base
            continue
        if kind in _FILE_KINDS:
            for child in sorted(base.iterdir()):
                if child.is_file() and not child.is_symlink() and not child.name.endswith(".lock"):
                    yield kind, child.name, child
            continue
        if kind == "artifacts":  # artifacts/<dep>/<key>
            for dep in sorted(base.iterdir()):
                if dep.is_dir() and not dep.is_symlink():
                    for key in sorted(dep.iterdir()):
                        if key.is_dir() and not key.is_symlink():
                            yield kind, f"{dep.name}/{key.name}", key
            continue
        for child in sorted(base.iterdir()):
            if child.is_dir() and not child.is_symlink():
                yield kind, child.name, child


def _last_used(kind: str, path: Path) -> float:
    """The mtime of the marker a use touches (a fetch, for a mirror), else of the entry itself."""
    markers = {"environments": ".assemble-venv.json", "toolchains": ".assemble-toolkit.json",
               "mirrors": "FETCH_HEAD", "artifacts": "artifact.json"}
    for candidate in ((path / markers[kind], path) if kind in markers else (path,)):
        with contextlib.suppress(OSError):
            return candidate.stat().st_mtime
    return 0.0


def _size(path: Path, seen: set[tuple[int, int]]) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                info = os.lstat(os.path.join(directory, name))
                if info.st_nlink > 1:
                    if (info.st_dev, info.st_ino) in seen:
                        continue
                    seen.add((info.st_dev, info.st_ino))
                total += info.st_size
    return total


def cache_entries(root: Path | None = None) -> list[Entry]:
    """Every entry of the cache, by kind, with its size and last use."""
    root = root or cache_root()
    seen: set[tuple[int, int]] = set()
    return [
        Entry(kind, name, path, _size(path, seen), _last_used(kind, path),
              leftover=path.name.startswith(_LEFTOVER_PREFIXES) or _writer_pid(kind, path) is not None)
        for kind, name, path in _candidates(root)
    ]


def _writer_pid(kind: str, path: Path) -> int | None:
    """For a single-file kind, the process writing ``path`` when it is an atomic write's
    temporary (``.NAME.PID-RANDOM.tmp``, fsutil.atomic_write): left behind if that process was
    killed, in use while it lives."""
    match = STALE_TMP_RE.match(path.name) if kind in _FILE_KINDS else None
    return int(match["pid"]) if match is not None else None


def _lock_of(entry: Entry) -> Path:
    """The lock a creator or user of ``entry`` holds; a staging directory ``.tmp-<final>-<pid>``
    is held through its final entry's lock."""
    name = entry.path.name
    if entry.leftover:
        name = name.split("-", 1)[1].rsplit("-", 1)[0]  # .tmp-<final>-<pid> / .trash-<final>-<pid>
    return lock_path(entry.path.with_name(name))


class PruneResult:
    """What a prune did with each entry (a plain class: see report.output.Settings)."""

    __slots__ = ("in_use", "kept", "recent", "removed")

    def __init__(self) -> None:
        self.removed: list[Entry] = []
        self.in_use: list[Entry] = []  # held by a running command: kept
        self.kept: list[Entry] = []  # the workspace's (--keep)
        self.recent: list[Entry] = []  # used within --older-than

    def to_json(self) -> dict[str, Any]:
        return {
            "removed": [e.to_json() for e in self.removed], "in_use": [e.to_json() for e in self.in_use],
            "kept": [e.to_json() for e in self.kept], "recent": [e.to_json() for e in self.recent],
            "freed_bytes": sum(e.bytes for e in self.removed),
        }


def prune(
    older_than_days: float | None = None, keep: Iterable[Path] = (), dry_run: bool = False, root: Path | None = None,
) -> PruneResult:
    """Remove the entries not used for ``older_than_days`` (all, when None), except those under
    ``keep`` and those a running command holds: an entry goes only when its lock can be taken
    exclusively without waiting, and it is first renamed aside, so no command ever finds it half
    removed under its own name."""
    root = root or cache_root()
    kept_paths = {path.resolve() for path in keep}
    cutoff = None if older_than_days is None else time.time() - older_than_days * 86400
    result = PruneResult()
    for entry in cache_entries(root):
        writer = _writer_pid(entry.kind, entry.path)
        if writer is not None:  # a temporary file: its writer's, while that process lives
            if writer != os.getpid() and pid_alive(writer):
                result.in_use.append(entry)
                continue
            if not dry_run:
                entry.path.unlink(missing_ok=True)
            result.removed.append(entry)
            continue
        if entry.path.resolve() in kept_paths and not entry.leftover:
            result.kept.append(entry)
            continue
        if cutoff is not None and entry.last_used > cutoff and not entry.leftover:
            result.recent.append(entry)
            continue
        lock = _lock_of(entry)
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            result.in_use.append(entry)  # a read-only cache: not ours to prune
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                result.in_use.append(entry)
                continue
            if not entry.path.exists():  # removed meanwhile by another prune
                continue
            if not dry_run:
                trash = entry.path  # a leftover is removed where it is
                if not entry.leftover:
                    trash = entry.path.with_name(f".trash-{entry.path.name}-{os.getpid()}")
                    os.rename(entry.path, trash)
                if trash.is_dir():
                    import shutil

                    shutil.rmtree(trash, ignore_errors=True)
                else:
                    trash.unlink(missing_ok=True)
            result.removed.append(entry)
        finally:
            os.close(fd)
    return result


def summary(entries: Iterable[Entry]) -> dict[str, dict[str, int]]:
    """kind -> {"count", "bytes"}, every kind present."""
    totals = {kind: {"count": 0, "bytes": 0} for kind in KINDS}
    for entry in entries:
        totals[entry.kind]["count"] += 1
        totals[entry.kind]["bytes"] += entry.bytes
    return totals

