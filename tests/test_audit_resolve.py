"""UNRESOLVED: the gate proves an object's torch symbols resolve from its DT_NEEDED tree (issue 19).

The objects are built here with the real compiler against the torch 2.13.0 build environment:
one links only libtorch_cpu while calling the CUDA shim ``aoti_torch_get_current_cuda_stream``
(it fails to load on a CUDA torch with "undefined symbol", as QuTLASS did); the other also
needs ``libtorch_cuda.so`` (a stub with that soname, as the CMake helper links for a CPU torch).
"""

from __future__ import annotations

import json
import subprocess
import sysconfig
from pathlib import Path

import pytest

from assembler.audit import audit_paths
from assembler.audit.gate import Verdict, findings
from assembler.audit.torchlibs import shipped
from assembler.builder.outcome import BuildOutcome
from assembler.builder.pipeline import BuildReport, DepReport, _audit_wheel, _gate
from assembler.errors import CheckFailed
from tests.audit_fixtures.build import make_wheel
from tests.conftest import run_assemble

pytestmark = pytest.mark.integration

CUDA_SHIM = "aoti_torch_get_current_cuda_stream"
SOURCE = f"""\
#include <Python.h>
extern "C" int {CUDA_SHIM}(int device, void** stream);
extern "C" int aoti_torch_get_device_type(void* tensor, int* type);
extern "C" int launch(void** stream) {{
  int type;
  aoti_torch_get_device_type(nullptr, &type);
  return {CUDA_SHIM}(0, stream);
}}
static struct PyModuleDef module = {{PyModuleDef_HEAD_INIT, "ops", nullptr, -1, nullptr}};
PyMODINIT_FUNC PyInit_ops(void) {{ return PyModule_Create(&module); }}
"""


@pytest.fixture(scope="module")
def torch_lib() -> Path:
    from assembler.toolchain.torchenv import ensure_build_env

    return ensure_build_env("2.13.0").torch_dir / "lib"


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory, torch_lib: Path) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("resolve")
    (out / "ops.cpp").write_text(SOURCE)
    (out / "stub.c").write_text(f"int {CUDA_SHIM}(int d, void** s) {{ return 0; }}\n")
    stubs = out / "stubs"
    stubs.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libtorch_cuda.so", str(out / "stub.c"), "-o",
                    str(stubs / "libtorch_cuda.so")],
                   check=True, capture_output=True)
    cxx = ["g++", "-shared", "-fPIC", "-O1", "-DPy_LIMITED_API=0x03090000", f"-I{sysconfig.get_paths()['include']}",
           str(out / "ops.cpp")]
    bad, good = out / "bad" / "ops.abi3.so", out / "good" / "ops.abi3.so"
    bad.parent.mkdir()
    good.parent.mkdir()
    subprocess.run([*cxx, "-o", str(bad), f"-L{torch_lib}", "-Wl,--no-as-needed", "-ltorch_cpu"], check=True,
                   capture_output=True)
    subprocess.run([*cxx, "-o", str(good), f"-L{stubs}", f"-L{torch_lib}", "-Wl,--no-as-needed", "-ltorch_cuda",
                    "-ltorch_cpu"],
                   check=True, capture_output=True)
    return {
        "bad": make_wheel(out / "bad-1.0-cp39-abi3-linux_x86_64.whl", {"bad/ops.abi3.so": bad}),
        "good": make_wheel(out / "good-1.0-cp39-abi3-linux_x86_64.whl", {"good/ops.abi3.so": good}),
    }


def test_the_shipped_table_knows_where_the_cuda_shim_lives() -> None:
    table = shipped()
    assert table is not None and table.torch.startswith("2.14.1")
    assert table.exporter(CUDA_SHIM) == "libtorch_cuda.so"
    assert table.exporter("aoti_torch_get_device_type") == "libtorch_cpu.so"
    assert "libtorch_cuda.so" in table.scope(["libtorch.so"])  # libtorch.so pulls in libtorch_cuda
    assert "libtorch_cuda.so" not in table.scope(["libtorch_cpu.so"])


