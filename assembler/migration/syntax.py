"""The C++ syntax layer of `assemble migrate`: rewrites written as ast-grep patterns over
tree-sitter's C++ tree (``$X.sizes()[$I]``), not as regexes over lines.

A pattern matches a whole expression node, so a receiver is an expression however it is
spelled (``a.b``, ``t[0]``, a call), comments and strings never match, and nothing outside
the node is touched. What the tree cannot know stays with the caller: which lines the build
compiles (the preprocessor's answer: tree-sitter parses every ``#if`` branch) and what a name
is declared as (``rewrite.Declarations``). Matches are returned as edits on the text, in
Python string offsets, never adding or removing a line break of their own."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from ast_grep_py import SgNode, SgRoot

_METAVARIABLE = re.compile(r"\$([A-Z_][A-Z0-9_]*)")


@dataclass(frozen=True)
class Match:
    """One node a pattern matched: its span in the text, its 0-based line, and the text of
    each metavariable (``$X`` -> ``captures["X"]``) with its span."""

    start: int
    end: int
    line: int
    captures: dict[str, str]
    spans: dict[str, tuple[int, int]]

    def expand(self, template: str) -> str:
        """``template`` with each ``$NAME`` replaced by what it matched."""
        return _METAVARIABLE.sub(lambda m: self.captures.get(m.group(1), m.group(0)), template)


def parse(text: str) -> SgNode:
    """The root of ``text``'s C++ tree (CUDA's extensions parse as C++ where it matters here:
    expressions and declarations)."""
    return SgRoot(text, "cpp").root()


def matches(text: str, pattern: str, root: SgNode | None = None) -> Iterator[Match]:
    """Every node of ``text`` that ``pattern`` matches, in text order, outermost first."""
    names = sorted(set(_METAVARIABLE.findall(pattern)))
    found = (root or parse(text)).find_all(pattern=pattern)
    for node in sorted(found, key=lambda n: (n.range().start.index, -n.range().end.index)):
        span = node.range()
        captures: dict[str, str] = {}
        spans: dict[str, tuple[int, int]] = {}
        for name in names:
            captured = node.get_match(name)
            if captured is not None:
                where = captured.range()
                captures[name] = text[where.start.index:where.end.index]
                spans[name] = (where.start.index, where.end.index)
        yield Match(span.start.index, span.end.index, span.start.line, captures, spans)


def outermost(found: Iterator[Match]) -> list[Match]:
    """The matches no earlier one contains (a nested match is left for the next pass)."""
    kept: list[Match] = []
    for match in found:
        if not kept or match.start >= kept[-1].end:
            kept.append(match)
    return kept
