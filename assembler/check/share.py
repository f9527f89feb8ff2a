"""Units that share one scan: the header-speed path of `assemble check`.

A scan (``-E -M -MG -H``) never expands macros outside directives, so what it reports about a
unit (the headers read, the include tree, every error raised in a header, with its chain) is a
function of the command line, the unit's directory (where ``#include "..."`` looks first) and
the unit's *directive skeleton*: its directive lines at their line numbers. Generated kernel
instantiations (FlashAttention's 194 units) differ only in their text, so one scan answers for
all of them: the others take its output with their own path put in.

The skeleton is read by the project's one lexer (``check/lexer.py``), which gives up (the unit is scanned on its own) on
anything where its reading of the file could differ from the compiler's: raw strings,
trigraphs, digraph directives, unterminated comments or literals, a splice after whitespace,
computed includes, ``#line``, and names that the lexer itself would diagnose or that name the
main file. A scan's output is shared only when it cannot name the unit beyond the fields put
back (:func:`reusable`). An ``#ifdef NAME`` / ``#ifndef NAME`` block holding only text is left
out of the skeleton: it reads nothing and cannot fail, whichever way it goes.
"""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from pathlib import Path

from assembler.builder.header_diagnostics import Diagnostic
from assembler.check.compilers import Pass
from assembler.check.lexer import Unsure, directives
from assembler.check.unit_scan import ScanOutput

PLACEHOLDER = "\0unit\0"  # the unit's path in a pass's command, for the sharing key
_DIRECTIVES = {"include", "include_next", "define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef",
               "else", "endif", "pragma", "error", "warning", ""}
# In any file a scan read: what could make the unit's own text or name matter.
_HEADER_RISK = re.compile(rb"__BASE_FILE__|__FILE_NAME__|__TIMESTAMP__")
# A poisoned name is an error wherever a unit's text uses it: such a unit scans itself.
_POISON = re.compile(rb"#[ \t]*pragma[ \t]+(?:GCC[ \t]+)?poison([^\n]*)|_Pragma\s*\(\s*\"(?:GCC\s+)?poison([^\"]*)\"")
_SIMPLE_IF = re.compile(r"#\s*if(?:n)?def\s+[A-Za-z_]\w*\s*")


class _GiveUp(Exception):
    """The lexer cannot be sure it reads the file as the compiler does."""


def skeleton(path: Path) -> tuple[tuple[int, str], ...] | None:
    """The unit's directives as (first line, raw text), without text-only #ifdef/#ifndef blocks;
    None when the unit must be scanned on its own."""
    try:
        text = path.read_bytes().decode("latin-1")
        return tuple(_drop_text_only_blocks(_directives(text)))
    except (OSError, _GiveUp):
        return None


def _directives(text: str) -> list[tuple[int, str, str]]:
    """(line, raw text, comment-free text) of each directive, read by the project's one lexer."""
    try:
        return directives(text)
    except Unsure:
        raise _GiveUp from None


def _drop_text_only_blocks(found: list[tuple[int, str, str]]) -> list[tuple[int, str]]:
    """Leave out ``#ifdef NAME`` ... [``#else`` ...] ``#endif`` with no directive inside, and
    check what stays: no computed include, no #line or unknown directive."""
    kept: list[tuple[int, str]] = []
    at = 0
    while at < len(found):
        line, raw, clean = found[at]
        kind = re.match(r"#\s*([A-Za-z_]*)", clean)
        name = kind.group(1) if kind else ""
        if _SIMPLE_IF.fullmatch(clean):
            end = at + 1
            if end < len(found) and re.fullmatch(r"#\s*else\s*", found[end][2]):
                end += 1
            if end < len(found) and re.fullmatch(r"#\s*endif\s*", found[end][2]):
                at = end + 1
                continue
        if name not in _DIRECTIVES:
            raise _GiveUp
        if name in ("include", "include_next") and not re.fullmatch(
                r"#\s*include(?:_next)?\s*(?:<[^>]*>|\"[^\"]*\")\s*", clean):
            raise _GiveUp  # a computed include could name the unit (__FILE__ through a macro)
        kept.append((line, raw))
        at += 1
    return kept


