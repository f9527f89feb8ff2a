"""How one dependency's build ended (`assemble build`'s per-dependency status)."""

from __future__ import annotations

from enum import StrEnum


class BuildOutcome(StrEnum):
    CACHED = "cached"  # an artifact with the same key was reused
    BUILT = "built"  # compiled now
    FAILED = "failed"  # the build (or its include check) failed; see the log
    COMPILED = "compiled"  # `build --shard k/N`: its compile jobs went into the compiler cache; no artifact
