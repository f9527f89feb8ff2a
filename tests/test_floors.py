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
void* PyInit__floor_C(void) {
  torch_exception_get_what(); torch_new_stable_ivalue(); aoti_torch_delete_tensor_object(); return getenv("X");
}
"""


def _gcc(out: Path, source: str, name: str, *flags: str) -> Path:
    """The object, linked against a stand-in libtorch_cpu.so (its soname only, as the CMake helper
    links a torch library a build's torch lacks): a shim call needs it in DT_NEEDED to load."""
    stub = out / "torch-stub" / "libtorch_cpu.so"
    if not stub.exists():
        stub.parent.mkdir(exist_ok=True)
        (out / "torch-stub.c").write_text("void assembler_test_stub(void) {}\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libtorch_cpu.so", str(out / "torch-stub.c"), "-o",
                        str(stub)], check=True)
    src = out / f"{name}.c"
    src.write_text(source)
    target = out / f"{name}.so"
    subprocess.run(["gcc", "-O1", "-fPIC", "-shared", f"-I{PY_INCLUDE}", *flags, str(src), "-o", str(target),
                    f"-L{stub.parent}", "-Wl,--no-as-needed", "-ltorch_cpu"], check=True)
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
    (workspace / "artifacts" / "ops" / "files" / "ops" / "_floor_C.abi3.so").write_bytes(
        (objects / "new_shim.so").read_bytes())
    wheel = merge_wheel(manifest, [workspace / "artifacts"], workspace / "after").wheel
    metadata = _metadata(wheel)
    assert "Requires-Dist: torch>=2.13.0\n" in metadata and "torch>=2.11" not in metadata
    audited = run_assemble("audit", str(wheel), "--json", "--check", "torch")
    assert json.loads(audited.stdout)["min_torch"] == "2.13.0"
    assert audited.returncode == 0, audited.stdout  # the merged wheel declares what its symbols need



# Built for one CPython's full API (no Py_LIMITED_API), like a pybind11 module: calls
# PyObject_Vectorcall, which the full API exports since 3.9 and the limited API only since 3.12,
# and _PyObject_GetDictPtr, which the limited API never had.
FULL_API = r"""
#include <Python.h>
extern PyObject* vectorcall(PyObject*, PyObject* const*, size_t, PyObject*) __asm__("PyObject_Vectorcall");
static PyObject* call(PyObject* self, PyObject* fn) {
  PyObject** dict = _PyObject_GetDictPtr(fn);
  return dict ? vectorcall(fn, NULL, 0, NULL) : PyLong_FromLong(0);
}
static PyMethodDef methods[] = {{"call", call, METH_O, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "core", NULL, -1, methods};
PyMODINIT_FUNC PyInit_core(void) { return PyModule_Create(&module); }
"""

# Stays in the 3.11 limited API (PyBuffer_Release and PyObject_GetBuffer joined it in 3.11).
LIMITED_311 = r"""
#include <Python.h>
static PyObject* size_of(PyObject* self, PyObject* obj) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
  Py_ssize_t n = view.len;
  PyBuffer_Release(&view);
  return PyLong_FromSsize_t(n);
}
static PyMethodDef methods[] = {{"size_of", size_of, METH_O, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "newer", NULL, -1, methods};
PyMODINIT_FUNC PyInit_newer(void) { return PyModule_Create(&module); }
"""

# A torch operator library loaded with torch.ops.load_library: shim calls, no CPython symbol.
NO_PYTHON = r"""
#include <stdlib.h>
void aoti_torch_delete_tensor_object(void);
void register_ops(void) { aoti_torch_delete_tensor_object(); if (getenv("X")) abort(); }
"""


@pytest.fixture(scope="module")
def cases(objects: Path) -> Path:
    _gcc(objects, FULL_API, "full_api")
    _gcc(objects, LIMITED_311, "limited_311", "-DPy_LIMITED_API=0x030B0000")
    _gcc(objects, NO_PYTHON, "no_python")
    return objects


def _wheel(path: Path, files: dict[str, Path], *requires: str) -> Path:
    """A wheel whose METADATA carries ``requires`` header lines (Requires-Dist, Requires-Python)."""
    name, version, tag = path.name.removesuffix(".whl").split("-", 2)
    dist_info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, source in files.items():
            archive.writestr(member, source.read_bytes())
        header = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *requires]
        archive.writestr(f"{dist_info}/METADATA",
                         "\n".join(header) + "\n\nRequires-Dist: torch>=99 (the body is not metadata)\n")
        archive.writestr(f"{dist_info}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n")
        archive.writestr(f"{dist_info}/RECORD", "")
    return path


def _audit(wheel: Path, *args: str) -> tuple[int, dict, str]:
    result = run_assemble("audit", str(wheel), "--json", *args)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout), result.stderr