def unit_key(unit_path: Path, passes: list[Pass]) -> tuple[object, ...] | None:
    """What a unit's scans depend on besides the headers: its directory, its skeleton and its
    passes' commands with its own path left out. None: scan the unit on its own."""
    shape = skeleton(unit_path)
    if shape is None:
        return None
    spelled = str(unit_path)
    commands = tuple((scan.name, tuple(PLACEHOLDER if token == spelled else token for token in scan.command))
                     for scan in passes)
    if any(spelled in token for _, command in commands for token in command):
        return None  # the path inside another argument (-include it, a -D naming it)
    return unit_path.parent, shape, commands


class Sharing:
    """Decides whether one unit's scans can answer for another's (reads each header once a run)."""

    def __init__(self) -> None:
        self._read: dict[str, tuple[bool, frozenset[str]]] = {}  # path: (names the main file, names it poisons)
        self._lock = threading.Lock()

    def _header(self, file: str) -> tuple[bool, frozenset[str]]:
        with self._lock:
            known = self._read.get(file)
        if known is None:
            try:
                data = Path(file).read_bytes()
            except OSError:
                data = b""  # a missing header is read by nobody
            # a substring test first: the regex is slow
            poisoned = {name.decode("latin-1") for match in (_POISON.finditer(data) if b"poison" in data else ())
                        for name in re.findall(rb"[A-Za-z_$][\w$]*", match.group(1) or match.group(2) or b"")}
            known = (_HEADER_RISK.search(data) is not None, frozenset(poisoned))
            with self._lock:
                self._read[file] = known
        return known

    def reusable(self, outputs: list[ScanOutput], spelled: str) -> frozenset[str] | None:
        """The names the headers poison, when the outputs name the unit only where :func:`derive`
        puts another one's path: every pass ran to its end, the unit is read once (not included
        by itself), no message quotes its path, and no header read names the main file. None:
        every unit scans itself."""
        poisoned: set[str] = set()
        for output in outputs:
            if output.returncode < 0 or not output.dependencies or output.dependencies[0] != spelled:
                return None
            if spelled in output.dependencies[1:] or any(path == spelled for _, path in output.tree):
                return None
            if any(spelled in error.text for error in output.errors):
                return None
            for path in output.dependencies[1:]:
                if path.startswith("/"):
                    risky, names = self._header(path)
                    if risky:
                        return None
                    poisoned |= names
        return frozenset(poisoned)


def uses(path: Path, names: frozenset[str]) -> bool:
    """Whether the unit's text names any of ``names`` (it then scans itself: the error is its own)."""
    if not names:
        return False
    try:
        words = set(re.findall(r"[A-Za-z_$][\w$]*", path.read_bytes().decode("latin-1")))
    except OSError:
        return True
    return not words.isdisjoint(names)


def derive(outputs: list[ScanOutput], spelled: str, other: str) -> list[ScanOutput]:
    """The shared scans as the other unit's: its path where the scanned unit's stood."""

    def swap(path: str) -> str:
        return other if path == spelled else path

    def errors(found: list[Diagnostic]) -> list[Diagnostic]:
        return [Diagnostic(swap(e.file), e.line, e.text, tuple((swap(f), line) for f, line in e.chain)) for e in found]

    def dependencies(found: list[str]) -> list[str]:
        if found and found[0] == spelled and spelled not in found[1:]:  # as reusable() requires: one list copy, no loop
            return [other, *found[1:]]
        return [swap(p) for p in found]

    return [replace(output, seconds=0.0, dependencies=dependencies(output.dependencies),
                    tree=list(output.tree), errors=errors(output.errors)) for output in outputs]
