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


@dataclass(frozen=True)
class Parameters:
    """One function declaration's parameters, as far as a pointer passed to it cares: per
    parameter, True where it points to const (``const void*``, ``T const*``), False where it
    points to non-const (``void*``), None where it is no single pointer; ``required``: how many
    come before the first default; ``variadic``: a ``...`` ends the list."""

    pointees: tuple[bool | None, ...]
    required: int
    variadic: bool

    def takes(self, count: int) -> bool:
        """Whether a call with ``count`` arguments may be this declaration's."""
        return self.required <= count and (count <= len(self.pointees) or self.variadic)


_POINTERS = frozenset({"pointer_declarator", "abstract_pointer_declarator"})
_NESTED = frozenset({*_POINTERS, "reference_declarator", "abstract_reference_declarator", "array_declarator",
                     "abstract_array_declarator", "function_declarator", "abstract_function_declarator"})
_NAME = re.compile(r"[A-Za-z_]\w*")


def _pointee(parameter: SgNode) -> bool | None:
    """True/False for a parameter that is one pointer to const/non-const; None otherwise (a
    value, a reference, a pointer to pointer). The const that says so qualifies the type (a
    direct child of the declaration); one inside the declarator (``void* const p``) is the
    pointer's own."""
    declarator = parameter.field("declarator")
    if declarator is None or declarator.kind() not in _POINTERS:
        return None
    if any(node.kind() in _NESTED for node in declarator.children()):
        return None
    return any(child.kind() == "type_qualifier" and child.text() == "const" for child in parameter.children())


_PARAMETERS = ("parameter_declaration", "optional_parameter_declaration")


def _functions(root: SgNode) -> Iterator[tuple[str, SgNode, SgNode]]:
    """Each function declarator under ``root`` with a plain name: (its unqualified name, the
    declarator, its parameter list); a function pointer, an operator, a destructor are left out."""
    for function in root.find_all(kind="function_declarator"):
        named, listed = function.field("declarator"), function.field("parameters")
        if named is None or listed is None:
            continue
        name = named.text().rsplit("::", 1)[-1].strip()
        if _NAME.fullmatch(name):
            yield name, function, listed


def pointer_parameters(text: str) -> dict[str, list[Parameters]]:
    """Every function ``text`` declares or defines (members too), by its unqualified name, with
    what each parameter says of a pointer passed there: the callee's own type is the evidence
    that a call only reads through ``x.data_ptr()`` (``const void*``) or may write (``void*``)."""
    found: dict[str, list[Parameters]] = {}
    for name, _, listed in _functions(parse(text)):
        pointees: list[bool | None] = []
        required: int | None = None
        variadic = False
        for parameter in listed.children():
            kind = parameter.kind()
            if kind == "variadic_parameter" or parameter.text() == "...":
                variadic = True
            elif kind in _PARAMETERS:
                if kind == "optional_parameter_declaration" and required is None:
                    required = len(pointees)
                pointees.append(_pointee(parameter))
        if pointees == [None] and listed.text().replace(" ", "") == "(void)":
            pointees = []
        found.setdefault(name, []).append(
            Parameters(tuple(pointees), len(pointees) if required is None else required, variadic))
    return found


@dataclass(frozen=True)
class Definition:
    """One function definition: its parameters' names (None where one has none) and its body's
    text, braces included."""

    parameters: tuple[str | None, ...]
    body: str


def _declared_name(parameter: SgNode) -> str | None:
    """The name a parameter declares, however its declarator wraps it (``T const& a``, ``T* a``)."""
    declarator = parameter.field("declarator")
    while declarator is not None and declarator.kind() != "identifier":
        declarator = declarator.field("declarator") or next(
            (child for child in declarator.children() if child.kind() in ("identifier", *_NESTED)), None)
    return None if declarator is None else declarator.text()


def definitions(text: str) -> dict[str, list[Definition]]:
    """Every function ``text`` defines (with a body, members too), by its unqualified name:
    what a caller reads to know what the callee does with an argument before it returns."""
    found: dict[str, list[Definition]] = {}
    for name, function, listed in _functions(parse(text)):
        parent = function.parent()
        body = None if parent is None or parent.kind() != "function_definition" else parent.field("body")
        if body is None:
            continue
        names = tuple(_declared_name(node) for node in listed.children() if node.kind() in _PARAMETERS)
        found.setdefault(name, []).append(Definition(names, body.text()))
    return found


def signature(text: str, name: str) -> tuple[str, list[str]] | None:
    """The return type and parameters (each with whitespace runs made one space) of the first
    function ``text`` declares or defines as ``name``, from the tree: what the token reading
    of a declaration misses, a return type with parentheses in it (``std::function<T(U)>``)."""
    if name not in text:
        return None
    for found, function, listed in _functions(parse(text)):
        parent = function.parent()
        returned = None if found != name or parent is None else parent.field("type")
        if returned is None:
            continue
        parameters = [" ".join(node.text().split()) for node in listed.children() if node.kind() in _PARAMETERS]
        return " ".join(returned.text().split()), parameters
    return None
