"""Every audit verdict, and the one gate that turns an audit into findings.

`assemble audit --check`, the build's audit gate, `assemble patches`' build evidence, the build
report and `assemble check` all read verdicts from here; adding a verdict means adding it here,
giving it a style in :mod:`assembler.audit.report`, and testing it.

A verdict is a :class:`Verdict`; what the gate says of an object or a dependency is a
:class:`GateVerdict` (the checks it fails, else the one passing verdict, and whether
--allow-unstable let it through), written as text in one place (``GateVerdict.__str__``: the
strings every output and JSON schema has always had) and never read back from text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple

from assembler.audit.demangle import demangle

if TYPE_CHECKING:
    from assembler.audit.shapes import AuditReport, ElfReport


# The provider an UNRESOLVED symbol is recorded with when no library of the object's load scope
# defines it (audit.loadscope), where a torch symbol names the torch library that would.
NOWHERE = "no library of its load scope"
NOT_EXPORTED = "not exported by torch "  # audit.torchlibs.not_exported: the torch audited against has it nowhere


def _demangled(symbols: Iterable[str]) -> tuple[str, ...]:
    """C++ names for a finding a person reads."""
    return tuple(demangle(symbol) for symbol in symbols)


class Verdict(StrEnum):
    """What a check found. The values are what every output (text and JSON) prints."""

    # torch ABI of one shared object (or of a whole PATH: the worst of its objects)
    STABLE = "STABLE"  # only stable C-shim symbols
    UNSTABLE = "UNSTABLE"  # at least one LibTorch C++ symbol
    NO_TORCH = "NO-TORCH"  # no torch symbol at all
    UNRESOLVED = "UNRESOLVED"  # imports a symbol that no library of its load scope exports: it cannot load
    # CPython ABI
    ABI3 = "ABI3"  # limited API only, within the abi3 tag
    NON_ABI3 = "NON-ABI3"  # CPython API outside the limited API (or a wheel without an abi3 tag)
    ABI3_MISMATCH = "ABI3-MISMATCH"  # limited API, but newer than the abi3 tag
    NO_PYTHON = "NO-PYTHON"  # no CPython symbol at all
    # the wheel's member names
    # a member name that installs outside the target directory (absolute, '..', drive, backslash)
    UNSAFE_PATH = "UNSAFE-PATH"
    # declared metadata against the symbols
    FLOOR_TOO_LOW = "FLOOR-TOO-LOW"  # Requires-Dist torch / Requires-Python below what the symbols need
    # source level (`assemble check`, one translation unit)
    CLEAN = "CLEAN"  # compiles against the stable headers and the limited API alone
    NOT_LIMITED = "NOT-LIMITED"  # needs CPython API outside the limited API
    INCOMPLETE = "INCOMPLETE"  # could not be checked completely (no compile command, a failure)
    # a dependency of a build whose artifact holds no shared object
    NO_EXTENSIONS = "no extensions"


# How each verdict is painted in text output (rich style words), beside the verdict itself: a new
# verdict is one member above and one entry here (tests/test_gate.py holds every verdict to one).
VERDICT_STYLE: dict[Verdict, str] = {
    Verdict.STABLE: "green", Verdict.UNSTABLE: "bold red", Verdict.NO_TORCH: "dim",
    Verdict.ABI3: "green", Verdict.NON_ABI3: "bold red", Verdict.ABI3_MISMATCH: "yellow", Verdict.NO_PYTHON: "dim",
    Verdict.CLEAN: "green", Verdict.NOT_LIMITED: "bold red", Verdict.INCOMPLETE: "yellow",
    Verdict.NO_EXTENSIONS: "dim", Verdict.FLOOR_TOO_LOW: "bold red", Verdict.UNRESOLVED: "bold red",
    Verdict.UNSAFE_PATH: "bold red",
}


class CheckKind(StrEnum):
    """What `--check` gates on."""

    # unstable LibTorch C++ symbols; unresolvable torch symbols; Requires-Dist torch below the symbol floor
    TORCH = "torch"
    # outside the limited API, newer than the abi3 tag, no abi3 tag while using CPython; Requires-Python too low
    ABI3 = "abi3"
    ALL = "all"  # both


# ElfReport.python_api: which API its CPython symbols target
PYTHON_LIMITED, PYTHON_FULL, PYTHON_NONE = "limited", "full", "none"
# `assemble check`'s failures, worst first
SOURCE_SEVERITY = (Verdict.UNSTABLE, Verdict.NOT_LIMITED, Verdict.INCOMPLETE)
PASSING = frozenset({Verdict.STABLE, Verdict.NO_TORCH, Verdict.CLEAN, Verdict.NO_EXTENSIONS})
_ALLOWED = " (allowed)"  # GateVerdict.__str__'s mark of one let through by --allow-unstable


@dataclass(frozen=True)
class GateVerdict:
    """What the gate says of one object or dependency: the checks it fails, in the order the gate
    runs them (an object failing several: UNSTABLE, NON-ABI3), else its one passing verdict
    (STABLE, NO-TORCH, "no extensions"); ``allowed`` when --allow-unstable let a failing one through."""

    verdicts: tuple[Verdict, ...]
    allowed: bool = False

    def __post_init__(self) -> None:
        if not self.verdicts or (len(self.verdicts) > 1 and self.passes):
            raise ValueError(f"a gate verdict is failing checks or one passing verdict, not {self.verdicts!r}")
        if self.allowed and self.passes:
            raise ValueError(f"only a failing verdict is let through, not {self.verdicts[0]}")

    @classmethod
    def of(cls, verdict: Verdict) -> GateVerdict:
        return cls((verdict,))

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> GateVerdict:
        """From :meth:`record`'s form; raises ValueError, TypeError or KeyError for anything else."""
        verdicts, allowed = record["verdicts"], record["allowed"]
        if not isinstance(verdicts, list) or not isinstance(allowed, bool):
            raise TypeError(f"not a recorded gate verdict: {record!r}")
        return cls(tuple(Verdict(value) for value in verdicts), allowed)

    def record(self) -> dict[str, object]:
        """The form kept in the build's records (merge state, evidence): the verdicts' values, not text."""
        return {"verdicts": [verdict.value for verdict in self.verdicts], "allowed": self.allowed}

    @property
    def passes(self) -> bool:
        """Whether it passes the gate (one let through by --allow-unstable still does not)."""
        return all(passes(verdict) for verdict in self.verdicts)

    @property
    def first(self) -> Verdict:
        """The verdict it is shown by (styled, sorted): the first failing check, or the passing one."""
        return self.verdicts[0]

    def let_through(self) -> GateVerdict:
        """This failing verdict as recorded when --allow-unstable lets it through."""
        return GateVerdict(self.verdicts, allowed=True)

    def __str__(self) -> str:
        """The one text of a gate verdict: ``UNSTABLE+NON-ABI3``, ``UNSTABLE (allowed)``, ``STABLE``."""
        return "+".join(verdict.value for verdict in self.verdicts) + (_ALLOWED if self.allowed else "")


