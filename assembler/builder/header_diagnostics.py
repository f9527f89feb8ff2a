"""Read what gcc (and nvcc, whose preprocessing is gcc's) prints about torch headers: the one
parser and rule for "which torch header is outside the Stable ABI, and from where", used by a
failed build's log here and by `assemble check`'s scans (:mod:`assembler.check.unit_scan`).

``TORCH_TARGET_VERSION`` turns every torch header outside the Stable ABI into an ``#error``;
the compiler then prints an include chain per header and a cascade of follow-on errors. The
useful fact is which of the dependency's own files includes which torch header, at which line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# What torch's headers #error with when TORCH_TARGET_VERSION (or TORCH_STABLE_ONLY) is defined.
GUARD_WORDS = ("TORCH_TARGET_VERSION", "TORCH_STABLE_ONLY")
# "In file included from a.h:2," then "                 from b.cpp:3:" then
# "<header>:<line>:<col>: error: #error ..."; -H prints its include tree as ". path" lines.
_CHAIN_START = re.compile(r"^In file included from (?P<file>.+?):(?P<line>\d+)[,:]$")
_CHAIN_MORE = re.compile(r"^\s+from (?P<file>.+?):(?P<line>\d+)[,:]$")
_ERROR = re.compile(r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<text>.*)$")
_TREE = re.compile(r"^(?P<dots>\.+) (?P<path>.+)$")


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    text: str
    chain: tuple[tuple[str, int], ...]  # innermost first, as gcc prints it

    @property
    def is_stable_guard(self) -> bool:
        """The ``#error`` a torch header raises when it is outside the Stable ABI."""
        return self.text.startswith("#error") and any(word in self.text for word in GUARD_WORDS)


def parse_diagnostics(text: str) -> tuple[list[tuple[int, str]], list[Diagnostic]]:
    """gcc's stderr: the ``-H`` include tree as (depth, path), and every error with its include chain."""
    tree: list[tuple[int, str]] = []
    errors: list[Diagnostic] = []
    chain: list[tuple[str, int]] = []
    for raw in text.splitlines():
        node = _TREE.match(raw)
        if node:
            tree.append((len(node["dots"]), node["path"]))
            continue
        start = _CHAIN_START.match(raw)
        if start:
            chain = [(start["file"], int(start["line"]))]
            continue
        more = _CHAIN_MORE.match(raw)
        if more and chain:
            chain.append((more["file"], int(more["line"])))
            continue
        error = _ERROR.match(raw)
        if error:
            errors.append(Diagnostic(error["file"], int(error["line"]), error["text"].strip(), tuple(chain)))
        chain = []
    return tree, errors


def both_ways(roots: Sequence[Path]) -> list[Path]:
    """Each root as written (normalized) and resolved: compilers print paths as they were given,
    through symlinks too (a cache whose venvs/ links elsewhere)."""
    return list(dict.fromkeys(form for root in roots for form in (Path(os.path.normpath(root)), root.resolve())))


def torch_header(path: Path, roots: Sequence[Path]) -> str | None:
    """``path`` as a source would include it (``ATen/ATen.h``) when it lies under one of torch's
    include ``roots`` (deepest first, see :func:`torch_include_roots`); else None."""
    for candidate in (path, path.resolve()):
        for root in roots:
            if candidate.is_relative_to(root):
                return candidate.relative_to(root).as_posix()
    return None


@dataclass(frozen=True)
class UnstableInclude:
    header: str  # as the source would spell it: torch/extension.h
    file: str  # the dependency's file that includes it, relative to the checkout
    line: int
    guard: str = ""  # the #error torch's header raised: "This file should not be included when ..."

    def describe(self, dep: str) -> str:
        return f"dep {dep} still includes <{self.header}> from {self.file}:{self.line}"


def torch_include_roots(torch_dir: Path) -> list[Path]:
    """torch's two include roots, deepest first: a header is named relative to the one holding it."""
    return [torch_dir / "include" / "torch" / "csrc" / "api" / "include", torch_dir / "include"]