def test_a_cuda_shim_without_libtorch_cuda_fails_audit_check_all(objects: dict[str, Path]) -> None:
    done = run_assemble("audit", "--check", "all", "--json", str(objects["bad"]))
    assert done.returncode == 1, done.stderr
    [entry] = json.loads(done.stdout)["extensions"]
    assert entry["unresolved"] == {CUDA_SHIM: "libtorch_cuda.so"}
    assert entry["torch_abi"] == "STABLE"  # its ABI is stable; it just cannot load
    assert f"bad/ops.abi3.so imports {CUDA_SHIM} (from libtorch_cuda.so)" in done.stderr
    assert "link torch_cuda" in done.stderr
    assert run_assemble("audit", "--check", "torch", str(objects["bad"])).returncode == 1
    text = run_assemble("audit", "-v", str(objects["bad"]))
    assert text.returncode == 0 and "UNRESOLVED" in text.stdout and "libtorch_cuda.so" in text.stdout


def test_the_same_shim_with_libtorch_cuda_needed_passes(objects: dict[str, Path], torch_lib: Path) -> None:
    done = run_assemble("audit", "--check", "all", "--json", str(objects["good"]))
    assert done.returncode == 0, done.stderr
    [entry] = json.loads(done.stdout)["extensions"]
    assert entry["unresolved"] == {} and entry["needed"][:2] == ["libtorch_cuda.so", "libtorch_cpu.so"]
    # against the real CPU torch (its libtorch_cuda.so comes from the shipped table): same verdicts
    assert run_assemble("audit", "--check", "all", "--torch-lib", str(torch_lib), str(objects["good"])).returncode == 0
    real = run_assemble("audit", "--check", "all", "--json", "--torch-lib", str(torch_lib), str(objects["bad"]))
    assert (real.returncode == 1
            and json.loads(real.stdout)["extensions"][0]["unresolved"] == {CUDA_SHIM: "libtorch_cuda.so"})
    assert "torch 2.13.0+cpu libraries" in json.loads(real.stdout)["sources"]["torch_libraries"]


def test_the_build_gate_refuses_it(objects: dict[str, Path], torch_lib: Path) -> None:
    [report] = audit_paths([objects["bad"]], torch_lib=torch_lib)
    assert [f.verdict for f in findings(report, "all")] == [Verdict.UNRESOLVED]
    for wheel, member, failed in ((objects["bad"], "bad/ops.abi3.so", True),
                                  (objects["good"], "good/ops.abi3.so", False)):
        audits = _audit_wheel(wheel, {"dep": (member,)}, torch_lib)
        build = BuildReport(bundle="b", cuda="13.2", nvcc="13.2", cuda_origin="test", cuda_root=Path("/"),
                            torch="2.13.0", deps=[
            DepReport("dep", "c" * 40, "c" * 40, "k", 0, BuildOutcome.BUILT, 0.0, [], "2.10", None, None)])
        error = _gate(build, audits, ())
        if failed:
            assert isinstance(error, CheckFailed) and str(build.deps[0].verdict) == "UNRESOLVED"
            assert f"{member} is UNRESOLVED: {CUDA_SHIM} (libtorch_cuda.so)" in error.message
        else:
            assert error is None and str(build.deps[0].verdict) == "STABLE"


# --- every other import: a kernel unit left out of the build (audit.loadscope) ---------------

KERNEL_CALLER = """\
#include <Python.h>
namespace kern { void run_kernel(int size); }  // defined in kernel.cpp, a unit this build left out
extern "C" int aoti_torch_get_device_type(void* tensor, int* type);
extern "C" int launch(int size) {
  int type;
  aoti_torch_get_device_type(nullptr, &type);
  kern::run_kernel(size);
  return type;
}
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ops", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit_ops(void) { return PyModule_Create(&module); }
"""
KERNEL = "namespace kern { void run_kernel(int size) { (void)size; } }\n"
KERNEL_SYMBOL = "_ZN4kern10run_kernelEi"


