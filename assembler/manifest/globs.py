"""Install globs (``[deps.X.install]`` keys) as regular expressions, compiled once: the
manifest loader compiles every glob, so a bad one is a deps.toml error, not a crash in merge.

``*`` and ``?`` stay within one path component, a ``**`` component spans any number of them,
``[...]`` is a character class (``[!...]`` negated).

Source globs (a recipe's ``sources``) are expanded against a checkout by :func:`expand`, with
the meaning of Python's ``glob(recursive=True)``, except that no symbolic link to a directory is
ever entered, whether a wildcard or a literal component names it (as CMake's ``GLOB_RECURSE``
without ``FOLLOW_SYMLINKS``): a cycle (``csrc/a -> .``) cannot hang the walk and a link out of
the tree (``csrc/b -> /``) is never listed. Name the real directory instead of a link to it.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate an install glob over '/'-separated paths into a full-match regex; raises
    re.error for a glob whose character class is not valid (``[z-a]``)."""
    parts = pattern.strip("/").split("/")
    out = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        component, i = [], 0
        while i < len(part):
            char = part[i]
            closing = part.find("]", i + 2) if char == "[" else -1
            if char == "*":
                component.append("[^/]*")
            elif char == "?":
                component.append("[^/]")
            elif closing != -1:
                body = part[i + 1:closing]
                body = ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\")
                component.append(f"[{body}]")
                i = closing
            else:
                component.append(re.escape(char))
            i += 1
        out.append("".join(component) + ("" if last else "/"))
    return re.compile("".join(out))


def glob_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a usable install glob, or None."""
    if not pattern.strip("/"):
        return "it is empty"
    try:
        glob_regex(pattern)
    except re.error as exc:
        return f"it is not a valid glob ({exc})"
    return None


MAGIC = frozenset("*?[")  # a component holding one is matched, not looked up


def expand(root: Path, pattern: str) -> list[str]:
    """The entries below ``root`` that ``pattern`` names (POSIX paths relative to ``root``,
    sorted, each once), directories excepted: files, and links of any kind, which the caller
    judges. A name starting with "." is matched only by a component that starts with one, and
    ``**`` enters no such directory, as in Python's glob. Raises ValueError for a pattern that
    is absolute or climbs with "..": it would name files outside ``root``."""
    parts = [part for part in pattern.split("/") if part not in ("", ".")]
    if pattern.startswith("/") or ".." in parts:
        raise ValueError(f"{pattern} names files outside the checkout")
    if not parts:
        return []
    base = os.fspath(root)
    found: set[str] = set()
    pending: list[tuple[tuple[str, ...], int]] = [((), 0)]  # (a real directory below root, the next component)
    visited: set[tuple[tuple[str, ...], int]] = set()  # "**/**" reaches a directory twice; walk it once
    while pending:
        state = pending.pop()
        if state in visited:
            continue
        visited.add(state)
        directory, index = state
        part, last = parts[index], index == len(parts) - 1
        if part == "**" and not last:
            pending.append((directory, index + 1))  # ** spans no directory too
        if MAGIC.isdisjoint(part):
            candidates = [part]
        else:
            candidates = [name for name in _names(base, directory)
                          if (part.startswith(".") or not name.startswith("."))
                          and (part == "**" or fnmatch.fnmatchcase(name, part))]
        for name in candidates:
            path = (*directory, name)
            try:
                mode = os.lstat(os.path.join(base, *path)).st_mode  # a link is judged as itself, never entered
            except OSError:
                continue
            if not stat.S_ISDIR(mode):
                if last:
                    found.add("/".join(path))
            elif part == "**":
                pending.append((path, index))  # one directory more
            elif not last:
                pending.append((path, index + 1))
    return sorted(found)


def _names(base: str, directory: tuple[str, ...]) -> list[str]:
    try:
        with os.scandir(os.path.join(base, *directory)) as entries:
            return [entry.name for entry in entries]
    except OSError:
        return []
