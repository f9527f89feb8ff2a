"""Reformatting what `assemble migrate` wrote, in the dependency's own clang-format style, and
nothing else: clang-format (the PyPI ``clang-format`` wheel) runs only when the checkout has a
``.clang-format`` (or ``_clang-format``) between the file and the checkout's root, only with
``--lines`` for the line ranges the step changed, and whatever it would still change outside
those ranges (clang-format may join a touched line with its neighbour) is dropped: an untouched
line is never reformatted.

A style file above the checkout (a home directory's) is not the project's and is not used."""

from __future__ import annotations

import difflib
import subprocess
from dataclasses import dataclass
from pathlib import Path

STYLE_FILES = (".clang-format", "_clang-format")
TIMEOUT_S = 120


class FormatFailed(Exception):
    """clang-format could not format the text; the message says why."""


@dataclass(frozen=True)
class Formatted:
    text: str
    active: list[bool]  # the build's active lines, carried over to the formatted text's lines


def executable() -> Path | None:
    """The clang-format of the ``clang-format`` wheel, None when it is not installed."""
    try:
        import clang_format  # type: ignore[import-untyped]
    except ImportError:
        return None
    path = Path(clang_format.get_executable("clang-format"))
    return path if path.is_file() else None


def style_file(path: Path, checkout: Path) -> Path | None:
    """The project's style file that applies to ``path``: the nearest one in its directory or
    above it, up to the checkout's root."""
    root = checkout.resolve()
    folder = path.resolve().parent
    while True:
        for name in STYLE_FILES:
            if (folder / name).is_file():
                return folder / name
        if folder == root or root not in folder.parents:
            return None
        folder = folder.parent


def touched_lines(before: str, after: str) -> list[tuple[int, int]]:
    """The 1-based inclusive line ranges of ``after`` that are not lines of ``before``."""
    old, new = before.split("\n"), after.split("\n")
    ranges = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "insert") and j2 > j1:
            ranges.append((j1 + 1, j2))
    return ranges


def reformat(text: str, active: list[bool], ranges: list[tuple[int, int]], path: Path, style: Path,
             binary: Path) -> Formatted:
    """``text`` with the lines in ``ranges`` formatted in ``style``; every other line as it was."""
    if not ranges:
        return Formatted(text, active)
    command = [str(binary), f"--style=file:{style}", f"--assume-filename={path}",
               *(f"--lines={a}:{b}" for a, b in ranges)]
    try:
        result = subprocess.run(command, input=text, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise FormatFailed(f"clang-format did not run: {error}") from None
    if result.returncode != 0:
        raise FormatFailed("clang-format failed: "
                           f"{(result.stderr.strip().splitlines() or ['exit ' + str(result.returncode)])[0]}")
    return _within(text, active, result.stdout, ranges)


def _within(text: str, active: list[bool], formatted: str, ranges: list[tuple[int, int]]) -> Formatted:
    """Keep clang-format's changes only where every line it changed was touched."""
    touched = {line - 1 for a, b in ranges for line in range(a, b + 1)}
    old, new = text.split("\n"), formatted.split("\n")
    lines: list[str] = []
    flags: list[bool] = []
    opcodes: list[tuple[str, int, int, int, int]] = []
    for op, a1, a2, b1, b2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if op == "replace" and a2 - a1 == b2 - b1:  # line for line: each line decides for itself
            opcodes += [(op, a1 + k, a1 + k + 1, b1 + k, b1 + k + 1) for k in range(a2 - a1)]
        else:
            opcodes.append((op, a1, a2, b1, b2))
    for tag, i1, i2, j1, j2 in opcodes:
        inside = all(i in touched for i in range(i1, i2)) and (i2 > i1 or (i1 - 1 in touched or i1 in touched))
        if tag == "equal" or not inside:
            lines += old[i1:i2]
            flags += active[i1:i2]
        else:  # a formatted line is compiled when a line it came from was
            lines += new[j1:j2]
            flags += [any(active[i1:i2]) if i2 > i1 else any(active[max(0, i1 - 1):i1 + 1])] * (j2 - j1)
    return Formatted("\n".join(lines), flags)