class Finding(NamedTuple):
    """One reason a PATH fails the gate."""

    verdict: Verdict
    target: str  # the audited PATH
    member: str | None  # the shared object inside it; None when the PATH as a whole fails (its tags)
    offending: tuple[str, ...]  # the symbols (or tags) that make it fail, all of them
    line: str  # one line for people, as `assemble audit --check` prints it


def _listing(names: Iterable[str], limit: int = 3) -> str:
    names = list(names)
    more = f", +{len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def findings(report: AuditReport, kind: CheckKind | str) -> list[Finding]:
    """The gate: every finding of ``kind`` in ``report``; empty means it passes."""
    kind = CheckKind(kind)
    # every check kind: a wheel that writes outside its install directory is refused whatever it holds
    found: list[Finding] = [
        Finding(Verdict.UNSAFE_PATH, report.path, name.split(" (")[0], (name,),
                f"{report.path}: member {name} installs outside the target directory (pip refuses the wheel)")
        for name in report.unsafe_names
    ] + [
        Finding(Verdict.INCOMPLETE, report.path, e.path, (), f"{report.path}: {e.path} could not be audited: {e.error}")
        for e in report.extensions if e.error is not None
    ]
    if kind in (CheckKind.TORCH, CheckKind.ALL):
        for e in report.extensions:
            if e.torch_abi == Verdict.UNSTABLE:
                found.append(Finding(
                    Verdict.UNSTABLE, report.path, e.path, e.unstable_symbols,
                    f"{report.path}: {e.path} uses the unstable LibTorch C++ ABI "
                    f"({e.unstable} symbols: {_listing(e.unstable_symbols)})",
                ))
            absent = {s: lib for s, lib in e.unresolved.items() if lib.startswith(NOT_EXPORTED)}
            if absent:
                found.append(Finding(
                    Verdict.UNRESOLVED, report.path, e.path, tuple(f"{s} ({lib})" for s, lib in absent.items()),
                    f"{report.path}: {e.path} imports {_listing(_demangled(absent))}, which "
                    f"{sorted(set(absent.values()))[0]} does not export: it fails to load there with \"undefined "
                    "symbol\"; build it against that torch, or port it to the Stable ABI",
                ))
            linkable = {s: lib for s, lib in e.unresolved.items() if lib != NOWHERE and s not in absent}
            if linkable:
                providers = sorted(set(linkable.values()))
                found.append(Finding(
                    Verdict.UNRESOLVED, report.path, e.path, tuple(f"{s} ({lib})" for s, lib in linkable.items()),
                    f"{report.path}: {e.path} imports {_listing(f'{s} (from {lib})' for s, lib in linkable.items())} "
                    f"but {', '.join(providers)} is not in its DT_NEEDED tree ({_listing(e.needed, 6) or 'none'}): "
                    "it fails to load with \"undefined symbol\"; link "
                    f"{', '.join(p.removeprefix('lib').split('.so')[0] for p in providers)}",
                ))
            nowhere = _demangled(s for s, lib in e.unresolved.items() if lib == NOWHERE)
            if nowhere:
                found.append(Finding(
                    Verdict.UNRESOLVED, report.path, e.path, nowhere,
                    f"{report.path}: {e.path} imports {_listing(nowhere)}, which no library of its DT_NEEDED tree "
                    f"({_listing(e.needed, 6) or 'none'}) defines: it fails to load with \"undefined symbol\"; "
                    f"build the unit that defines it into the extension, or link the library that does",
                ))
        found += _torch_floor(report)
    if kind in (CheckKind.ABI3, CheckKind.ALL):
        # objects that use no CPython symbol (NO-PYTHON) pass whatever the tag: a py3-none wheel
        # of torch ops is more portable than abi3, not less
        if report.kind == "wheel" and report.abi3_floor is None and any(e.uses_python for e in report.extensions):
            found.append(Finding(Verdict.NON_ABI3, report.path, None, report.tags,
                                 f"{report.path}: the wheel is not tagged abi3 ({_listing(report.tags)})"))
        for e in report.extensions:
            if e.abi3_violations:
                found.append(Finding(
                    Verdict.NON_ABI3, report.path, e.path, e.abi3_violations,
                    f"{report.path}: {e.path} uses CPython API outside the limited API: {_listing(e.abi3_violations)}",
                ))
            if e.newer_than_tag:
                newest = {n: v for n, v in e.newer_than_tag.items() if v == e.min_python}
                found.append(Finding(
                    Verdict.ABI3_MISMATCH, report.path, e.path,
                    tuple(f"{name} (Python {version})" for name, version in e.newer_than_tag.items()),
                    f"{report.path}: {e.path} needs Python {e.min_python} ({_listing(newest)}) "
                    f"but the wheel is tagged abi3 for Python {report.abi3_floor}",
                ))
        found += _python_floor(report)
    return found


