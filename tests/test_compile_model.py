"""One compile model for `check` and `build` (builder.units): real nvcc 13.2 (with the curand
component from NVIDIA's wheels), the torch build venv, CMake and g++ on repositories made here.

- A CUDA extension whose C++ unit includes cuda_fp16.h and curand.h, and whose .cu needs
  --expt-relaxed-constexpr, builds from the recipe alone; `check` calls both units CLEAN,
  the build's compile commands are the model's, it links libtorch_cuda and ships no PTX.
- An unmigrated unit (#include <torch/python.h>) fails check and build alike, at its line.
- A unit that reads /dev/zero is INCOMPLETE within its memory limit.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from assembler.audit.gate import Verdict
from assembler.builder import builder, units
from assembler.builder.header_diagnostics import first_failure
from assembler.builder.pipeline import BuildFailed, BuildOptions, build_artifacts
from assembler.builder.units import compile_commands_path
from assembler.check.run import CheckOptions, run_check
from assembler.check.unit_scan import Limits
from assembler.toolchain.cuda import select_cuda
from assembler.toolchain.torchenv import ensure_build_env
from assembler.workspace import open_workspace
from tests.build_support import BUILD_TORCH, HERMETIC_CUDA
from tests.conftest import run_assemble
from tests.gitrepo import Repo

pytestmark = pytest.mark.integration

HOST = """\
#include <cuda_fp16.h>
#include <curand.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

static_assert(sizeof(__half) == 2, "cuda_fp16.h from the toolkit");
static_assert(CURAND_STATUS_SUCCESS == 0, "curand.h from the curand component");

torch::stable::Tensor twice_cuda(const torch::stable::Tensor& x);

STABLE_TORCH_LIBRARY(cudakern, m) { m.def("twice(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(cudakern, CUDA, m) { m.impl("twice", TORCH_BOX(&twice_cuda)); }
"""
KERNEL = """\
#include <cuda_runtime.h>
#include <curand_kernel.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

constexpr float twice_of(float x) { return 2 * x; }  // a host constexpr: device code needs --expt-relaxed-constexpr

__global__ void twice_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = twice_of(x[i]);
}

torch::stable::Tensor twice_cuda(const torch::stable::Tensor& x) {
  torch::stable::Tensor in = torch::stable::contiguous(x);
  torch::stable::Tensor out = torch::stable::empty_like(in);
  void* stream = nullptr;
  aoti_torch_get_current_cuda_stream(in.get_device_index(), &stream);
  int64_t n = in.numel();
  twice_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      in.const_data_ptr<float>(), out.mutable_data_ptr<float>(), n);
  return out;
}
"""
LEGACY_OPS = """\
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY(legacy, m) { m.def("noop(Tensor x) -> Tensor"); }
"""
LEGACY_PYBIND = """\
// The old registration, not yet migrated: torch/python.h lives in the C++ API's include root,
// which the build must have on its path as check has, so that torch's own guard fires.
#include <torch/csrc/stable/library.h>



#include <torch/python.h>

int legacy_marker() { return 0; }
"""
ZERO = '#include "/dev/zero"\nint zero_marker;\n'
MANIFEST = """[bundle]
name = "compile-model"
version = "1.0.0"
python-abi = "3.9"
torch = "2.13.0"
cuda-archs = ["9.0a"]

[mirrors]
"https://git.invalid/" = "remotes/"

[deps.cudakern]
upstream = "https://git.invalid/cudakern"
commit = "{cudakern}"
cuda-components = ["curand"]    # curand.h, curand_kernel.h: not in the base toolkit

[deps.cudakern.build]
python-packages = ["cudakern"]

[[deps.cudakern.build.extensions]]
name = "_cudakern_C"
sources = ["csrc/host.cpp", "csrc/kern.cu"]
language = "cuda"
cuda-flags = ["--expt-relaxed-constexpr"]

[deps.legacy]
upstream = "https://git.invalid/legacy"
commit = "{legacy}"

[deps.legacy.build]
[[deps.legacy.build.extensions]]
name = "_legacy_C"
sources = ["csrc/ops.cpp", "csrc/pybind.cpp"]

[deps.zero]
upstream = "https://git.invalid/zero"
commit = "{zero}"