def unstable_includes(log: str, source_root: Path, include_roots: Sequence[Path],
                      work_dirs: Sequence[Path] = ()) -> list[UnstableInclude]:
    """Each (header, file, line) where the dependency reaches a header that TORCH_TARGET_VERSION
    forbids, in log order, once. A relative path in the log is the compiler's, from its working
    directory: the checkout, or one of ``work_dirs`` (the build trees, where the path-free
    launcher of ``toolchain/launch.py`` spells every path relatively)."""
    source_root = source_root.resolve()
    bases = (source_root, *work_dirs)
    roots = both_ways(include_roots)
    found: list[UnstableInclude] = []
    for error in parse_diagnostics(log)[1]:
        if error.is_stable_guard:
            item = _culprit(_absolute(error.file, bases), error.chain, source_root, roots, guard_message(error.text),
                            bases)
            if item is not None and item not in found:
                found.append(item)
    return found


def guard_message(text: str) -> str:
    """``#error "This file ..."`` -> ``This file ...``."""
    return text.removeprefix("#error").strip().strip('"')


def _culprit(erroring: Path, chain: Sequence[tuple[str, int]], source_root: Path, roots: list[Path],
             guard: str = "", bases: Sequence[Path] = ()) -> UnstableInclude | None:
    """The innermost include-chain entry inside the dependency names the line to change; the
    header it includes is the next entry inward (or the erroring header itself)."""
    included = erroring
    for file, line in chain:  # innermost first
        path = _absolute(file, bases or (source_root,))
        if path.is_relative_to(source_root):
            return UnstableInclude(torch_header(included, roots) or str(included), str(path.relative_to(source_root)),
                                   line, guard)
        included = path
    return None


def _absolute(file: str, bases: Sequence[Path]) -> Path:
    """``file`` as the compiler meant it: absolute, or relative to the first of ``bases`` (its
    possible working directories) where it exists (else to the first)."""
    path = Path(file)
    if path.is_absolute():
        return path.resolve()
    for base in bases:
        if (base / path).exists():
            return (base / path).resolve()
    return (bases[0] / path).resolve()


def log_tail(log: str, lines: int = 40) -> str:
    return "\n".join(log.splitlines()[-lines:])


@dataclass(frozen=True)
class FirstFailure:
    """Where a failed build's log first went wrong: the first command ninja (CMake's or
    torch.utils.cpp_extension's) reports as FAILED, and the first ``error:`` line from there on
    with the source excerpt gcc/nvcc print under it. Later units' warnings and errors, which
    fill the log's tail, are not the cause."""

    command: str | None  # the failing compile command, as ninja printed it
    error: str | None  # "csrc/a.cpp:3:1: error: ..." (with gcc's excerpt lines), or a CMake/setuptools error

    def lines(self) -> list[str]:
        found = [f"first failing command: {self.command}"] if self.command else []
        return found + ([f"first error: {self.error}"] if self.error else [])


_FAILED = re.compile(r"^FAILED: ")
_ERROR_LINE = re.compile(r"(?:^|\s|:)(?:fatal )?error(?: \w+)?:|^CMake Error|^error: ")
_EXCERPT = re.compile(r"^\s+(?:\d+\s*)?\|")  # gcc's "   12 | code" and "      |   ^~~" lines
_CMAKE_MESSAGE = re.compile(r"^\s+\S")  # "CMake Error at CMakeLists.txt:101 (message):" then "  Can't find CUDA ..."


def first_failure(log: str) -> FirstFailure | None:
    """The first failing command and its first error in ``log`` (None when it holds neither)."""
    lines = log.splitlines()
    start = next((i for i, line in enumerate(lines) if _FAILED.match(line)), None)
    command = None
    if start is not None:
        command = next((line.strip() for line in lines[start + 1:] if line.strip()), None)
        if command is not None and len(command) > 2000:
            command = command[:2000] + " ..."
    first = 0 if start is None else start + 2  # past the FAILED line and the command itself
    at = next((i for i in range(first, len(lines)) if _ERROR_LINE.search(lines[i])), None)
    if at is None and start is not None:  # the command printed no error line: its last output says why
        at = next((i for i in range(len(lines) - 1, start + 1, -1) if lines[i].strip()), None)
    if at is None:
        return None if command is None else FirstFailure(command, None)
    excerpt = [lines[at].strip()]
    # gcc quotes the code below its error; CMake writes the message itself on indented lines below
    follows = _CMAKE_MESSAGE if lines[at].startswith("CMake Error") else _EXCERPT
    for line in lines[at + 1:at + 4]:
        if not follows.match(line):
            break
        excerpt.append(line.rstrip())
    return FirstFailure(command, "\n".join(excerpt))
