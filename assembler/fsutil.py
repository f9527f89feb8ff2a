"""Atomic file replacement: a reader (or a crash) sees the old file or the new one, never half.

shutil is imported where used, and temporary files are made without tempfile: every command
imports this module, and the two (with the compression modules shutil loads) cost ~5 ms of the
100 ms start-up budget."""

from __future__ import annotations

import errno
import functools
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from assembler.errors import InputError

if TYPE_CHECKING:
    from hashlib import _Hash


def sha256(data: bytes = b"") -> _Hash:
    """A SHA-256 hash object (hashlib, imported here: not every command makes a digest). A copy
    of CPython's private ``_sha256`` once saved hashlib's OpenSSL load; benchmarks/startup.py
    --tricks priced that at 3-4 ms of CPU per command (issue 31), under the 10 ms a second way
    to hash is worth."""
    import hashlib

    return hashlib.sha256(data)


def digest_texts(*texts: str | bytes) -> str:
    """The hex SHA-256 of ``texts``, each followed by NUL: every key of the build, the check
    and the evidence (builder.cache re-exports it); import-light for the start-up paths."""
    digest = sha256()
    for text in texts:
        digest.update(text.encode() if isinstance(text, str) else text)
        digest.update(b"\0")
    return digest.hexdigest()


def atomic_write(path: Path, data: bytes | str, *, inside: Path | None = None) -> None:
    """Write ``data`` to ``path`` through a fsynced temporary file in the same directory. With
    ``inside`` (a workspace root), no directory between it and ``path`` may be a symbolic link
    (refuse_links); ``path`` itself, a link or not, is replaced, never written through."""
    if inside is not None:
        refuse_links(inside, path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = _exclusive_temporary(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        try:  # the mode of the file replaced; never of what a link there points at
            previous = os.lstat(path).st_mode
        except OSError:
            previous = 0
        os.chmod(tmp, previous & 0o7777 if stat.S_ISREG(previous) else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _exclusive_temporary(path: Path) -> tuple[int, Path]:
    """A new file ``.NAME.PID-RANDOM.tmp`` next to ``path``, opened for writing (mode 0600), as
    tempfile.mkstemp makes it; without tempfile's import (~4 ms of start-up)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary name", str(path.parent))


def atomic_write_if_changed(path: Path, data: bytes | str, *, inside: Path | None = None) -> bool:
    """Like atomic_write, but leaves the file (and its mtime) alone when the bytes are equal;
    a link there is replaced, never read (read_regular)."""
    payload = data.encode() if isinstance(data, str) else data
    try:
        if read_regular(path, len(payload)) == payload:
            if inside is not None:
                refuse_links(inside, path.parent)
            return False
    except (OSError, UnsafeFile):
        pass
    atomic_write(path, payload, inside=inside)
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
    """Swap two paths atomically with Linux renameat2(RENAME_EXCHANGE); False where the system
    or the filesystem does not support it. Raises OSError(EXDEV) across filesystems."""
    import ctypes

    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0:
        return True
    error = ctypes.get_errno()
    if error == errno.EXDEV:
        raise OSError(error, os.strerror(error), str(first), None, str(second))
    return False


def replace_dir(staged: Path, target: Path) -> None:
    """Put the fully written directory ``staged`` in place of ``target`` in one step, so readers
    see the old series or the new one; ``staged`` is consumed.

    A rename cannot cross filesystems (EXDEV: ``patches/`` on another mount than
    ``.assemble/``, or an overlayfs lower layer), so ``staged`` is first copied, fsynced, next
    to ``target`` when it lives elsewhere, and the swap happens there."""
    remove_stale(target.parent)  # copies left by a swap that was killed
    if os.stat(staged).st_dev != os.stat(target.parent).st_dev:
        staged = _restage(staged, target)
    try:
        _swap(staged, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV or staged.parent == target.parent:
            raise
        _swap(_restage(staged, target), target)


def _restage(staged: Path, target: Path) -> Path:
    """A fsynced copy of ``staged`` next to ``target`` (same filesystem); ``staged`` is removed.
    A failed copy (a full disk) removes its partial copy and raises the OSError as it came."""
    import shutil

    local = temporary_path(target)
    shutil.rmtree(local, ignore_errors=True)
    try:
        for directory, dirs, files in os.walk(staged):
            source_dir = Path(directory)
            copy_dir = local / source_dir.relative_to(staged)
            copy_dir.mkdir()
            for name in [*files, *(d for d in dirs if (source_dir / d).is_symlink())]:
                source = source_dir / name
                if source.is_symlink():
                    os.symlink(os.readlink(source), copy_dir / name)
                else:
                    shutil.copy2(source, copy_dir / name)
                    _fsync(copy_dir / name)
        for directory, _, _ in os.walk(local):
            _fsync(Path(directory))
    except BaseException:
        shutil.rmtree(local, ignore_errors=True)
        raise
    shutil.rmtree(staged)
    return local


def _fsync(path: Path) -> None:
    if path.is_symlink():
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _swap(staged: Path, target: Path) -> None:
    import shutil

    if not target.exists() and not target.is_symlink():
        os.replace(staged, target)
        return
    if _rename_exchange(staged, target):
        shutil.rmtree(staged)
        return
    # No RENAME_EXCHANGE: two renames. If the second fails, the first is undone, so the
    # series is never left only under the backup name.
    backup = target.with_name(f".{target.name}.old")
    shutil.rmtree(backup, ignore_errors=True)
    os.replace(target, backup)
    try:
        os.replace(staged, target)
    except BaseException:
        os.replace(backup, target)
        raise
    shutil.rmtree(backup)


# `.NAME.PID.tmp` or `.NAME.PID-RANDOM.tmp`: a temporary of process PID (see temporary_path).
STALE_TMP_RE = re.compile(r"^\..*\.(?P<pid>\d+)(?:-[A-Za-z0-9_]+)?\.tmp$")


def temporary_path(path: Path) -> Path:
    """``.NAME.PID.tmp`` next to ``path``: on its filesystem (so renaming it into place is
    atomic) and named after this process, so that a later run can tell a leftover of a killed
    process (remove_stale) from the file of a live one."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def walk(root: str | os.PathLike[str],
         onerror: Callable[[OSError], object] | None = None) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(root)`` top-down (links to directories listed, never followed; the caller may
    sort or prune ``dirnames`` in place), without recursion: Python 3.11's os.walk recurses once
    per level and raises RecursionError in a tree about 1,000 directories deep."""
    stack = [os.fspath(root)]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as listing:
                entries = list(listing)
        except OSError as error:
            if onerror is not None:
                onerror(error)
            continue
        dirnames: list[str] = []
        filenames: list[str] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (dirnames if is_dir else filenames).append(entry.name)
        yield top, dirnames, filenames
        stack += [path for name in reversed(dirnames) if not os.path.islink(path := os.path.join(top, name))]


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (of any user)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True


def remove_stale(directory: Path, pattern: re.Pattern[str] = STALE_TMP_RE) -> list[Path]:
    """Remove the entries of ``directory`` whose name matches ``pattern`` (a ``pid`` group)
    and whose process is gone: what a run killed with SIGKILL left behind. Best effort: a
    directory that cannot be read or written (a read-only workspace) is left alone."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.search(entry.name)
        if match is None or int(match["pid"]) == os.getpid() or pid_alive(int(match["pid"])):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                import shutil

                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue
        removed.append(Path(entry.path))
    return removed


def ignored_dir(path: Path, inside: Path | None = None) -> Path:
    """Create ``path`` holding a ``.gitignore`` of ``*`` (as venv does), so the user's own
    repository never picks up checkouts, logs or artifacts, whatever its .gitignore says. With
    ``inside`` (a workspace root), refused when a link lies on the way (refuse_links)."""
    if inside is not None:
        refuse_links(inside, path / ".gitignore")
    ignore = path / ".gitignore"
    if not ignore.exists():
        path.mkdir(parents=True, exist_ok=True)
        atomic_write(ignore, "# created by assemble: nothing here belongs in git\n*\n")
    return path


# Workspace state paths (.assemble/, forks/, the lock) and symbolic links. A workspace comes
# from someone else's repository or archive; a link committed there (``.assemble/lock ->
# ~/.bashrc``, ``forks -> ~``) would turn assemble's own writes into writes outside it. So no
# state path is reached through a link: components are checked with lstat, files are opened
# with O_NOFOLLOW, and a link found is refused naming it and how to remove it.


def unsafe_state_path(path: Path, mode: int) -> InputError:
    """The error for ``path`` (of lstat ``mode``), a symbolic link or a special file (a FIFO, a
    device, a socket) found where assemble keeps workspace state: its path, a link's target,
    and the fix (exit 2)."""
    import shlex

    if stat.S_ISDIR(mode):
        return InputError(f"{path} is a directory, where assemble keeps a file of its state",
                          hint=f"remove it: rm -r {shlex.quote(str(path))}")
    if not stat.S_ISLNK(mode):
        return InputError(f"{path} is {_file_kind(mode)}: assemble keeps only files and directories in its state",
                          hint=f"remove it: rm {shlex.quote(str(path))}")
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return InputError(f"{path} is a symbolic link{target}: assemble keeps its state inside the workspace "
                      "and never writes through a link, which could lead outside it",
                      hint=f"remove the link: rm {shlex.quote(str(path))}")


def refuse_links(root: Path, path: Path) -> None:
    """Raise unsafe_state_path for the first component of ``path`` below ``root`` (``root``
    excluded, ``path`` included) that is a symbolic link. Components that do not exist yet are
    fine: assemble creates them as directories. ``path`` must be spelled below ``root``."""
    relative = path.relative_to(root)
    if ".." in relative.parts:
        raise ValueError(f"{path} leaves {root}")
    current = root
    for part in relative.parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return
        if stat.S_ISLNK(mode):
            raise unsafe_state_path(current, mode)


def refuse_links_below(directory: Path, depth: int, skip: tuple[str, ...] = ()) -> None:
    """Raise unsafe_state_path for a symbolic link or a special file among the entries of
    ``directory`` down to ``depth`` levels (directories are entered, links never); ``skip``:
    entries of ``directory`` itself not looked into (they hold links assemble made and
    replaces, never writes through). A directory that cannot be read is left to the operation
    that needs it."""
    level = [directory]
    for current_depth in range(depth):
        below: list[Path] = []
        for parent in level:
            try:
                with os.scandir(parent) as listing:
                    entries = sorted(listing, key=lambda entry: entry.name)
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if not (current_depth == 0 and entry.name in skip):
                        below.append(Path(entry.path))
                elif not entry.is_file(follow_symlinks=False):  # a link, a FIFO, a device, a socket
                    raise unsafe_state_path(Path(entry.path), entry.stat(follow_symlinks=False).st_mode)
        level = below


def open_state_file(root: Path, path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags, mode)`` for a state file of the workspace at ``root``, never
    through a symbolic link: none on the way (refuse_links), and the file itself opened with
    O_NOFOLLOW (with O_CREAT, its missing directories are made). Only a regular file is
    opened (O_NONBLOCK until checked, so a FIFO cannot hang the open); anything else is refused
    like a link, naming it (exit 2)."""
    import fcntl

    refuse_links(root, path.parent)
    if flags & os.O_CREAT:
        path.parent.mkdir(parents=True, exist_ok=True)
    nofollow = os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | nofollow, mode)
    except OSError as error:
        if error.errno == errno.ELOOP and os.path.islink(path):
            raise unsafe_state_path(path, stat.S_IFLNK) from None
        raise
    kind = os.fstat(fd).st_mode
    if not stat.S_ISREG(kind):
        os.close(fd)
        raise unsafe_state_path(path, kind)
    if not flags & os.O_NONBLOCK:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


class UnsafeFile(ValueError):
    """A file that must be data is something else: a symbolic link, a FIFO, a device, a socket, a
    directory, or larger than its bound. Reading it could hang (a FIFO), never end (a device),
    fill memory or the disk, or read a file of this machine that the input does not own."""


def open_regular(path: Path) -> tuple[int, os.stat_result]:
    """``path`` opened for reading, and its ``fstat``, only when it is a regular file and not a
    symbolic link: opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO does not block the open) and
    checked on the descriptor (no race between the check and the read). UnsafeFile otherwise;
    OSError as it came when the path cannot be opened at all."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP and os.path.islink(path):
            raise UnsafeFile(f"{path} is a symbolic link") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafeFile(f"{path} is {_file_kind(info.st_mode)}, not a regular file")
    return fd, info


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (see open_regular), refused unread when it is over
    ``limit`` bytes, and never more than ``limit`` read however it grows meanwhile."""
    fd, info = open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > limit:
            raise UnsafeFile(f"{path} is {info.st_size} bytes, over the limit of {limit}")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(f"{path} grew past the limit of {limit} bytes while being read")
    return data


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")
