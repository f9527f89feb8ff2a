"""Verdicts are typed (#31 item 2): the gate says a ``GateVerdict`` (the checks failed, or the one
passing verdict, and "allowed"), written as text in one place and never read back from text."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from assembler.audit.gate import GateVerdict, Verdict, summarize
from assembler.builder.pipeline import ExtensionVerdict

PACKAGE = Path(__file__).resolve().parent.parent / "assembler"
GATE = PACKAGE / "audit" / "gate.py"
# Modules not yet on GateVerdict (none: keep it empty).
PENDING: set[str] = set()


def test_the_text_is_what_every_output_has_always_printed() -> None:
    assert str(GateVerdict((Verdict.UNSTABLE, Verdict.NON_ABI3))) == "UNSTABLE+NON-ABI3"
    assert str(GateVerdict.of(Verdict.UNSTABLE).let_through()) == "UNSTABLE (allowed)"
    assert str(summarize([])) == "no extensions" and str(GateVerdict.of(Verdict.STABLE)) == "STABLE"


def test_a_verdict_let_through_still_fails_and_a_passing_one_cannot_be_let_through() -> None:
    allowed = GateVerdict((Verdict.UNRESOLVED,), allowed=True)
    assert not allowed.passes and allowed.first is Verdict.UNRESOLVED
    with pytest.raises(ValueError, match="only a failing verdict"):
        GateVerdict.of(Verdict.STABLE).let_through()
    with pytest.raises(ValueError, match="failing checks or one passing verdict"):
        GateVerdict((Verdict.STABLE, Verdict.NO_TORCH))
    with pytest.raises(ValueError, match="failing checks or one passing verdict"):
        GateVerdict(())


@pytest.mark.parametrize("verdict", [
    GateVerdict.of(Verdict.STABLE), GateVerdict((Verdict.UNSTABLE, Verdict.ABI3_MISMATCH)),
    GateVerdict.of(Verdict.UNSAFE_PATH).let_through(),
])
def test_records_keep_the_verdicts_not_their_text(verdict: GateVerdict) -> None:
    """The merge state and the evidence hold the values; a record of the text (an older
    assembler's) is refused, so it is merged or built again rather than misread."""
    item = ExtensionVerdict("kit/_C.abi3.so", verdict, "2.10", ["at::Tensor::add"])
    record = json.loads(json.dumps(item.record()))
    assert ExtensionVerdict.from_record(record) == item
    assert item.as_dict()["verdict"] == str(verdict)
    with pytest.raises(TypeError):
        ExtensionVerdict.from_record({**record, "verdict": str(verdict)})


def _text_of_a_verdict(node: ast.AST) -> bool:
    """A literal of the text's marks, or a split on them: what building or reading the text takes."""
    if isinstance(node, ast.Constant) and node.value in (" (allowed)", "(allowed)"):
        return True
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    joined = (node.func.attr == "join" and isinstance(node.func.value, ast.Constant) and node.func.value.value == "+"
              and any("verdict" in ast.unparse(arg) for arg in node.args))
    split = (node.func.attr in ("split", "partition", "endswith") and "verdict" in ast.unparse(node.func.value)
             and any(isinstance(arg, ast.Constant) and arg.value in ("+", " (") for arg in node.args))
    return joined or split


def test_only_the_gate_writes_a_verdict_as_text() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == GATE:
            continue
        tree = ast.parse(path.read_text(), str(path))
        found += [f"{path.relative_to(PACKAGE)}:{node.lineno}" for node in ast.walk(tree) if _text_of_a_verdict(node)]
    assert [where for where in found if where.split(":")[0] not in PENDING] == []
    before = ast.parse('ok = "+".join(verdicts)\nv = verdict + " (allowed)"\nfirst = verdict.split("+")[0]\n')
    assert sum(_text_of_a_verdict(node) for node in ast.walk(before)) == 3  # the check sees what it forbids
