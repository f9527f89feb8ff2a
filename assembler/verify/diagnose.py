"""Why an extension did not load on a torch version: the symbol the dynamic loader could not
resolve, in C++; the extension and dependency that need it; and which of the torch versions the
verify run used still export it ("last seen in torch 2.13.0").

The export table is read, without network, from the torch libraries (``torch/lib/*.so``) of the
environments the run actually used, with the audit's own ELF reader, and cached per torch build
under ``<cache>/torch-exports`` (about 1 MB each, gzip'd): a later run reads it in milliseconds.
Only a run with a load failure that names an undefined symbol reads it at all. Stable-ABI shim
symbols (``aoti_torch_*``, ``torch_*``) also get the release that introduced them, from the
audit's shim table.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from assembler.audit.classify import SHIM_PREFIXES, demangle
from assembler.audit.elf import ELF_MAGIC, read_dynamic
from assembler.audit.member import FileSource
from assembler.audit.torchdata import format_version, load_table
from assembler.cache import cache_root
from assembler.errors import InputError
from assembler.fsutil import atomic_write
from assembler.verify.report import Check, Diagnosis, Status

EXPORTS_DIR = "torch-exports"
_SCHEMA = 1
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


@dataclass(frozen=True)
class TorchExports:
    """Every defined dynamic symbol of one torch build's libraries, by library file name."""

    torch: str  # the installed version, e.g. "2.13.0+cpu"
    lib_dir: str
    libs: Mapping[str, frozenset[str]]

    def exporter(self, symbol: str) -> str | None:
        """The library of this torch that exports ``symbol``, or None."""
        return next((name for name, symbols in sorted(self.libs.items()) if symbol in symbols), None)

    def all(self) -> frozenset[str]:
        return frozenset().union(*self.libs.values())


def _libraries(lib_dir: Path) -> list[Path]:
    return sorted(p for p in lib_dir.glob("lib*.so*") if p.is_file() and not p.is_symlink())


def _cache_file(torch: str, libs: list[Path]) -> Path:
    """One file per torch build: the version and the name and size of each of its libraries."""
    key = hashlib.sha256("\0".join(f"{p.name}:{p.stat().st_size}" for p in libs).encode()).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9.+_-]", "_", torch)[:64]
    return cache_root() / EXPORTS_DIR / f"{safe}-{key}.json.gz"


def _read_exports(lib_dir: Path, libs: list[Path]) -> dict[str, list[str]]:
    table: dict[str, list[str]] = {}
    for path in libs:
        try:
            source = FileSource(str(path), path.name)
        except (InputError, OSError):
            continue
        try:
            if source.size < len(ELF_MAGIC) or source.read(0, len(ELF_MAGIC)) != ELF_MAGIC:
                continue
            info = read_dynamic(source)
        except (InputError, OSError):
            continue
        finally:
            source.close()
        table[path.name] = sorted({s.name for s in info.symbols if s.defined and not s.local})
    return table


def torch_exports(torch: str, lib_dir: Path, progress: Callable[[str], None] = lambda _: None) -> TorchExports | None:
    """The export table of the torch in ``lib_dir`` (cached); None when there is no such directory."""
    libs = _libraries(lib_dir)
    if not libs:
        return None
    cached = _cache_file(torch, libs)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, EOFError):
        data = json.loads(gzip.decompress(cached.read_bytes()))
        if data["schema"] == _SCHEMA and data["torch"] == torch:
            return TorchExports(torch, str(lib_dir), {name: frozenset(names) for name, names in data["libs"].items()})
    progress(f"reading the symbols torch {torch} exports ({lib_dir}; once, cached in {cached.parent})")
    table = _read_exports(lib_dir, libs)
    payload = gzip.compress(json.dumps({"schema": _SCHEMA, "torch": torch, "lib_dir": str(lib_dir), "libs": table}).encode(), 6, mtime=0)
    with contextlib.suppress(OSError):  # a read-only cache: the table is simply read again next time
        atomic_write(cached, payload)
    return TorchExports(torch, str(lib_dir), {name: frozenset(names) for name, names in table.items()})


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
    exports: Mapping[str, TorchExports], owners: Mapping[str, str],
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
        also = [demangle(s) for s in _undefined(failing.site / object_path) if s != symbol and s in elsewhere and s not in available]
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
        if torch.lib_dir is not None and (table := torch_exports(torch.installed, torch.lib_dir, progress)) is not None
    }
    owners = owners_of(plan, deps)
    for torch, dep, index, (symbol, needed_by) in failures:
        check = torch.checks[dep][index]
        diagnosis = diagnose(symbol, needed_by, check.target, owners.get(check.target), torch, exports, owners)
        torch.checks[dep][index] = replace(check, diagnosis=diagnosis)
    return len(failures)
