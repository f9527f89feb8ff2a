"""Install globs (``[deps.X.install]`` keys) as regular expressions, compiled once: the
manifest loader compiles every glob, so a bad one is a deps.toml error, not a crash in merge.

``*`` and ``?`` stay within one path component, a ``**`` component spans any number of them,
``[...]`` is a character class (``[!...]`` negated).
"""

from __future__ import annotations

import re
from functools import lru_cache


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