def _torch_floor(report: AuditReport) -> list[Finding]:
    """FLOOR-TOO-LOW: the wheel requires a torch older than its newest shim symbol (it installs
    next to a torch whose shim lacks the symbol, and fails to load)."""
    from packaging.version import Version

    needed = report.min_torch
    if report.requires_torch is None or needed is None:
        return []
    declared = report.declared_torch
    if declared is not None and Version(declared) >= Version(needed):
        return []
    setter = max((e for e in report.extensions if e.min_torch), key=lambda e: Version(e.min_torch or "0"))
    return [Finding(Verdict.FLOOR_TOO_LOW, report.path, setter.path, setter.min_torch_symbols,
                    f"{report.path}: declares Requires-Dist: {report.requires_torch} but {setter.path} needs torch "
                    f"{needed} ({_listing(setter.min_torch_symbols) or 'the stable-ABI baseline'})")]


def _python_floor(report: AuditReport) -> list[Finding]:
    """FLOOR-TOO-LOW: Requires-Python below what the abi3 tag and the limited-API symbols of the
    abi3 objects need (the limited-API floor says nothing about objects built for the full API)."""
    from packaging.version import Version

    if report.requires_python is None:
        return []
    needs = [(v, why) for v,
             why in ((report.min_python, "its limited-API symbols"), (report.abi3_floor, "its abi3 tag")) if v]
    if not needs:
        return []
    needed, why = max(needs, key=lambda item: Version(item[0]))
    declared = report.declared_python
    if declared is not None and Version(declared) >= Version(needed):
        return []
    symbols = tuple(sorted({s for e in report.extensions if e.min_python == needed
                            for s in e.min_python_symbols})) if why.startswith("its limited") else ()
    return [Finding(Verdict.FLOOR_TOO_LOW, report.path, None, symbols,
                    f"{report.path}: declares Requires-Python: {report.requires_python} but {why} need Python {needed}"
                    + (f" ({_listing(symbols)})" if symbols else ""))]


