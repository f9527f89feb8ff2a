"""Ship only what runs, on the backends that build a dependency's own build files: an
arch-specific target (9.0a) gets its SASS and no PTX, because its PTX can be JIT-compiled for
no other GPU family, unless the recipe says ``ptx = true``. The cmake backend spells it to the
dependency's CMake as ``90a-real`` (and, for a find_package(Torch) that ignores it, as
TORCH_CUDA_ARCH_LIST ``9.0a``); the setuptools backend as torch's ``9.0a`` (``9.0a+PTX`` when
asked). Built for real with nvcc; the device code is read back from the modules'
``.nv_fatbin`` (the audit's own reader, checked against the cubins' ELF headers in test_size)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from assembler.audit.member import FileSource
from assembler.builder.recipe import cmake_archs, torch_arch_list
from assembler.builder.units import compile_commands_path
from assembler.errors import ManifestError
from assembler.manifest import load_manifest
from assembler.toolchain.cuda import select_cuda
from assembler.toolchain.driver import DRIVER_SONAME, driver_functions, driver_stub, toolkit_stub
from assembler.wheel.size import object_fatbin
from tests.build_support import HERMETIC_CUDA, assemble
from tests.gitrepo import Repo
from tests.test_backends import CUDA_MODULE, CUDA_SETUP, CUDA_SOURCE

pytestmark = pytest.mark.integration

# A dependency's own CMake build of a CUDA module, which leaves the architectures to
# CMAKE_CUDA_ARCHITECTURES as most CMake projects do.
KERN_CMAKE = """cmake_minimum_required(VERSION 3.26)
project(kern LANGUAGES CXX CUDA)
find_package(CUDAToolkit REQUIRED)
add_library(_kern_C MODULE csrc/kern.cu)
set_target_properties(_kern_C PROPERTIES PREFIX "" SUFFIX ".abi3.so" CUDA_RUNTIME_LIBRARY Shared)
target_link_libraries(_kern_C PRIVATE CUDA::cuda_driver)  # as vLLM's FlashAttention links it
install(TARGETS _kern_C LIBRARY DESTINATION kern)
# what find_package(Torch) on a CUDA torch would read for its gencode flags
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/arch_list.txt" "$ENV{TORCH_CUDA_ARCH_LIST}")
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/arch_list.txt" DESTINATION kern)
"""
KERN_SOURCE = """\
#include <cuda.h>
extern "C" int kern_driver_version() { int version = 0; cuDriverGetVersion(&version); return version; }
__global__ void scale(float* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
extern "C" void kern_scale(float* x, float s, int n) { scale<<<(n + 255) / 256, 256>>>(x, s, n); }
"""
MANIFEST = """\
[bundle]
name = "sass-bundle"
version = "1.0.0"
torch = "2.13.0"
cuda-archs = ["9.0a"]

[mirrors]
"https://git.invalid/" = "remotes/"

[deps.sassonly]
upstream = "https://git.invalid/kern"
commit = "{kern}"

[deps.sassonly.build]
cmake-dir = "."

[deps.withptx]
upstream = "https://git.invalid/kern"
commit = "{kern}"

[deps.withptx.build]
cmake-dir = "."
ptx = true

[deps.withptx.install]
"kern/**" = "kern_ptx/"          # the same module as sassonly's, in its own place in the wheel

[deps.cprobe]
upstream = "https://git.invalid/cprobe"
commit = "{cprobe}"

[deps.cprobe.build]
backend = "setuptools"
sources = ["csrc/*.cu", "csrc/*.cpp"]
ptx = true

[deps.cprobe.install]
"cprobe/**" = "cprobe_bundle/"
"""


def _device_code(module: Path) -> set[tuple[str, str]]:
    fatbin = object_fatbin(FileSource(str(module), module.name))
    assert fatbin is not None, module
    return {(arch.kind, arch.arch) for arch in fatbin.archs}


def test_own_build_files_ship_sass_only_for_arch_specific_targets_unless_ptx(tmp_path: Path,
                                                                             private_cache: Path) -> None:
    ws = tmp_path / "ws"
    kern = Repo(ws / "remotes" / "kern").commit("kern", {"CMakeLists.txt": KERN_CMAKE, "csrc/kern.cu": KERN_SOURCE})
    cprobe = Repo(ws / "remotes" / "cprobe").commit("cuda probe", {
        "setup.py": CUDA_SETUP, "csrc/ones.cu": CUDA_SOURCE, "csrc/module.cpp": CUDA_MODULE,
        "cprobe/__init__.py": "import torch\nfrom . import _cprobe_C\n",
    })
    (ws / "deps.toml").write_text(MANIFEST.format(kern=kern, cprobe=cprobe))
    result = assemble("-C", str(ws), "build", "--cuda", HERMETIC_CUDA, "-j", "2", "--json", cache=private_cache)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout)
    artifacts = Path(report["artifacts"])
    assert ({d["dep"]: d["status"] for d in report["deps"]}
            == {"sassonly": "built", "withptx": "built", "cprobe": "built"})
    # the same source and pin, two recipes: two keys, and the PTX only where it was asked for
    assert _device_code(artifacts / "sassonly" / "files" / "kern" / "_kern_C.abi3.so") == {("cubin", "sm_90a")}
    assert (_device_code(artifacts / "withptx" / "files" / "kern" / "_kern_C.abi3.so")
            == {("cubin", "sm_90a"), ("ptx", "compute_90a")})
    # CUDA::cuda_driver links although NVIDIA's wheels ship no libcuda.so stub; the module needs the real driver
    needed = subprocess.run(["readelf", "-d", artifacts / "sassonly" / "files" / "kern" / "_kern_C.abi3.so"],
                            capture_output=True, text=True, check=True).stdout
    assert "[libcuda.so.1]" in needed, needed
    # torch's CMake ignores CMAKE_CUDA_ARCHITECTURES and reads TORCH_CUDA_ARCH_LIST: it gets the same archs
    assert (artifacts / "sassonly" / "files" / "kern" / "arch_list.txt").read_text() == "9.0a"
    assert (artifacts / "withptx" / "files" / "kern" / "arch_list.txt").read_text() == "9.0a+PTX"
    assert (_device_code(artifacts / "cprobe" / "files" / "cprobe" / "_cprobe_C.abi3.so")
            == {("cubin", "sm_90a"), ("ptx", "compute_90a")})
    compdb = json.loads(compile_commands_path(ws / ".assemble", "cprobe").read_text())
    (ones,) = [entry["arguments"] for entry in compdb if entry["file"].endswith("ones.cu")]
    assert "-gencode=arch=compute_90a,code=compute_90a" in ones  # torch's spelling of 9.0a+PTX


def test_arch_spellings_follow_ptx() -> None:
    archs = ("8.0", "9.0a", "10.0f")
    assert cmake_archs(archs) == "80;90a;100f"  # the helper's spelling: it decides per extension
    assert cmake_archs(archs, sass_only=True) == "80;90a-real;100f-real"  # plain 8.0 keeps SASS and PTX
    assert torch_arch_list(archs, ptx=False) == "8.0;9.0a;10.0f"
    assert torch_arch_list(archs, ptx=True) == "8.0;9.0a+PTX;10.0f+PTX"


@pytest.mark.parametrize(("build", "complaint", "hint"), [
    ('cmake-dir = "."\nptx = "yes"\n', "ptx: expected true or false, got 'yes'", "ptx = true"),
    ('ptx = true\n[[deps.d.build.extensions]]\nname = "_d_C"\nsources = ["d.cu"]\nlanguage = "cuda"\n',
     "the helper backend asks for PTX per extension", "[[deps.d.build.extensions]]"),
])
def test_recipe_level_ptx_is_checked(tmp_path: Path, build: str, complaint: str, hint: str) -> None:
    (tmp_path / "deps.toml").write_text(
        '[bundle]\nname = "b"\nversion = "1.0.0"\n\n[deps.d]\nupstream = "https://git.invalid/d"\n'
        f'commit = "{"a" * 40}"\n\n[deps.d.build]\n{build}')
    with pytest.raises(ManifestError) as error:
        load_manifest(tmp_path / "deps.toml")
    assert complaint in error.value.message and "deps.toml:" in error.value.message
    assert hint in (error.value.hint or "")


DRIVER_USER = """\
#include <cuda.h>
int allocate(CUdeviceptr* p) { return cuMemAlloc(p, 16) == CUDA_SUCCESS; }  /* cuMemAlloc_v2 by cuda.h's macro */
int copy(CUdeviceptr d, const void* h, CUstream s) { return cuMemcpyHtoDAsync(d, h, 16, s); }
"""


def test_the_driver_stub_defines_what_cuda_h_calls_so_the_link_keeps_the_driver(tmp_path: Path,
                                                                                toolchains: Path) -> None:
    root = select_cuda(HERMETIC_CUDA).root
    assert toolkit_stub(root) is None  # NVIDIA's wheels: no lib64/stubs/libcuda.so, hence the stub
    names = driver_functions(root, "c++")
    assert ({"cuInit", "cuMemAlloc_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz", "cuTensorMapEncodeTiled"}
            <= set(names))
    stub = driver_stub(root, tmp_path / "driver", "c++")
    assert (f"[{DRIVER_SONAME}]"
            in subprocess.run(["readelf", "-d", stub], capture_output=True, text=True, check=True).stdout)
    (tmp_path / "user.c").write_text(DRIVER_USER)
    module = tmp_path / "user.so"
    for defines in ((), ("-DCUDA_API_PER_THREAD_DEFAULT_STREAM",)):
        # --as-needed drops a library that defines none of the calls: an empty stand-in would lose DT_NEEDED
        subprocess.run(["c++", "-shared", "-fPIC", "-x", "c", *defines, "-I", root / "include", tmp_path / "user.c",
                        "-Wl,--as-needed", "-Wl,--no-undefined", "-L", stub.parent, "-lcuda", "-o", module], check=True)
        assert (f"[{DRIVER_SONAME}]"
                in subprocess.run(["readelf", "-d", module], capture_output=True, text=True, check=True).stdout)