@pytest.fixture(scope="module")
def kernel_objects(tmp_path_factory: pytest.TempPathFactory, torch_lib: Path) -> dict[str, Path]:
    """"lost": the caller alone (the kernel unit left out); "sibling": it needs libkern.so, which
    defines the kernel, from a directory the dynamic linker does not search."""
    out = tmp_path_factory.mktemp("kernels")
    (out / "ops.cpp").write_text(KERNEL_CALLER)
    (out / "kernel.cpp").write_text(KERNEL)
    siblings = out / "siblings"
    siblings.mkdir()
    subprocess.run(["g++", "-shared", "-fPIC", "-Wl,-soname,libkern.so", str(out / "kernel.cpp"), "-o",
                    str(siblings / "libkern.so")],
                   check=True, capture_output=True)
    cxx = ["g++", "-shared", "-fPIC", "-O1", "-DPy_LIMITED_API=0x03090000", f"-I{sysconfig.get_paths()['include']}",
           str(out / "ops.cpp")]
    lost, linked = out / "lost" / "ops.abi3.so", out / "linked" / "ops.abi3.so"
    lost.parent.mkdir()
    linked.parent.mkdir()
    subprocess.run([*cxx, "-o", str(lost), f"-L{torch_lib}", "-Wl,--no-as-needed", "-ltorch_cpu"], check=True,
                   capture_output=True)
    subprocess.run([*cxx, "-o", str(linked), f"-L{siblings}", f"-L{torch_lib}", "-Wl,--no-as-needed", "-lkern",
                    "-ltorch_cpu"],
                   check=True, capture_output=True)
    return {
        "lost": make_wheel(out / "lost-1.0-cp39-abi3-linux_x86_64.whl", {"lost/ops.abi3.so": lost}),
        "linked": make_wheel(out / "linked-1.0-cp39-abi3-linux_x86_64.whl", {"linked/ops.abi3.so": linked}),
        "siblings": siblings,
    }


def test_an_import_no_library_of_the_tree_defines_is_unresolved(kernel_objects: dict[str, Path],
                                                                torch_lib: Path) -> None:
    """Against a real torch/lib every library of the tree is known: the left-out kernel is named,
    and libstdc++'s, libc's and torch's own imports are found (nothing else is listed)."""
    done = run_assemble("audit", "--check", "all", "--json", "--torch-lib", str(torch_lib), str(kernel_objects["lost"]))
    assert done.returncode == 1, done.stderr
    [entry] = json.loads(done.stdout)["extensions"]
    assert entry["unresolved"] == {KERNEL_SYMBOL: "no library of its load scope"} and "unjudged_imports" not in entry
    assert entry["torch_abi"] == "STABLE"
    assert ("lost/ops.abi3.so imports kern::run_kernel(int), which no library of its DT_NEEDED tree"
            in done.stderr), done.stderr
    [report] = audit_paths([kernel_objects["lost"]], torch_lib=torch_lib)
    assert [f.verdict for f in findings(report, "all")] == [Verdict.UNRESOLVED]


def test_without_every_library_of_the_tree_nothing_is_claimed(kernel_objects: dict[str, Path], torch_lib: Path) -> None:
    # the shipped table has torch's shim symbols only: the kernel is not judged, and the report says why
    bare = run_assemble("audit", "--check", "all", "--json", str(kernel_objects["lost"]))
    assert bare.returncode == 0, bare.stderr
    [entry] = json.loads(bare.stdout)["extensions"]
    assert entry["unresolved"] == {} and "only its shim symbols are known" in entry["unjudged_imports"]
    # libkern.so is not where the linker looks: unjudged, not UNRESOLVED
    done = run_assemble("audit", "--check", "all", "--json", "--torch-lib", str(torch_lib),
                        str(kernel_objects["linked"]))
    assert done.returncode == 0, done.stderr
    [entry] = json.loads(done.stdout)["extensions"]
    assert entry["unresolved"] == {} and entry["unjudged_imports"] == "libkern.so is not on this machine"
    # where it is found (the build passes its toolkit's lib directories so), the kernel resolves
    [report] = audit_paths([kernel_objects["linked"]], torch_lib=torch_lib, library_dirs=[kernel_objects["siblings"]])
    assert report.extensions[0].unresolved == {} and report.extensions[0].unjudged_imports is None
    assert findings(report, "all") == []


def test_the_build_gate_refuses_a_left_out_kernel(kernel_objects: dict[str, Path], torch_lib: Path) -> None:
    audits = _audit_wheel(kernel_objects["lost"], {"dep": ("lost/ops.abi3.so",)}, torch_lib)
    build = BuildReport(bundle="b", cuda="13.2", nvcc="13.2", cuda_origin="test", cuda_root=Path("/"), torch="2.13.0",
                        deps=[
        DepReport("dep", "c" * 40, "c" * 40, "k", 0, BuildOutcome.BUILT, 0.0, [], "2.10", None, None)])
    error = _gate(build, audits, ())
    assert isinstance(error, CheckFailed) and str(build.deps[0].verdict) == "UNRESOLVED"
    assert "lost/ops.abi3.so is UNRESOLVED: kern::run_kernel(int)" in error.message, error.message
    assert error.hint is not None and error.hint.startswith("link the library the finding names")