[deps.zero.build]
[[deps.zero.build.extensions]]
name = "_zero_C"
sources = ["csrc/zero.cpp"]
"""


@pytest.fixture(name="model_ws")
def model_ws_fixture(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    commits = {
        "cudakern": Repo(ws / "remotes" / "cudakern").commit("kernels", {
            "csrc/host.cpp": HOST, "csrc/kern.cu": KERNEL, "cudakern/__init__.py": "from . import _cudakern_C\n"}),
        "legacy": Repo(ws / "remotes" / "legacy").commit("ops", {"csrc/ops.cpp": LEGACY_OPS,
                                                                 "csrc/pybind.cpp": LEGACY_PYBIND}),
        "zero": Repo(ws / "remotes" / "zero").commit("zero", {"csrc/zero.cpp": ZERO}),
    }
    (ws / "deps.toml").write_text(MANIFEST.format(**commits))
    return ws


def _isystem(arguments: list[str]) -> list[str]:
    return [arguments[i + 1] for i, token in enumerate(arguments[:-1]) if token == "-isystem"]


def test_check_and_build_share_one_compile_model(model_ws: Path, private_cache: Path) -> None:
    workspace = open_workspace(model_ws)
    checked = run_check(workspace, [],
                        CheckOptions(cuda=HERMETIC_CUDA, jobs=2, limits=Limits(seconds=120, memory=512 << 20)))
    by_dep = {dep.dep: dep for dep in checked.deps}
    assert all(dep.error is None for dep in checked.deps), [dep.error for dep in checked.deps]
    # the component's headers and the toolkit's are found by check: both units CLEAN
    assert {unit.source: unit.verdict for unit in by_dep["cudakern"].units} == {
        "csrc/host.cpp": Verdict.CLEAN, "csrc/kern.cu": Verdict.CLEAN}, [u.to_json() for u in by_dep["cudakern"].units]
    legacy = {unit.source: unit for unit in by_dep["legacy"].units}
    assert legacy["csrc/pybind.cpp"].verdict == Verdict.UNSTABLE
    assert [item["header"] for item in legacy["csrc/pybind.cpp"].unstable] == ["torch/python.h"]
    zero = by_dep["zero"].units[0]
    assert (zero.verdict == Verdict.INCOMPLETE
            and any("memory limit of 512 MiB" in error for error in zero.errors)), zero.errors

    # the same recipe builds: cuda_fp16.h and curand.h for the C++ unit, --expt-relaxed-constexpr for the .cu
    report = build_artifacts(workspace, BuildOptions(cuda=HERMETIC_CUDA, only=("cudakern",)))
    (dep,) = report.deps
    assert dep.status == "built" and dep.cuda_components == ["curand"]
    record = json.loads((dep.artifact / "artifact.json").read_text())  # type: ignore[operator]
    assert record["toolchain"]["cuda_components"] == "curand"
    assert "nvidia-curand==" in record["toolchain"]["cuda_packages"]
    module = next((dep.artifact / "files").rglob("_cudakern_C*.so"))  # type: ignore[operator]
    needed = subprocess.run(["readelf", "-d", module], capture_output=True, text=True, check=True).stdout
    assert "[libtorch_cuda.so]" in needed  # every CUDA extension links the CUDA half of the shim
    from assembler.audit.member import FileSource
    from assembler.wheel.size import object_fatbin

    fatbin = object_fatbin(FileSource(str(module), module.name))
    assert fatbin is not None
    assert {(arch.kind, arch.arch) for arch in fatbin.archs} == {("cubin", "sm_90a")}  # SASS only for 9.0a

    # the build ran the model's commands: standard, flags and system include dirs per unit, in order
    compdb = {Path(entry["file"]).name: entry["arguments"] for entry in json.loads(
        compile_commands_path(model_ws / ".assemble", "cudakern").read_text())}
    roots = {units.TORCH_ROOT: ensure_build_env(BUILD_TORCH).torch_dir,
             units.CUDA_ROOT: select_cuda(HERMETIC_CUDA, components=("curand",)).root}
    unit_list = units.translation_units(workspace, workspace.manifest.deps["cudakern"])
    assert [unit.source for unit in unit_list] == ["csrc/host.cpp", "csrc/kern.cu"]
    for unit in unit_list:
        arguments = compdb[unit.path.name]
        assert f"-std={unit.std}" in arguments, (unit.source, arguments)
        assert all(flag in arguments for flag in unit.flags), (unit.source, arguments)
        model = [(roots[root] / relative).resolve() for root, relative in unit.system_includes or ()
                 if (roots[root] / relative).is_dir()]
        built = [Path(directory).resolve() for directory in _isystem(arguments)]
        assert [directory for directory in built if directory in model] == model, (unit.source, built, model)
    # CUDA 13 keeps CCCL there
    assert any(path.name == "cccl" for path in Path(roots[units.CUDA_ROOT] / "include").iterdir())


def test_an_unmigrated_unit_fails_the_build_at_its_line(model_ws: Path, private_cache: Path) -> None:
    workspace = open_workspace(model_ws)
    with pytest.raises(BuildFailed) as failure:
        build_artifacts(workspace, BuildOptions(cuda=HERMETIC_CUDA, only=("legacy",)))
    assert failure.value.exit_code == 6
    assert failure.value.message == "dep legacy still includes <torch/python.h> from csrc/pybind.cpp:7"
    assert ("This file should not be included when either TORCH_STABLE_ONLY or TORCH_TARGET_VERSION is defined"
            in (failure.value.hint or ""))
    summary = builder.format_failure(failure.value.failed[0])
    assert summary.startswith("dep legacy still includes <torch/python.h> from csrc/pybind.cpp:7\ntorch: This file")


def test_a_refused_unit_is_not_a_compiler_cache_failure(model_ws: Path, private_cache: Path) -> None:
    """sccache counts a unit whose preprocessor failed (the guard's #error) as a "cache error";
    the build's failure explains it, so no compiler-cache warning is printed for it."""
    done = run_assemble("build", "--cuda", HERMETIC_CUDA, "--only", "legacy", "--partial", cwd=model_ws)
    assert done.returncode == 6, done.stderr
    assert "error: dep legacy still includes <torch/python.h> from csrc/pybind.cpp:7" in done.stderr
    assert "the compiler cache failed" not in done.stderr, done.stderr


def test_a_missing_include_dir_is_refused_at_its_line_by_build_as_by_check(model_ws: Path, private_cache: Path) -> None:
    manifest = model_ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace('sources = ["csrc/zero.cpp"]',
                                                     'sources = ["csrc/zero.cpp"]\ninclude-dirs = ["csrc/missing"]'))
    line = next(n for n, text in enumerate(manifest.read_text().splitlines(), 1) if "csrc/missing" in text)
    for command in (("check", "zero", "--cuda", HERMETIC_CUDA), ("build", "--cuda", HERMETIC_CUDA, "--only", "zero")):
        done = run_assemble(*command, cwd=model_ws)
        assert done.returncode == 2, (command, done.stderr)
        assert (f"deps.toml:{line}:" in done.stderr
                and "include dir csrc/missing is not a directory" in done.stderr), done.stderr
        assert "Traceback" not in done.stderr


