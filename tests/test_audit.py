"""`assemble audit` on real compiled extensions: agreement with torch-abi-audit and abi3audit,
the JSON schema, --check exit codes, and directory / single-file input."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from assembler.audit import audit_paths, check
from assembler.errors import InputError
from tests.audit_fixtures.build import Objects, Wheels, audit_build_fixture, make_wheel  # noqa: F401 - fixture
from tests.conftest import run_assemble

TOP_FIELDS = {"path", "torch_abi", "min_torch", "cpython_abi", "extensions"}
ENTRY_FIELDS = {
    "path", "kind", "torch_abi", "stable_shim", "unstable", "unstable_symbols", "min_torch", "min_torch_symbols",
    "unknown_shim_symbols", "abi3_compliant", "abi3_violations", "min_python", "needed",
}


def audit_json(*paths: Path) -> Any:
    done = run_assemble("audit", "--json", *map(str, paths))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def by_name(report: dict) -> dict[str, dict]:
    return {Path(e["path"]).name: e for e in report["extensions"]}


@pytest.fixture(scope="module")
def wheels(audit_build: tuple[Objects, Wheels]) -> Wheels:
    return audit_build[1]


@pytest.fixture(scope="module")
def reports(wheels: Wheels) -> dict[str, dict]:
    good, bad = audit_json(wheels.good, wheels.bad)["reports"]  # several paths: one report each
    return {"good": good, "bad": bad}


def torch_abi_audit(directory: Path) -> dict[str, dict]:
    """torch-abi-audit's verdicts for an unpacked tree, in our vocabulary, keyed by file name."""
    done = subprocess.run(
        [sys.executable, "-m", "torch_abi_audit.cli", str(directory), "--json"], capture_output=True, text=True
    )
    data = json.loads(done.stdout)
    out = {}
    for group, kind in (("extensions", "extension"), ("bundled_libs", "library")):
        for e in data[group]:
            t = e["torch"]
            out[Path(e["path"]).name] = {
                "kind": kind,
                "torch_abi": "STABLE" if t["stable"] else "UNSTABLE" if t["uses_torch"] else "NO-TORCH",
                "stable_shim": t["stable_shim_count"],
                "unstable": len(t["unstable_symbols"]),
                "unstable_symbols": sorted(t["unstable_symbols"]),
                "min_torch": t["min_torch_version"],
                "min_torch_symbols": sorted(t["version_defining_symbols"]),
                "unknown_shim_symbols": sorted(t["unknown_shim_symbols"]),
            }
    return out


def abi3audit(wheel: Path) -> dict[str, dict]:
    done = subprocess.run([sys.executable, "-m", "abi3audit", "--report", str(wheel)], capture_output=True, text=True)
    [spec] = json.loads(done.stdout)["specs"].values()
    return {item["name"]: item["result"] for item in spec["wheel"]}


@pytest.mark.integration
@pytest.mark.parametrize("which", ["good", "bad"])
def test_torch_verdicts_counts_and_min_torch_agree_with_torch_abi_audit(
    which: str, wheels: Wheels, reports: dict[str, dict], tmp_path: Path
) -> None:
    with zipfile.ZipFile(getattr(wheels, which)) as zf:
        zf.extractall(tmp_path)
    theirs = torch_abi_audit(tmp_path / which)
    ours = by_name(reports[which])
    assert set(ours) == set(theirs)
    for name, entry in ours.items():
        mine = {key: entry[key] for key in theirs[name]}
        mine["unstable_symbols"] = sorted(mine["unstable_symbols"])
        assert mine == theirs[name], name


@pytest.mark.integration
@pytest.mark.parametrize("which", ["good", "bad"])
def test_abi3_findings_agree_with_abi3audit(which: str, wheels: Wheels, reports: dict[str, dict]) -> None:
    theirs = abi3audit(getattr(wheels, which))
    ours = by_name(reports[which])
    assert set(ours) == set(theirs)
    for name, result in theirs.items():
        assert sorted(result["non_abi3_symbols"]) == ours[name]["abi3_violations"], name
        assert result["future_abi3_objects"] == ours[name]["newer_than_tag"], name
        assert result["is_abi3_baseline_compatible"] == (not ours[name]["newer_than_tag"]), name


