"""Keeping a rewritten line's continuation lines where the code put them: a rewrite that makes
``torch::checkAllContiguous("f", {{A, "A", 0},`` into ``assemble_stable::checkAllContiguous(...``
moves the brace that the next lines (``{B, "B", 1},``) were aligned under, and a person who made
that edit would move them too (clang-format's ``AlignAfterOpenBracket``, and what the humans did
in every migration we measured against). Only a line that was aligned to a bracket left open on
an earlier line moves, by as much as that bracket's first argument moved; a line indented some
other way (a fixed indent, a tab, a comment, a directive) is left as it was. A trailing ``\\``
(a macro body's continuation) keeps its column when there is room.

When the project has a clang-format style, migration/clangformat.py formats the lines this moved
as well, in that style."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from assembler.migration.lexer import blank_comments_and_strings

OPENS, CLOSES = "([{", ")]}"
_BACKSLASH = re.compile(r"(\s*)\\$")


@dataclass(frozen=True)
class _Open:
    """A bracket left open at the end of a line: which one, the line it opened on, and the
    column its first argument starts at (None: nothing follows it on that line)."""

    char: str
    line: int
    argument: int | None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _scan(code: str, line: int, stack: list[_Open]) -> None:
    """``stack`` after the brackets of one line of code (comments and literals blanked)."""
    for col, char in enumerate(code):
        if char in OPENS:
            rest = code[col + 1:]
            stripped = rest.lstrip()
            after = None if not stripped or stripped.startswith("\\") else col + 1 + len(rest) - len(stripped)
            stack.append(_Open(char, line, after))
        elif char in CLOSES and stack and OPENS.index(stack[-1].char) == CLOSES.index(char):
            stack.pop()


def _line_pairs(before: list[str], after: list[str]) -> dict[int, int]:
    """Each line of ``after`` that is a line of ``before`` or a rewrite of one (a block replaced
    line for line) -> that line of ``before``."""
    pairs: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            pairs.update({j1 + k: i1 + k for k in range(j2 - j1)})
    return pairs


def _keep_backslash(line: str, column: int) -> str:
    """``line`` with the padding before its trailing backslash set so the backslash stays at
    ``column`` (at least one space before it)."""
    found = _BACKSLASH.search(line)
    if found is None:
        return line
    body = line[:found.start()]
    return body + " " * max(1, column - len(body)) + "\\"


def realign(before: str, after: str) -> str:
    """``after`` (a rewrite of ``before``, line for line where it was rewritten) with the lines
    that were aligned under a bracket moved to where that bracket's first argument now starts."""
    if before == after:
        return after
    old_lines, new_lines = before.split("\n"), after.split("\n")
    old_code = blank_comments_and_strings(before).split("\n")
    new_code = blank_comments_and_strings(after).split("\n")
    pairs = _line_pairs(old_lines, new_lines)
    open_before: list[tuple[_Open, ...]] = []  # per old line: the brackets open where it starts
    stack: list[_Open] = []
    for number, code in enumerate(old_code):
        open_before.append(tuple(stack))
        _scan(code, number, stack)
    out: list[str] = []
    stack = []
    for number, line in enumerate(new_lines):
        code = new_code[number]
        old = pairs.get(number)
        if old is not None:
            in_macro = old > 0 and _BACKSLASH.search(old_code[old - 1]) is not None
            indent = _moved(line, code, old_lines[old], open_before[old], stack, pairs, in_macro)
            if indent:
                line = " " * indent + line.lstrip(" ")
                code = " " * indent + code.lstrip(" ")
            if _BACKSLASH.search(old_code[old]) and _BACKSLASH.search(code):
                line = _keep_backslash(line, len(old_lines[old].rstrip()) - 1)
        out.append(line)
        _scan(code, number, stack)
    return "\n".join(out)


def _moved(line: str, code: str, old_line: str, old_open: tuple[_Open, ...], new_open: list[_Open],
           pairs: dict[int, int], in_macro: bool) -> int:
    """The indent ``line`` gets (0: it stays): the new column of the bracket argument it was
    aligned under, when the same brackets are open before it as before the rewrite. In a macro
    body (``in_macro``) a leading ``#`` is the stringizing operator, not a directive."""
    if not old_open or len(old_open) != len(new_open) or "\t" in old_line[:_indent(old_line) + 1]:
        return 0
    if any(a.char != b.char for a, b in zip(old_open, new_open, strict=True)):
        return 0
    was, now = old_open[-1], new_open[-1]
    if pairs.get(now.line) != was.line or was.argument is None or now.argument is None or was.argument == now.argument:
        return 0
    indent = _indent(old_line)
    if indent != was.argument or _indent(line) != indent:
        return 0
    first = code[indent:indent + 1]
    if not first.strip() or (first == "#" and not in_macro):  # a comment or a directive: not an argument
        return 0
    return now.argument
