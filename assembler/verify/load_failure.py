"""Why an extension did not load on a torch version: the symbol the dynamic loader could not
resolve, in C++; the extension and dependency that need it; and which of the torch versions the
verify run used still export it ("last seen in torch 2.13.0").

The export table is read, without network, from the torch libraries (``torch/lib/*.so``) of the
environments the run actually used, by the audit's :mod:`assembler.audit.torchlibs` (the same
tables the gate resolves against), and cached per torch build under ``<cache>/torch-exports``
(about 1 MB each, gzip'd): a later run reads it in milliseconds.
Only a run with a load failure that names an undefined symbol reads it at all. Stable-ABI shim
symbols (``aoti_torch_*``, ``torch_*``) also get the release that introduced them, from the
audit's shim table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from assembler.audit.demangle import demangle
from assembler.audit.elf import read_dynamic
from assembler.audit.member import FileSource
from assembler.audit.torch_abi import SHIM_PREFIXES
from assembler.audit.torchdata import format_version, load_table
from assembler.audit.torchlibs import TorchLibraries, read_lib_dir
from assembler.errors import InputError
from assembler.verify.report import Check, Diagnosis, Status

# The loader's words ("<object>: undefined symbol: <name>[, version V]"), after the runner has
# put the C++ name before the mangled one ("<C++ name> [<mangled>]").
_UNDEFINED = re.compile(r"(?:(?P<object>\S+): )?undefined symbol: (?:.*\[(?P<mangled>_Z[^\]\s]+)\]|(?P<plain>[^\s,]+))")
ALSO_MISSING_MAX = 20  # the JSON and the report list this many at most, and say how many more


def missing_symbol(detail: str) -> tuple[str, str | None] | None:
    """(symbol, object that needs it or None) from a load failure's message, or None when the
    loader named no undefined symbol."""
    match = _UNDEFINED.search(detail)
    if match is None:
        return None
    return match.group("mangled") or match.group("plain"), match.group("object")


@dataclass
class ProbedTorch:
    """One torch the run used: what its probe reported (``checks`` is updated in place)."""

    installed: str
    lib_dir: Path | None  # torch/lib of that interpreter, as its probe found it
    site: Path  # where the wheel was installed for it
    checks: dict[str, list[Check]] = field(default_factory=dict)


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _undefined(path: Path) -> list[str]:
    """The undefined dynamic symbols of the shared object at ``path`` (empty when unreadable)."""
    try:
        source = FileSource(str(path), path.name)
    except (InputError, OSError):  # gone, or not a regular file
        return []
    try:
        info = read_dynamic(source, defined_prefixes=())
    except (InputError, OSError):
        return []
    finally:
        source.close()
    return sorted({s.name for s in info.symbols if not s.defined})


def diagnose(
    symbol: str, needed_by: str | None, extension: str, dependency: str | None, failing: ProbedTorch,
    exports: Mapping[str, TorchLibraries], owners: Mapping[str, str],
) -> Diagnosis:
    """The diagnosis of one load failure: ``exports`` holds the table of every torch of the run,
    by installed version; ``owners`` maps wheel paths to the dependency that shipped them."""
    object_path = needed_by or extension
    inside = not Path(object_path).is_absolute()
    present = {torch: table.exporter(symbol) for torch, table in exports.items()}
    present_in = sorted((t for t, lib in present.items() if lib), key=lambda t: _version(t) or Version("0"))
    absent_in = sorted((t for t, lib in present.items() if not lib), key=lambda t: _version(t) or Version("0"))
    here = _version(failing.installed)
    last_seen = first_seen = None
    if here is not None and failing.installed not in present_in:
        older = [t for t in present_in if (v := _version(t)) is not None and v.release < here.release]
        newer = [t for t in present_in if (v := _version(t)) is not None and v.release > here.release]
        last_seen = Version(older[-1]).public if older else None
        first_seen = Version(newer[0]).public if newer else None
    shim = load_table().version_of(symbol) if symbol.startswith(SHIM_PREFIXES) else None
    also: list[str] = []
    mine = exports.get(failing.installed)
    if inside and mine is not None:
        elsewhere = frozenset().union(*(t.all() for name, t in exports.items() if name != failing.installed))
        available = mine.all()
        also = [demangle(s) for s in _undefined(failing.site / object_path) if s != symbol and s in elsewhere
                and s not in available]
    return Diagnosis(
        symbol=symbol, demangled=demangle(symbol), extension=extension, dependency=dependency,
        needed_by=object_path, needed_by_dependency=owners.get(object_path) if inside else None,
        torch=failing.installed, present_in=tuple(present_in), absent_in=tuple(absent_in),
        exported_by={t: lib for t, lib in present.items() if lib}, last_seen=last_seen, first_seen=first_seen,
        shim_introduced=format_version(shim) if shim else None,
        also_missing=tuple(also[:ALSO_MISSING_MAX]), also_missing_count=len(also),
    )


def owners_of(plan: Iterable[Mapping[str, Any]], deps: Iterable[str]) -> dict[str, str]:
    """Wheel path -> dependency, for the extensions the verify plan attributed to a dependency."""
    names = set(deps)
    return {ext["path"]: row["name"] for row in plan if row["name"] in names for ext in row["extensions"]}


def diagnose_loads(
    torches: list[ProbedTorch], plan: Iterable[Mapping[str, Any]], deps: Iterable[str],
    progress: Callable[[str], None] = lambda _: None,
) -> int:
    """Attach a diagnosis to every failed load check that names an undefined symbol (the wheel
    must still be installed under each ``site``). Returns how many were diagnosed."""
    failures = [
        (torch, dep, index, found)
        for torch in torches
        for dep, checks in torch.checks.items()
        for index, check in enumerate(checks)
        if check.kind == "load" and check.status is Status.FAIL and (found := missing_symbol(check.detail))
    ]
    if not failures:
        return 0
    exports = {
        torch.installed: table
        for torch in torches
        if torch.lib_dir is not None and (table := read_lib_dir(torch.installed, torch.lib_dir, progress)) is not None
    }
    owners = owners_of(plan, deps)
    for torch, dep, index, (symbol, needed_by) in failures:
        check = torch.checks[dep][index]
        diagnosis = diagnose(symbol, needed_by, check.target, owners.get(check.target), torch, exports, owners)
        torch.checks[dep][index] = replace(check, diagnosis=diagnosis)
    return len(failures)
