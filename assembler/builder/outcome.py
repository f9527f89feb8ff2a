"""How one dependency's build ended (`assemble build`'s per-dependency status)."""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol


class BuildOutcome(StrEnum):
    CACHED = "cached"  # an artifact with the same key was reused
    BUILT = "built"  # compiled now
    FAILED = "failed"  # the build (or its include check) failed; see the log
    COMPILED = "compiled"  # `build --shard k/N`: its compile jobs went into the compiler cache; no artifact


class Event(Protocol):
    """A build's progress, as the pipeline reports it: ``(dep, phase, done, total, unit)``.
    ``phase`` is checking, queued, configuring, compiling, installing or a BuildOutcome; while
    compiling, ``done`` of ``total`` steps are finished (total None: not known) and ``unit`` is
    what the last one made."""

    def __call__(self, dep: str, phase: str, done: int | None, total: int | None, unit: str | None = None,
                 /) -> None: ...
