"""The torch shim version table: header guard parsing, refresh from a torch (installed or a wheel),
and unknown shim symbols becoming known once the table is refreshed."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from assembler.audit.torchdata import DEFAULT_TABLE, load_table
from assembler.audit.torchheaders import parse_shim_headers
from tests.audit_fixtures.build import TORCH, Objects, Wheels, audit_build_fixture  # noqa: F401 - fixture
from tests.conftest import run_assemble

HEADER = """
#pragma once
/* torch_commented_out(void) is not a declaration */
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_old(void);  // no guard: older than the guards
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0
AOTI_TORCH_EXPORT AOTITorchError
torch_ten(int x);
#ifdef USE_CUDA
AOTI_TORCH_EXPORT AOTITorchError torch_ten_cuda(void);
#endif // USE_CUDA
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_12_0
AOTI_TORCH_EXPORT AOTITorchError torch_twelve(void);
#else
AOTI_TORCH_EXPORT AOTITorchError torch_twelve_fallback(void);
#endif
#endif // TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0
"""


def test_guards_give_versions() -> None:
    assert parse_shim_headers([("shim.h", HEADER)]) == {
        "torch_ten": (2, 10, 0),
        "torch_ten_cuda": (2, 10, 0),
        "torch_twelve": (2, 12, 0),
        "torch_twelve_fallback": (2, 10, 0),
    }


def test_shipped_table_records_where_it_came_from() -> None:
    table = load_table(DEFAULT_TABLE)
    sources = " ".join(p["source"] for p in table.provenance)
    assert "shim_function_versions.txt" in sources and "TORCH_FEATURE_VERSION guards in torch 2.13.0" in sources
    assert table.version_of("torch_exception_get_what") == (2, 13, 0)
    assert table.version_of("aoti_torch_get_numel") == (2, 9, 0)
    assert table.version_of("torch_no_such_symbol") is None


def fake_torch_wheel(path: Path) -> Path:
    shim = (
        "#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_13_0\n"
        "AOTI_TORCH_EXPORT AOTITorchError torch_exception_get_what(const char**);\n"
        "#endif\n"
        "#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_15_0\n"
        "AOTI_TORCH_EXPORT AOTITorchError torch_audit_fixture_future_api(AtenTensorHandle t);\n"
        "#endif\n"
    )
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("torch-2.15.0.dist-info/METADATA", "Name: torch\nVersion: 2.15.0\n")
        zf.writestr("torch/include/torch/csrc/stable/c/shim.h", shim)
    return path


@pytest.mark.integration
def test_refresh_from_a_torch_wheel_resolves_unknown_symbols(
    audit_build: tuple[Objects, Wheels], tmp_path: Path
) -> None:
    table = tmp_path / "table.json"
    shutil.copy(DEFAULT_TABLE, table)
    helper = audit_build[0].helper
    before = json.loads(run_assemble("audit", "--json", "--torch-table", str(table), str(helper)).stdout)
    assert before["extensions"][0]["unknown_shim_symbols"] == ["torch_audit_fixture_future_api"]

    wheel = fake_torch_wheel(tmp_path / "torch-2.15.0-cp311-cp311-linux_x86_64.whl")
    done = run_assemble("audit", "--refresh-torch-table", "--torch-table", str(table), "--from-torch", str(wheel))
    assert done.returncode == 0, done.stderr
    assert "1 added" in done.stdout and "torch_audit_fixture_future_api" in done.stdout
    raw = json.loads(table.read_text())
    assert raw["symbols"]["torch_audit_fixture_future_api"] == "2.15.0"
    assert raw["provenance"][-1]["source"] == "TORCH_FEATURE_VERSION guards in torch 2.15.0 headers"
    assert raw["provenance"][-1]["confirmed"] == 1

    after = json.loads(run_assemble("audit", "--json", "--torch-table", str(table), str(helper)).stdout)
    entry = after["extensions"][0]
    assert (entry["min_torch"], entry["min_torch_symbols"]) == ("2.15.0", ["torch_audit_fixture_future_api"])
    assert entry["unknown_shim_symbols"] == []


@pytest.mark.integration
def test_refresh_from_an_installed_torch_confirms_the_table(tmp_path: Path) -> None:
    from assembler.toolchain.torchenv import ensure_build_env

    table = tmp_path / "table.json"
    shutil.copy(DEFAULT_TABLE, table)
    python = ensure_build_env(TORCH).python
    done = run_assemble("audit", "--refresh-torch-table", "--torch-table", str(table), "--from-torch", str(python))
    assert done.returncode == 0, done.stderr
    assert f"torch {TORCH}" in done.stdout and "0 added, 0 changed" in done.stdout
    before, after = json.loads(DEFAULT_TABLE.read_text()), json.loads(table.read_text())
    assert after["symbols"] == before["symbols"]
    assert len(after["provenance"]) == len(before["provenance"]) + 1


def test_refresh_without_torch_is_a_toolchain_error(tmp_path: Path) -> None:
    table = tmp_path / "table.json"
    shutil.copy(DEFAULT_TABLE, table)
    done = run_assemble("audit", "--refresh-torch-table", "--torch-table", str(table), "--from-torch",
                        "/nonexistent/python")
    assert done.returncode == 7 and done.stderr.startswith("error: cannot find torch in /nonexistent/python")
    assert table.read_bytes() == DEFAULT_TABLE.read_bytes()