NINJA_LOG = """\
[1/3] Building CXX object CMakeFiles/_k.dir/csrc/a.cpp.o
FAILED: CMakeFiles/_k.dir/csrc/a.cpp.o
/usr/bin/c++ -DUSE_CUDA -isystem /t/include -std=gnu++17 -o CMakeFiles/_k.dir/csrc/a.cpp.o -c /src/csrc/a.cpp
/src/csrc/a.cpp:8:10: fatal error: cuda_fp16.h: No such file or directory
    8 | #include <cuda_fp16.h>
      |          ^~~~~~~~~~~~~
compilation terminated.
[2/3] Building CUDA object CMakeFiles/_k.dir/csrc/b.cu.o
/src/csrc/b.cu(3): warning #20012-D: something unrelated
ninja: build stopped: subcommand failed.
"""


def test_first_failure_names_the_command_and_its_first_error() -> None:
    found = first_failure(NINJA_LOG)
    assert found is not None
    assert (found.command is not None and found.command.startswith("/usr/bin/c++ -DUSE_CUDA")
            and found.command.endswith("/src/csrc/a.cpp"))
    assert found.error == ("/src/csrc/a.cpp:8:10: fatal error: cuda_fp16.h: No such file or directory\n"
                           "    8 | #include <cuda_fp16.h>\n      |          ^~~~~~~~~~~~~")
    assert first_failure("-- Configuring done\nCMake Error at CMakeLists.txt:3 (add_library):\n  bad\n") == \
        type(found)(None, "CMake Error at CMakeLists.txt:3 (add_library):\n  bad")  # the message, not only where
    # a real configure failure (vLLM's FlashAttention CMakeLists on a CPU-only torch): the why, not only the line
    configure = ("CMake Error at forks/fa/CMakeLists.txt:101 (message):\n  Can't find CUDA or HIP installation.\n\n\n"
                 "-- Configuring incomplete, errors occurred!\n")
    assert first_failure(configure) == type(found)(
        None, "CMake Error at forks/fa/CMakeLists.txt:101 (message):\n  Can't find CUDA or HIP installation.")
