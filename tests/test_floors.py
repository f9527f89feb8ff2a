"""Floors that match the symbols: the torch and Python a wheel declares against what its shared
objects import. Every case is compiled here with gcc (the symbols are real torch 2.13 shim and
CPython names; what the audit reads is the ELF's undefined dynamic symbols)."""

from __future__ import annotations

import json
import subprocess
import sysconfig
import zipfile
from pathlib import Path

import pytest

from assembler.manifest import load_manifest
from assembler.wheel.merge import merge_wheel
from tests.conftest import run_assemble
from tests.test_wheel_merge import built, workspace  # noqa: F401  (fixtures)

PY_INCLUDE = sysconfig.get_paths()["include"]

# Imports two shim symbols that torch 2.13 added (TORCH_FEATURE_VERSION >= 2.13 in its headers)
NEW_SHIM = r"""
#include <stdlib.h>
void torch_exception_get_what(void); void torch_new_stable_ivalue(void); void aoti_torch_delete_tensor_object(void);
void* PyInit__floor_C(void) { torch_exception_get_what(); torch_new_stable_ivalue(); aoti_torch_delete_tensor_object(); return getenv("X"); }
"""


def _gcc(out: Path, source: str, name: str, *flags: str) -> Path:
    src = out / f"{name}.c"
    src.write_text(source)
    target = out / f"{name}.so"
    subprocess.run(["gcc", "-O1", "-fPIC", "-shared", f"-I{PY_INCLUDE}", *flags, str(src), "-o", str(target)], check=True)
    return target


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("floor-objects")
    _gcc(out, NEW_SHIM, "new_shim")
    return out


def _metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()


def test_merge_declares_the_symbol_floor_not_the_lower_torch_target(workspace: Path, objects: Path) -> None:  # noqa: F811
    manifest = load_manifest(workspace / "deps.toml")
    wheel = merge_wheel(manifest, [workspace / "artifacts"], workspace / "before").wheel
    assert "Requires-Dist: torch>=2.11\n" in _metadata(wheel)  # no shim symbols: the highest torch-target
    (workspace / "artifacts" / "ops" / "files" / "ops" / "_floor_C.abi3.so").write_bytes((objects / "new_shim.so").read_bytes())
    wheel = merge_wheel(manifest, [workspace / "artifacts"], workspace / "after").wheel
    metadata = _metadata(wheel)
    assert "Requires-Dist: torch>=2.13.0\n" in metadata and "torch>=2.11" not in metadata
    audited = run_assemble("audit", str(wheel), "--json", "--check", "torch")
    assert json.loads(audited.stdout)["min_torch"] == "2.13.0"
    assert audited.returncode == 0, audited.stdout  # the merged wheel declares what its symbols need

