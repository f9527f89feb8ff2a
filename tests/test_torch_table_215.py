"""The shim table knows torch 2.15.0 (issue 28): refreshed from the real torch 2.15.0 wheel's
headers, it names the release of the Python-object shims that release added, and an object
built here with g++ that imports one of them has 2.15.0 as its minimum torch."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from assembler.audit import audit_paths
from assembler.audit.torchdata import format_version, load_table

ADDED_IN_2_15 = ("torch_device_from_pyobject", "torch_device_to_pyobject", "torch_dtype_from_pyobject",
                 "torch_dtype_to_pyobject", "torch_is_tensor_pyobject")


def test_the_table_names_the_release_of_the_2_15_shims() -> None:
    table = load_table()
    for name in ADDED_IN_2_15:
        since = table.version_of(name)
        assert since is not None and format_version(since) == "2.15.0", name


@pytest.mark.parametrize("symbol", ["torch_dtype_from_pyobject", "torch_is_tensor_pyobject"])
def test_an_object_importing_a_2_15_shim_needs_torch_2_15(tmp_path: Path, symbol: str) -> None:
    (tmp_path / "uses.cpp").write_text(f'extern "C" int {symbol}(void*, void*);\n'
                                       f'extern "C" int call(void* a, void* b) {{ return {symbol}(a, b); }}\n')
    library = tmp_path / "uses.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(tmp_path / "uses.cpp"), "-o", str(library)], check=True,
                   capture_output=True)
    (report,) = audit_paths([library])
    (obj,) = report.extensions
    assert obj.min_torch == "2.15.0" and symbol in obj.min_torch_symbols and not obj.unknown_shim_symbols, obj
