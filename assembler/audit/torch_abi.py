"""torch ABI of one shared object, from the symbols it imports.

The rules are the ones torch-abi-audit applies (so the two agree): an *undefined dynamic*
symbol named ``aoti_torch_*`` or ``torch_*`` is a stable C-shim call; one that demangles to
something naming ``at::``, ``c10::`` or ``torch::`` (other than ``torch::stable`` and
``torch::headeronly``) is an unstable LibTorch C++ dependency.  The newest shim symbol used
gives the minimum torch release.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from assembler.audit.demangle import demangle
from assembler.audit.gate import Verdict
from assembler.audit.torchdata import TorchTable, Version, format_version

SHIM_PREFIXES = ("aoti_torch_", "torch_")
_UNSTABLE_NS = re.compile(r"\b(?:at|c10|torch)::")
# Itanium mangling spells namespace ``at`` as the source-name ``2at`` (and so on); a name
# without any of these cannot demangle to one of the namespaces, so it is never demangled.
_MANGLED_NS = ("2at", "3c10", "5torch")


@dataclass(frozen=True)
class TorchFindings:
    verdict: Verdict  # STABLE | UNSTABLE | NO-TORCH
    stable_shim: int
    unstable_symbols: tuple[str, ...]  # demangled
    min_torch: str | None
    min_torch_symbols: tuple[str, ...]
    unknown_shim_symbols: tuple[str, ...]


def is_unstable(demangled: str) -> bool:
    cleaned = demangled.replace("torch::headeronly", "").replace("torch::stable", "")
    return _UNSTABLE_NS.search(cleaned) is not None


def classify_torch(undefined: Iterable[str], table: TorchTable) -> TorchFindings:
    """Verdict, counts and minimum torch for one object's undefined dynamic symbols."""
    shim: list[str] = []
    unstable: list[str] = []
    for name in undefined:
        if name.startswith(SHIM_PREFIXES):
            shim.append(name)
        elif any(ns in name for ns in _MANGLED_NS):
            demangled = demangle(name)
            if is_unstable(demangled):
                unstable.append(demangled)
    best: Version | None = None
    unknown: list[str] = []
    for name in shim:
        version = table.version_of(name)
        if version is None:
            unknown.append(name)
        elif best is None or version > best:
            best = version
    if shim and best is None:
        best = table.baseline_version  # only unknown shim symbols: at least the first stable-ABI release
    defining = sorted({n for n in shim if best is not None and table.versions.get(n) == best})
    verdict = Verdict.UNSTABLE if unstable else Verdict.STABLE if shim else Verdict.NO_TORCH
    return TorchFindings(
        verdict=verdict,
        stable_shim=len(shim),
        unstable_symbols=tuple(unstable),
        min_torch=format_version(best) if best else None,
        min_torch_symbols=tuple(defining),
        unknown_shim_symbols=tuple(sorted(set(unknown))),
    )
