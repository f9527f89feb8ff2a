"""Whose objects a repository reads.

A checkout owns its objects. ``forks/<dep>`` used to borrow the cache mirror's through
``objects/info/alternates``, so a copied workspace, `assemble cache clean` or a prune left it
unable to read its own history. Objects now come into a checkout by hard link (a copy across
file systems) from a mirror: a pack is immutable and named by its content, so linking it is
instant, costs no space, and survives the mirror's removal (:func:`link_objects`). A checkout
that still borrows (made by an older assemble, or rebased by one, which borrowed the followed
repository's mirror) is made whole again by :func:`own_objects`.

A repository that assemble did not make is read only when its objects are its own
(:func:`foreign_objects`): alternates, a ``commondir`` or a symbolic link in its object store
would let a repository carried in a workspace serve objects of any other repository on the
machine.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Sequence
from pathlib import Path

from assembler.errors import InputError, WouldLoseWorkError
from assembler.fsutil import UnsafeFile, read_regular

ALTERNATES = Path("info") / "alternates"  # below an object directory
ASIDE = Path("info") / "alternates.assemble-dropped"  # alternates set aside while a repair checks the checkout
_PACK = re.compile(r"^(pack-[0-9a-f]{40}(?:[0-9a-f]{24})?)\.(pack|rev|idx)$")
_LOOSE_DIR = re.compile(r"^[0-9a-f]{2}$")
_LOOSE = re.compile(r"^[0-9a-f]{38}(?:[0-9a-f]{24})?$")
_ALTERNATES_LIMIT = 1 << 20
_LINK_FAILED = (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES, errno.ENOTSUP)


def git_dir_of(path: Path) -> Path:
    """The git directory of a checkout or bare repository at ``path`` (``path/.git`` when that
    is a directory)."""
    dot_git = path / ".git"
    return dot_git if dot_git.is_dir() else path


def borrowed(objects: Path) -> list[Path]:
    """The object stores that the object directory ``objects`` reads besides its own, as git
    reads ``info/alternates``: one per line, ``#`` comments, relative to ``objects``. A file
    that is not a small regular one (a link, a FIFO) counts as borrowing from it."""
    listed = objects / ALTERNATES
    try:
        text = read_regular(listed, _ALTERNATES_LIMIT).decode(errors="replace")
    except FileNotFoundError:
        return []
    except (OSError, UnsafeFile):
        return [listed]
    lines = (line.strip() for line in text.splitlines())
    return [objects / line for line in lines if line and not line.startswith("#")]


def borrows(checkout: Path) -> bool:
    """Whether ``checkout`` reads objects through alternates (one stat: the no-op path asks)."""
    return os.path.lexists(checkout / ".git" / "objects" / ALTERNATES)


def link_objects(source: Path, objects: Path) -> int:
    """Every pack and loose object of the object directory ``source`` that ``objects`` lacks,
    hard-linked into it (copied where no link can be made: another file system). A pack's
    index comes last, since git finds a pack by its index: a run killed in between leaves a
    pack git does not read, never an index without its pack. Returns how many files came."""
    came = 0
    pack_dir = source / "pack"
    names = sorted(_entries(pack_dir))
    packs = {match[1] for name in names if (match := _PACK.match(name))}
    for pack in sorted(packs):
        if f"{pack}.idx" not in names or f"{pack}.pack" not in names:
            continue  # being written by a fetch, or half removed: not a pack yet
        for suffix in ("pack", "rev", "idx"):
            if f"{pack}.{suffix}" in names:
                came += _place(pack_dir / f"{pack}.{suffix}", objects / "pack" / f"{pack}.{suffix}")
    for directory in sorted(_entries(source)):
        if _LOOSE_DIR.match(directory):
            for name in sorted(_entries(source / directory)):
                if _LOOSE.match(name):
                    came += _place(source / directory / name, objects / directory / name)
    return came


def _entries(directory: Path) -> list[str]:
    """The regular files and directories of ``directory`` (never a link), none when absent."""
    try:
        with os.scandir(directory) as listing:
            return [entry.name for entry in listing if not entry.is_symlink()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _place(source: Path, target: Path) -> int:
    """``source`` at ``target`` (a hard link, else a copy renamed into place); 0 when it was
    already there (objects are named by content: the same name is the same bytes)."""
    if os.path.lexists(target):
        return 0
    target.parent.mkdir(exist_ok=True)
    try:
        os.link(source, target)
        return 1
    except FileExistsError:
        return 0
    except FileNotFoundError:
        return 0  # removed meanwhile (a loose object packed by a gc): the caller checks what it needs
    except OSError as error:
        if error.errno not in _LINK_FAILED:
            raise
    import shutil  # here: the no-op checkout asks only borrows()

    staging = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(source, staging)
        os.chmod(staging, 0o444)
        os.replace(staging, target)
    except FileNotFoundError:
        return 0
    finally:
        with contextlib.suppress(FileNotFoundError):
            staging.unlink()
    return 1


def own_objects(checkout: Path, stores: Sequence[Path], trusted: Path) -> None:
    """Make ``checkout`` hold the objects it borrows, then stop borrowing.

    The objects of ``stores`` (the mirrors this checkout is made from, held by the caller) and
    of every borrowed store below ``trusted`` (the cache's mirrors: a copied workspace's
    checkout still names its original's) are linked in. A borrowed store elsewhere is never
    read (a checkout carried in a workspace could name any repository of the machine), and
    one that is gone (`assemble cache clean`) cannot be: then the checkout is checked for
    every object its refs need, and left as it was when some are missing."""
    objects = checkout / ".git" / "objects"
    _put_back_aside(objects)
    if not os.path.lexists(objects / ALTERNATES):
        return
    from assembler.cache import in_use

    root = trusted.resolve()
    for source in dict.fromkeys((Path(store) / "objects").resolve() for store in stores):
        link_objects(source, objects)
    complete = True
    for store in borrowed(objects):
        resolved = store.resolve()
        if not resolved.is_relative_to(root):
            complete = False
            continue
        with in_use(resolved.parent):  # a mirror of the cache: no prune removes it while it is linked from
            if resolved.is_dir():
                link_objects(resolved, objects)
            else:
                complete = False
    os.replace(objects / ALTERNATES, objects / ASIDE)
    if not complete:
        from assembler.git.process import WorkTree

        result = WorkTree(checkout).run("rev-list", "--objects", "--all", "--quiet", check=False)
        if result.returncode != 0:
            os.replace(objects / ASIDE, objects / ALTERNATES)
            from assembler.git.reproducible import missing_object

            missing = missing_object(result.stderr)
            listed = ", ".join(str(store) for store in borrowed(objects))
            raise WouldLoseWorkError(
                f"{checkout} lacks objects it borrowed from {listed}"
                + (f" (missing object {missing})" if missing else f" ({result.stderr.strip()[:200]})"),
                hint=f"that store was moved or removed (`assemble cache clean`, a copied workspace): put it back, or "
                     f"move {checkout} away and run `assemble checkout` again (its unexported commits are lost "
                     "with it)",
            )
    (objects / ASIDE).unlink()


def _put_back_aside(objects: Path) -> None:
    """A repair killed while it checked the checkout leaves the alternates set aside: put back."""
    if os.path.lexists(objects / ASIDE) and not os.path.lexists(objects / ALTERNATES):
        os.replace(objects / ASIDE, objects / ALTERNATES)


def local_repository(url: str) -> Path | None:
    """The path of a fetch URL that names a repository on this machine (a path or file://),
    else None (a network URL, or scp-like ``host:path``)."""
    if url.startswith("file://"):
        return Path(url[len("file://"):])
    if "://" in url or re.match(r"^[^/]+:", url):
        return None
    return Path(url)


def foreign_objects(path: Path) -> str | None:
    """Why the repository at ``path`` (a fetch URL on this machine, found the way git's
    upload-pack finds it) reads objects that are not its own, or None when they all are:
    alternates (``objects/info/alternates``, ``http-alternates``), a ``commondir`` (another
    repository's object store), or a symbolic link in its object store."""
    git_dir = _upload_pack_dir(path)
    if git_dir is None:
        return None  # not a repository: the fetch says so
    common = git_dir / "commondir"
    if os.path.lexists(common):
        return f"{common} makes it read another repository's objects"
    objects = git_dir / "objects"
    if objects.is_symlink():
        return f"{objects} is a symbolic link (to {os.readlink(objects)})"
    if borrowed(objects):
        return f"{objects / ALTERNATES} makes it read the objects of other repositories"
    if os.path.lexists(objects / "info" / "http-alternates"):
        return f"{objects / 'info' / 'http-alternates'} makes it read the objects of other repositories"
    for directory in [objects, *(objects / name for name in _entries(objects) if (objects / name).is_dir())]:
        try:
            with os.scandir(directory) as listing:
                linked = next((entry.path for entry in listing if entry.is_symlink()), None)
        except OSError:
            continue
        if linked is not None:
            return f"{linked} is a symbolic link (to {os.readlink(linked)})"
    return None


def _upload_pack_dir(path: Path) -> Path | None:
    """The git directory git's upload-pack serves for ``path`` (enter_repo: ``path/.git``,
    ``path``, ``path.git/.git``, ``path.git``; a ``.git`` file's ``gitdir:`` followed)."""
    for candidate in (path / ".git", path, Path(f"{path}.git") / ".git", Path(f"{path}.git")):
        if candidate.is_file():
            try:
                text = candidate.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                continue
            if text.startswith("gitdir:"):
                target = Path(text[len("gitdir:"):].strip())
                return target if target.is_absolute() else candidate.parent / target
            continue
        if (candidate / "HEAD").is_file() and (candidate / "objects").exists():
            return candidate
    return None


def refuse_foreign(url: str, shown: str) -> None:
    """InputError when ``url`` (shown to the user as ``shown``) is a repository on this
    machine that reads objects not its own (:func:`foreign_objects`)."""
    path = local_repository(url)
    reason = foreign_objects(path) if path is not None else None
    if reason is not None:
        raise InputError(
            f"{shown}: {reason}; assemble fetches only from a repository whose objects are its own",
            hint=f"make it self-contained (`git -C {path} repack -a -d`, then remove objects/info/alternates), "
                 "or point [mirrors] at a complete copy",
        )
