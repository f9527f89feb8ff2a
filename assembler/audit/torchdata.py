"""Which torch release introduced each stable-ABI shim symbol, and where that knowledge came from.

The table (``assembler/data/torch_shim_versions.json``) holds the shim symbols that already
existed in torch 2.9.0 (the first release with the stable ABI; PyTorch's own manifest omits
them) and, for every later one, the release that added it.  It is seeded from PyTorch's shim
version manifest as packaged by torch-abi-audit and refreshed from the
``#if TORCH_FEATURE_VERSION >= TORCH_VERSION_X_Y_Z`` guards in a torch's headers
(:mod:`assembler.audit.torchheaders`); every source is recorded in its ``provenance`` list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from assembler import jsonfile
from assembler.errors import InputError

Version = tuple[int, int, int]

DEFAULT_TABLE = Path(__file__).resolve().parents[1] / "data" / "torch_shim_versions.json"


def parse_version(text: str) -> Version:
    parts = text.strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise InputError(f"bad version {text!r} in the torch shim table (want MAJOR.MINOR.PATCH)")
    return int(parts[0]), int(parts[1]), int(parts[2])


def format_version(version: Version) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class TorchTable:
    baseline_version: Version
    baseline: frozenset[str]
    versions: Mapping[str, Version]  # shim symbols added after the baseline release
    provenance: tuple[dict[str, Any], ...] = field(default=())

    def version_of(self, symbol: str) -> Version | None:
        """The release that introduced ``symbol``; None when the table does not know it."""
        found = self.versions.get(symbol)
        if found is None and symbol in self.baseline:
            return self.baseline_version
        return found

    def describe(self) -> str:
        """One line naming the sources, for reports."""
        return "; ".join(p.get("source", "?") for p in self.provenance)


@cache
def load_table(path: Path = DEFAULT_TABLE) -> TorchTable:
    try:
        raw = jsonfile.load(path)
        return TorchTable(
            baseline_version=parse_version(raw["baseline_version"]),
            baseline=frozenset(raw["baseline"]),
            versions={name: parse_version(v) for name, v in raw["symbols"].items()},
            provenance=tuple(raw.get("provenance", ())),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise InputError(
            f"cannot read the torch shim table {path}: {error}",
            hint="restore it from git, or rebuild it with `assemble audit --refresh-torch-table`",
        ) from None