@pytest.mark.integration
def test_each_fixture_gets_the_verdict_it_was_built_for(reports: dict[str, dict]) -> None:
    good, bad = by_name(reports["good"]), by_name(reports["bad"])
    stable = good["stable_ops.abi3.so"]
    assert (stable["kind"], stable["torch_abi"], stable["unstable"]) == ("extension", "STABLE", 0)
    assert stable["min_torch"] == "2.13.0"
    assert "torch_exception_get_what" in stable["min_torch_symbols"]
    assert good["big_ops.abi3.so"] == {**stable, "path": "good/big_ops.abi3.so"}
    helper = good["libshim_helper.so"]
    assert (helper["kind"], helper["torch_abi"], helper["min_torch"]) == ("library", "STABLE", "2.9.0")
    assert helper["unknown_shim_symbols"] == ["torch_audit_fixture_future_api"]
    assert "libtorch_cpu.so" in helper["needed"]
    assert good["plain.abi3.so"]["torch_abi"] == "NO-TORCH" and good["plain.abi3.so"]["abi3_compliant"]
    newer = good["newer.abi3.so"]
    assert newer["abi3_compliant"] and newer["min_python"] == "3.11"
    assert newer["min_python_symbols"] == ["PyBuffer_Release", "PyObject_GetBuffer"]
    unstable = bad["unstable_ops.abi3.so"]
    assert unstable["torch_abi"] == "UNSTABLE" and "libc10.so" in unstable["needed"]
    assert any(s.startswith("c10::detail::torchCheckFail(") for s in unstable["unstable_symbols"])
    assert bad["nonlimited.abi3.so"]["abi3_violations"] == ["PyObject_Print", "_PyObject_GetDictPtr"]
    assert not bad["nonlimited.abi3.so"]["abi3_compliant"]
    assert (reports["good"]["torch_abi"], reports["good"]["min_torch"]) == ("STABLE", "2.13.0")
    assert (reports["good"]["cpython_abi"], reports["good"]["abi3_floor"]) == ("ABI3-MISMATCH", "3.9")
    assert (reports["bad"]["torch_abi"], reports["bad"]["cpython_abi"]) == ("UNSTABLE", "NON-ABI3")


@pytest.mark.integration
def test_json_schema_fields(reports: dict[str, dict]) -> None:
    for report in reports.values():
        assert set(report) >= TOP_FIELDS and report["schema"] == 1
        for entry in report["extensions"]:
            assert set(entry) >= ENTRY_FIELDS
            assert entry["torch_abi"] in {"STABLE", "UNSTABLE", "NO-TORCH"}
            assert entry["kind"] in {"extension", "library"}


@pytest.mark.integration
def test_check_gates_exit_codes(wheels: Wheels) -> None:
    assert run_assemble("audit", "--check", "torch", str(wheels.good)).returncode == 0
    abi3 = run_assemble("audit", "--check", "abi3", str(wheels.good))
    assert abi3.returncode == 1
    assert "good/newer.abi3.so needs Python 3.11" in abi3.stderr and "Traceback" not in abi3.stderr
    torch = run_assemble("audit", "--check", "torch", "--json", str(wheels.bad))
    assert torch.returncode == 1
    assert json.loads(torch.stdout)["torch_abi"] == "UNSTABLE"  # the report still comes out
    assert "bad/unstable_ops.abi3.so uses the unstable LibTorch C++ ABI" in torch.stderr
    both = run_assemble("audit", "--check", "all", str(wheels.bad))
    assert both.returncode == 1 and "PyObject_Print" in both.stderr


@pytest.mark.integration
def test_table_and_verbose_list_the_offenders(wheels: Wheels) -> None:
    done = run_assemble("audit", "-v", str(wheels.bad))
    assert done.returncode == 0
    assert "UNSTABLE" in done.stdout and "NON-ABI3" in done.stdout
    assert "c10::detail::torchCheckFail(char const*" in done.stdout
    assert "_PyObject_GetDictPtr" in done.stdout
    assert "abi3info" in done.stdout  # where the CPython table came from


@pytest.mark.integration
def test_directory_and_single_file_give_the_wheel_results(
    wheels: Wheels, reports: dict[str, dict], audit_build: tuple[Objects, Wheels], tmp_path: Path
) -> None:
    with zipfile.ZipFile(wheels.good) as zf:
        zf.extractall(tmp_path)
    tree = audit_json(tmp_path)
    assert tree["kind"] == "directory" and tree["abi3_floor"] == "3.9"  # tag from the unpacked .dist-info
    assert by_name(tree) == by_name(reports["good"])
    one = audit_json(audit_build[0].unstable)
    assert one["kind"] == "file" and one["abi3_floor"] is None
    [entry] = one["extensions"]
    assert entry == {**by_name(reports["bad"])["unstable_ops.abi3.so"], "path": "unstable_ops.abi3.so"}


@pytest.mark.integration
def test_gate_api_for_the_build(wheels: Wheels, audit_build: tuple[Objects, Wheels], tmp_path: Path) -> None:
    good, bad = audit_paths([wheels.good, wheels.bad])
    assert audit_paths([wheels.good, wheels.bad], workers=1) == [good, bad]  # threads change nothing
    assert check(good, "torch") == []
    assert check(good, "abi3") == [
        f"{wheels.good}: good/newer.abi3.so needs Python 3.11 (PyBuffer_Release, PyObject_GetBuffer) "
        "but the wheel is tagged abi3 for Python 3.9"
    ]
    assert [line.split(" uses ")[0] for line in check(bad, "all")] == [
        f"{wheels.bad}: bad/unstable_ops.abi3.so",
        f"{wheels.bad}: bad/nonlimited.abi3.so",
    ]
    untagged = make_wheel(tmp_path / "p-1.0-cp311-cp311-linux_x86_64.whl", {"p/plain.so": audit_build[0].plain})
    [report] = audit_paths([untagged])
    assert report.cpython_abi == "ABI3" and report.abi3_floor is None
    assert check(report, "abi3") == [f"{untagged}: the wheel is not tagged abi3 (cp311-cp311-linux_x86_64)"]
    with pytest.raises(InputError):
        check(report, "cuda")
