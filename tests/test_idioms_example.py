"""checkkit, the example's "options, checks, macro" library written the old way (issue #27):
allocation from a tensor's options (an options variable, a zero scalar), ATen's argument
checks, TORCH_CHECK and .dtype() inside a macro, C casts of data_ptr() and sizes()[i], and
is_pinned(), which torch::stable lacks: called through the dispatcher (the helper header's
call_aten, the stack from the build torch's schema of aten::is_pinned).
`assemble migrate checkkit` alone takes it to CLEAN with every rewritten file proven to
compile, the build passes the gate, and the wheel's operators run on both verify torches:
no hand-written patch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.build_support import HERMETIC_CUDA, assemble, example_copy

pytestmark = pytest.mark.integration


def test_migrate_checkkit_alone_reaches_clean_builds_and_verifies(tmp_path: Path, private_cache: Path) -> None:
    ws = example_copy(tmp_path / "ws") / "migrate"
    migrated = assemble("-C", str(ws), "migrate", "checkkit", "--json", cache=private_cache)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    report = json.loads(migrated.stdout)
    assert report["declined"] == [] and report["remaining"] == []
    made = report["steps"][2]["made"]
    assert made["cast-data-ptr"] == 5 and made["sizes-index"] == 3 and made["tensor-checks"] == 3
    assert made["new-empty"] == 2 and made["dtype"] == 1  # the macro's .dtype(): every use passes a tensor
    assert made["dispatcher"] == 1 and report["helpers"]
    assert report["proof"]["proven_files"] == ["csrc/checkkit.cpp"] and report["proof"]["not_committed"] == []
    assert report["check"]["after"] == {"verdict": "CLEAN", "clean": 1, "total": 1}
    source = (ws / "forks" / "checkkit" / "csrc" / "checkkit.cpp").read_text()
    assert "torch::stable::new_zeros(x, {}, ScalarType::Float)" in source  # short after its using-declaration
    assert ("static_cast<const float*>(x.const_data_ptr())" in source
            and "static_cast<float*>(out.mutable_data_ptr())" in source)
    assert "(x).scalar_type() == ScalarType::Float" in source
    assert 'assemble_stable::call_aten<bool>("aten::is_pinned", "", x, std::nullopt) || x.is_cpu()' in source
    assert "torch_call_dispatcher" in (ws / "forks" / "checkkit" / "csrc" / "assemble_stable_helpers.h").read_text()

    built = assemble("-C", str(ws), "build", "--cuda", HERMETIC_CUDA, "--only", "checkkit", "--partial", "--json",
                     cache=private_cache)
    assert built.returncode == 0, built.stderr[-3000:]
    assert [dep["verdict"] for dep in json.loads(built.stdout)["deps"]] == ["STABLE"]
    wheel = next((ws / "dist" / "partial").glob("*.whl"))
    for torch in ("2.13.0", "2.14.1"):
        verified = assemble("-C", str(ws), "verify", str(wheel), "--torch", torch, "--json", cache=private_cache)
        assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
        assert [(r["dep"], r["status"]) for r in json.loads(verified.stdout)["results"]] == [("checkkit", "PASS")]
