"""The one audit gate (assembler.audit.gate): findings, per-object and per-dependency verdicts,
and that every verdict has a style in the report. Reports are built in-process from real
audit dataclasses; the end-to-end gate on real wheels is in test_audit.py and test_build.py."""

from __future__ import annotations

import pytest

from assembler.audit.gate import (
    VERDICT_STYLE,
    CheckKind,
    GateVerdict,
    Verdict,
    findings,
    object_verdict,
    passes,
    summarize,
    worst_torch,
)
from assembler.audit.model import AuditReport, ElfReport
from assembler.audit.report import verdict_style
from assembler.audit.wheel_scan import CHECKS, check
from assembler.errors import InputError


def _elf(path: str, torch: Verdict = Verdict.STABLE, unstable: tuple[str, ...] = (), violations: tuple[str, ...] = (),
         newer: dict[str, str] | None = None, min_python: str | None = "3.9") -> ElfReport:
    return ElfReport(
        path=path, kind="extension", torch_abi=torch, stable_shim=3, unstable=len(unstable), unstable_symbols=unstable,
        min_torch="2.10.0", min_torch_symbols=(), unknown_shim_symbols=(), abi3_compliant=not violations,
        abi3_violations=violations, min_python=min_python, min_python_symbols=(), newer_than_tag=newer or {}, needed=(),
    )


def _wheel(*elves: ElfReport, floor: str | None = "3.9") -> AuditReport:
    return AuditReport(path="x.whl", kind="wheel", tags=("cp39-abi3-linux_x86_64",), abi3_floor=floor,
                       extensions=elves, sources={})


def test_check_choices_come_from_the_gate() -> None:
    assert CHECKS == ("torch", "abi3", "all") == tuple(CheckKind)
    with pytest.raises(InputError, match="unknown audit check"):
        check(_wheel(), "everything")


def test_findings_per_check_kind() -> None:
    bad = _elf("a.so", Verdict.UNSTABLE, unstable=("at::Tensor::add",), violations=("PyList_GET_ITEM",),
               newer={"PyType_GetModuleByDef": "3.13"}, min_python="3.13")
    report = _wheel(bad, _elf("b.so"))
    assert [f.verdict for f in findings(report, "torch")] == [Verdict.UNSTABLE]
    assert [f.verdict for f in findings(report, CheckKind.ABI3)] == [Verdict.NON_ABI3, Verdict.ABI3_MISMATCH]
    everything = findings(report, CheckKind.ALL)
    assert [f.member for f in everything] == ["a.so"] * 3
    assert everything[2].offending == ("PyType_GetModuleByDef (Python 3.13)",)
    assert "needs Python 3.13" in everything[2].line and "tagged abi3 for Python 3.9" in everything[2].line
    assert object_verdict(bad, everything) == GateVerdict((Verdict.UNSTABLE, Verdict.NON_ABI3, Verdict.ABI3_MISMATCH))
    assert str(object_verdict(bad, everything)) == "UNSTABLE+NON-ABI3+ABI3-MISMATCH"
    assert object_verdict(report.extensions[1], everything) == GateVerdict.of(Verdict.STABLE)
    assert check(report, "torch") == [everything[0].line]


def test_a_wheel_without_abi3_tag_fails_abi3_as_a_whole() -> None:
    [finding] = findings(_wheel(_elf("a.so"), floor=None), CheckKind.ABI3)
    assert finding.member is None and finding.verdict is Verdict.NON_ABI3
    assert findings(_wheel(_elf("a.so"), floor=None), CheckKind.TORCH) == []


def test_dependency_summary() -> None:
    stable, no_torch = GateVerdict.of(Verdict.STABLE), GateVerdict.of(Verdict.NO_TORCH)
    both = GateVerdict((Verdict.UNSTABLE, Verdict.NON_ABI3))
    assert summarize([]) == GateVerdict.of(Verdict.NO_EXTENSIONS) and str(summarize([])) == "no extensions"
    assert summarize([no_torch, stable]) == stable
    assert summarize([no_torch]) == no_torch
    assert summarize([stable, both]) == both
    allowed = summarize([GateVerdict.of(Verdict.UNSTABLE)], allow=True)
    assert allowed.allowed and not allowed.passes and str(allowed) == "UNSTABLE (allowed)"
    assert passes(Verdict.STABLE) and passes(Verdict.NO_TORCH) and passes(Verdict.CLEAN)
    assert not passes(Verdict.UNSTABLE) and not passes(Verdict.INCOMPLETE)
    assert worst_torch(["NO-TORCH", "STABLE"]) is Verdict.STABLE
    assert worst_torch([Verdict.STABLE, Verdict.UNSTABLE]) is Verdict.UNSTABLE
    assert worst_torch([]) is Verdict.NO_TORCH


def test_every_verdict_has_a_style() -> None:
    assert set(VERDICT_STYLE) == set(Verdict)
    assert verdict_style(GateVerdict.of(Verdict.UNSTABLE).let_through()) == "yellow"
    assert verdict_style(GateVerdict((Verdict.UNSTABLE, Verdict.NON_ABI3))) == VERDICT_STYLE[Verdict.UNSTABLE]
    assert verdict_style(Verdict.NO_TORCH) == VERDICT_STYLE[Verdict.NO_TORCH]
    assert verdict_style(None) == "dim"


def test_report_json_prints_plain_strings() -> None:
    data = _wheel(_elf("a.so", Verdict.NO_TORCH, min_python=None)).to_json()
    assert data["torch_abi"] == "NO-TORCH" and type(data["torch_abi"]) is str
    assert data["cpython_abi"] == "NO-PYTHON" and data["extensions"][0]["torch_abi"] == "NO-TORCH"
