"""Read a failed build's log for what the user must change.

``TORCH_TARGET_VERSION`` turns every torch header outside the Stable ABI into an ``#error``;
the compiler then prints an include chain per header and a cascade of follow-on errors. The
useful fact is which of the dependency's own files includes which torch header, at which line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# gcc (and nvcc, whose preprocessing is gcc's): "In file included from a.h:2," then
# "                 from b.cpp:3:" then "<header>:<line>:<col>: error: #error ...".
_CHAIN_START = re.compile(r"^In file included from (?P<file>.+?):(?P<line>\d+)[,:]$")
_CHAIN_MORE = re.compile(r"^\s+from (?P<file>.+?):(?P<line>\d+)[,:]$")
_HASH_ERROR = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: #error (?P<text>.*)$")


@dataclass(frozen=True)
class UnstableInclude:
    header: str  # as the source would spell it: torch/extension.h
    file: str  # the dependency's file that includes it, relative to the checkout
    line: int

    def describe(self, dep: str) -> str:
        return f"dep {dep} still includes <{self.header}> from {self.file}:{self.line}"


def torch_include_roots(torch_dir: Path) -> list[Path]:
    """torch's two include roots, deepest first: a header is named relative to the one holding it."""
    return [torch_dir / "include" / "torch" / "csrc" / "api" / "include", torch_dir / "include"]


def unstable_includes(log: str, source_root: Path, include_roots: Sequence[Path]) -> list[UnstableInclude]:
    """Each (header, file, line) where the dependency reaches a header that TORCH_TARGET_VERSION
    forbids, in log order, once."""
    source_root = source_root.resolve()
    roots = [root.resolve() for root in include_roots]
    found: list[UnstableInclude] = []
    chain: list[tuple[str, int]] = []
    for raw in log.splitlines():
        start = _CHAIN_START.match(raw)
        if start:
            chain = [(start["file"], int(start["line"]))]
            continue
        more = _CHAIN_MORE.match(raw)
        if more and chain:
            chain.append((more["file"], int(more["line"])))
            continue
        error = _HASH_ERROR.match(raw)
        if error and "TORCH_TARGET_VERSION" in error["text"]:
            item = _culprit(Path(error["file"]), chain, source_root, roots)
            if item is not None and item not in found:
                found.append(item)
        chain = []
    return found


def _culprit(erroring: Path, chain: list[tuple[str, int]], source_root: Path, roots: list[Path]) -> UnstableInclude | None:
    """The innermost include-chain entry inside the dependency names the line to change; the
    header it includes is the next entry inward (or the erroring header itself)."""
    included = erroring
    for file, line in chain:  # innermost first
        path = _absolute(file, source_root)
        if path.is_relative_to(source_root):
            return UnstableInclude(_header_name(included, roots), str(path.relative_to(source_root)), line)
        included = path
    return None


def _absolute(file: str, source_root: Path) -> Path:
    path = Path(file)
    return (path if path.is_absolute() else source_root / path).resolve()


def _header_name(header: Path, roots: list[Path]) -> str:
    resolved = header.resolve()
    root = next((root for root in roots if resolved.is_relative_to(root)), None)
    return str(resolved.relative_to(root)) if root is not None else str(header)


def log_tail(log: str, lines: int = 40) -> str:
    return "\n".join(log.splitlines()[-lines:])