def test_torch_floor_below_the_symbols_is_flagged(tmp_path: Path, objects: Path) -> None:
    so = {"floor/_floor_C.abi3.so": objects / "new_shim.so"}
    low = _wheel(tmp_path / "floor-1.0-cp39-abi3-linux_x86_64.whl", so, "Requires-Dist: torch>=2.11",
                 "Requires-Python: >=3.9")
    code, data, _ = _audit(low, "--check", "torch")
    assert code == 1 and data["requires_torch"] == "torch>=2.11" and data["min_torch"] == "2.13.0"
    [line] = data["floor_too_low"]
    assert "Requires-Dist: torch>=2.11" in line and "floor/_floor_C.abi3.so needs torch 2.13.0" in line
    assert "torch_exception_get_what" in line and "torch_new_stable_ivalue" in line
    text = run_assemble("audit", str(low))
    assert text.returncode == 0 and "FLOOR-TOO-LOW" in text.stdout  # reported without --check, gated with it
    checked = run_assemble("audit", str(low), "--check", "all")
    assert checked.returncode == 1 and "needs torch 2.13.0" in checked.stdout + checked.stderr
    # a torch requirement without a bound is below the floor too; the right bound, or a torch
    # needed only by an extra, is not flagged
    for requires, flagged in (("torch", True), ("torch>=2.13", False), ("torch>=2.13.0,<3", False),
                              ('torch>=2.9; extra == "cuda"', False), ("torch==2.12.*", True)):
        wheel = _wheel(tmp_path / f"w{len(requires)}-1.0-cp39-abi3-linux_x86_64.whl", so, f"Requires-Dist: {requires}",
                       "Requires-Python: >=3.9")
        code, data, _ = _audit(wheel, "--check", "torch")
        assert (code == 1) == flagged and bool(data["floor_too_low"]) == flagged, (requires, data["floor_too_low"])


def test_python_floor_below_the_abi3_tag_or_the_limited_api_symbols_is_flagged(tmp_path: Path, cases: Path) -> None:
    newer = {"p/newer.abi3.so": cases / "limited_311.so"}
    low = _wheel(tmp_path / "p-1.0-cp311-abi3-linux_x86_64.whl", newer, "Requires-Python: >=3.9")
    code, data, _ = _audit(low, "--check", "abi3")
    assert code == 1 and data["min_python"] == "3.11" and data["cpython_abi"] == "ABI3"
    [line] = data["floor_too_low"]
    assert "Requires-Python: >=3.9" in line and "Python 3.11" in line and "PyBuffer_Release" in line
    assert _audit(low, "--check", "torch")[0] == 0  # a Python floor is an abi3 finding
    ok = _wheel(tmp_path / "q-1.0-cp311-abi3-linux_x86_64.whl", newer, "Requires-Python: >=3.11")
    assert _audit(ok, "--check", "all")[:2][0] == 0
    below_tag = _wheel(tmp_path / "r-1.0-cp312-abi3-linux_x86_64.whl", newer, "Requires-Python: >=3.11")
    code, data, _ = _audit(below_tag, "--check", "abi3")
    assert (code == 1 and data["floor_too_low"]
            == [f"{below_tag}: declares Requires-Python: >=3.11 but its abi3 tag need Python 3.12"])


def test_limited_api_floor_only_for_abi3_objects(tmp_path: Path, cases: Path) -> None:
    """torchcodec's case: a cp311 wheel whose extension calls PyObject_Vectorcall runs on 3.11;
    the limited API's 3.12 for that symbol must not become its minimum Python."""
    cp311 = _wheel(tmp_path / "codec-1.0-cp311-cp311-linux_x86_64.whl",
                   {"codec/core.cpython-311-x86_64-linux-gnu.so": cases / "full_api.so"}, "Requires-Python: >=3.10")
    _, data, _ = _audit(cp311)
    [obj] = data["extensions"]
    assert obj["python_api"] == "full" and obj["min_python"] is None and obj["min_python_symbols"] == []
    assert (data["min_python"] is None and data["floor_too_low"] == []
            and obj["abi3_violations"] == ["_PyObject_GetDictPtr"])
    text = run_assemble("audit", str(cp311))
    assert "full API" in text.stdout and "3.12" not in text.stdout
    # the same object shipped as abi3: now the limited-API floor is what it claims, and it is 3.12
    abi3 = _wheel(tmp_path / "codec-1.0-cp39-abi3-linux_x86_64.whl", {"codec/core.abi3.so": cases / "full_api.so"})
    _, data, _ = _audit(abi3)
    [obj] = data["extensions"]
    assert (obj["python_api"] == "limited" and obj["min_python"] == "3.12"
            and obj["min_python_symbols"] == ["PyObject_Vectorcall"])


def test_check_abi3_passes_objects_without_cpython_symbols_whatever_the_tag(tmp_path: Path, cases: Path) -> None:
    ops = _wheel(tmp_path / "ops-1.0-py3-none-linux_x86_64.whl", {"ops/libops.so": cases / "no_python.so"})
    code, data, stderr = _audit(ops, "--check", "abi3")
    assert code == 0, stderr
    assert data["cpython_abi"] == "NO-PYTHON" and data["extensions"][0]["python_api"] == "none"
    assert _audit(ops, "--check", "all")[0] == 0
    # an object that does use CPython still needs the abi3 tag
    mixed = _wheel(tmp_path / "mixed-1.0-py3-none-linux_x86_64.whl",
                   {"mixed/libops.so": cases / "no_python.so", "mixed/newer.abi3.so": cases / "limited_311.so"})
    code, _, _ = _audit(mixed, "--check", "abi3")
    checked = run_assemble("audit", str(mixed), "--check", "abi3")
    assert code == 1 and "not tagged abi3" in checked.stdout + checked.stderr