def floor_findings(report: AuditReport) -> list[Finding]:
    """The FLOOR-TOO-LOW findings of every check kind."""
    return [f for f in findings(report, CheckKind.ALL) if f.verdict == Verdict.FLOOR_TOO_LOW]


def object_verdict(elf: ElfReport, found: Sequence[Finding]) -> GateVerdict:
    """One object's verdict: the checks it fails (UNSTABLE, NON-ABI3), else its torch verdict."""
    mine = tuple(f.verdict for f in found if f.member == elf.path)
    return GateVerdict(mine) if mine else GateVerdict.of(Verdict(elf.torch_abi))


def passes(verdict: Verdict) -> bool:
    """Whether an object (or dependency, or unit) with this verdict passes the gate."""
    return verdict in PASSING


def summarize(verdicts: Sequence[GateVerdict], allow: bool = False) -> GateVerdict:
    """A dependency's verdict from its objects' verdicts: the first failing one (let through
    with ``allow``), else STABLE when any object uses torch, else NO-TORCH; "no extensions"
    when it ships no shared object."""
    if not verdicts:
        return GateVerdict.of(Verdict.NO_EXTENSIONS)
    bad = [v for v in verdicts if not v.passes]
    if not bad:
        uses_torch = any(Verdict.STABLE in v.verdicts for v in verdicts)
        return GateVerdict.of(Verdict.STABLE if uses_torch else Verdict.NO_TORCH)
    return bad[0].let_through() if allow else bad[0]


def worst_torch(verdicts: Iterable[str]) -> Verdict:
    """A PATH's torch verdict from its objects': UNSTABLE if any is, else INCOMPLETE if one could not
    be read, else STABLE if any is, else NO-TORCH."""
    seen = set(verdicts)
    for verdict in (Verdict.UNSTABLE, Verdict.INCOMPLETE, Verdict.STABLE):
        if verdict in seen:
            return verdict
    return Verdict.NO_TORCH


def worst_source(verdicts: Iterable[str]) -> Verdict:
    """A source-level verdict from its parts' (a unit's findings, a dependency's units): UNSTABLE
    beats NOT-LIMITED beats INCOMPLETE beats CLEAN, each proven by what was found."""
    seen = set(verdicts)
    return next((verdict for verdict in SOURCE_SEVERITY if verdict in seen), Verdict.CLEAN)
