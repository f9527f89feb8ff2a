"""Symbolic links in a dependency's checkout: the one rule for where they may lead.

A build reads through links: CMake's ``install(DIRECTORY)`` and the wheel writer copy what a
link in a python package points at, the compiler reads a linked header or source, setup.py
copies package data. A patch (or an upstream commit) that adds ``pkg/passwd -> /etc/passwd``
would put the build machine's files into the wheel. So a link may lead only into the
dependency's own work tree: the checkout, less git's directories (``.git``).

:func:`resolve` follows a path the way the kernel does (a link's target is spliced in, ``..``
climbs to the real parent, at most :data:`MAX_HOPS` links per path, as Linux), but inside the
checkout only: an absolute target, a ``..`` above the checkout (even one that comes back in: it
depends on the checkout's name), or an end inside ``.git`` is an escape, decided without a
single lookup outside the tree. A dangling link is followed as far as it exists and the rest
taken by name, so one that would dangle outside is an escape too; a cycle is not (reading it
fails with ELOOP, nothing leaves). :func:`escaping_links` walks the whole tree without
following any link, so untracked and submodule files count and a cycle cannot hang it.

:func:`refuse_escaping` runs before any toolchain or backend (``builder.pipeline``), in `check`,
`build --plan` and `assess` (``builder.units.translation_units``); the backends judge the tree
again after their tools ran (``backends.refuse_escaping_links``), so a link made meanwhile
fails the build. Source globs enter no directory link at all (``manifest.globs.expand``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import NamedTuple

from assembler.errors import InputError

GIT_DIR = ".git"  # a work tree's (or a submodule's) git directory or gitfile: never the dependency's data
MAX_HOPS = 40  # links followed per path before the kernel says ELOOP (Linux's MAXSYMLINKS)
SHOWN = 8  # links named in one error; the count says how many more


class Escape(NamedTuple):
    """A link whose target leaves the checkout."""

    link: str  # relative to the checkout, POSIX spelling
    target: str  # what readlink says
    why: str


class Resolved(NamedTuple):
    """Where a path inside the checkout leads: ``path`` (relative, POSIX; "" for the checkout
    itself) when it stays inside, else ``why`` it leaves."""

    path: str | None
    why: str | None = None


def resolve(root: Path, relative: str) -> Resolved:
    """Follow ``relative`` (POSIX, below ``root``) through every link on the way, inside ``root``
    only (see the module's note). Never looks at a path outside ``root``."""
    if relative.startswith("/"):
        return Resolved(None, "it is absolute")
    return _follow(os.fspath(root), [], relative.split("/"))


def _follow(root: str, done: list[str], parts: list[str]) -> Resolved:
    """``done``: real directories below ``root`` already walked (no link among them);
    ``parts``: the components still to follow."""
    pending = list(reversed(parts))
    chain: list[str] = []  # the links followed, then the last target: said when more than one
    exists = True  # once a component is missing, the rest is taken by name

    def out(where: str) -> Resolved:
        return Resolved(None, f"it leads {where}" + (f", via {' -> '.join(chain)}" if len(chain) > 2 else ""))

    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not done:
                return out("above the checkout")
            done.pop()
            continue
        if exists:
            path = os.path.join(root, *done, part)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                exists = False
            else:
                if stat.S_ISLNK(mode):
                    if len(chain) >= MAX_HOPS:  # a cycle: every read fails (ELOOP), nothing outside is reached
                        return Resolved("/".join([*done, part]))
                    try:
                        target = os.readlink(path)
                    except OSError:
                        return out("to a link that cannot be read")
                    chain[-1:] = ["/".join([*done, part]), target]
                    if target.startswith("/") or not target:
                        return out("to an absolute path" if target else "nowhere (an empty target)")
                    pending.extend(reversed(target.split("/")))
                    continue
                if not stat.S_ISDIR(mode):
                    exists = False  # a file: anything after it is only a name (ENOTDIR)
        done.append(part)
    if GIT_DIR in done:
        return out(f"into git's own {GIT_DIR}")
    return Resolved("/".join(done))


def escaping_links(root: Path) -> list[Escape]:
    """Every link below ``root`` whose target leaves it, sorted by path. The walk never follows a
    link (each is judged by :func:`resolve`, from its own directory) and skips ``.git``
    directories; a directory it cannot read is skipped (the build cannot read it either)."""
    base = os.fspath(root)
    found: list[Escape] = []
    pending: list[list[str]] = [[]]
    while pending:
        parts = pending.pop()
        try:
            with os.scandir(os.path.join(base, *parts)) as entries:
                listed = list(entries)
        except OSError:
            continue
        for entry in listed:
            if entry.is_symlink():
                where = _follow(base, list(parts), [entry.name])  # its directories are real: the walk took no link
                if where.path is None:
                    try:
                        target = os.readlink(entry.path)
                    except OSError:
                        target = "?"
                    found.append(Escape("/".join([*parts, entry.name]), target, where.why or "it leaves the checkout"))
            elif entry.is_dir(follow_symlinks=False) and entry.name != GIT_DIR:
                pending.append([*parts, entry.name])
    return sorted(found)


class LinkOutOfTree(InputError):
    """Links in a dependency's checkout that lead out of it (exit 2), named relative to the
    workspace with the fix: the build would read, and ship or compile, what they point at."""

    def __init__(self, dep: str, shown_root: str, found: list[Escape]) -> None:
        named = "; ".join(f"{shown_root}/{item.link} -> {item.target} ({item.why})" for item in found[:SHOWN])
        more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        count = "a symbolic link" if len(found) == 1 else f"{len(found)} symbolic links"
        super().__init__(
            f"{dep}: {count} in {shown_root} {'leads' if len(found) == 1 else 'lead'} out of the dependency's tree "
            f"(the build would read, and could ship, what {'it points' if len(found) == 1 else 'they point'} at): "
            f"{named}{more}",
            hint=f"a link in {dep} may point only inside its checkout: remove it, or replace it with the file "
                 f"it stands for, in the patch that adds it (edit {shown_root}, commit, `assemble export {dep}`), then "
                 "build again",
        )
        self.found = found


def shown(workspace_root: Path, checkout: Path) -> str:
    """The checkout as an error names it: relative to the workspace when it is inside."""
    try:
        return checkout.resolve().relative_to(workspace_root.resolve()).as_posix()
    except ValueError:
        return str(checkout)


def refuse_escaping(workspace_root: Path, dep: str, checkout: Path) -> None:
    """Raise LinkOutOfTree when any link in ``checkout`` leads out of it (see the module's note)."""
    found = escaping_links(checkout.resolve())
    if found:
        raise LinkOutOfTree(dep, shown(workspace_root, checkout), found)
