"""The setuptools backend keeps libtorch_cuda in a CUDA module's DT_NEEDED whatever the compiler's
default (issue 28, item 2): FlashKDA's module came out without it (built on a CPU torch, where
libtorch_cuda is a soname stand-in that satisfies no symbol, by a gcc that links --as-needed),
so it could not load. A real setup.py with a CUDAExtension and a CppExtension is built by the
real backend on the CPU torch 2.13 build environment, with a g++ that links --as-needed first
(as Debian's and Ubuntu's do by default), and the modules' DT_NEEDED are read with the audit's
own ELF reader."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from assembler.audit.elf import DynamicInfo, read_dynamic
from assembler.audit.member import FileSource
from tests.build_support import HERMETIC_CUDA, assemble
from tests.gitrepo import Repo

pytestmark = pytest.mark.integration

SETUP = '''\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

setup(
    name="linkprobe",
    version="1.0",
    packages=["linkprobe"],
    ext_modules=[
        CUDAExtension("linkprobe._cuda_C", ["csrc/fill.cu", "csrc/stream.cpp"], py_limited_api=True),
        CppExtension("linkprobe._cpu_C", ["csrc/cpu.cpp"], py_limited_api=True),
    ],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
'''
FILL = """\
__global__ void fill_one(float* out, long n) {
  long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 1.0f;
}
void launch_fill(float* out, long n, void* stream) {
  fill_one<<<static_cast<unsigned>((n + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(out, n);
}
"""
# The Stable ABI's CUDA half: aoti_torch_get_current_cuda_stream is defined in libtorch_cuda only.
STREAM = """\
#include <Python.h>
#ifndef USE_CUDA
#define USE_CUDA
#endif
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

void launch_fill(float* out, long n, void* stream);

extern "C" int fill_on_current_stream(float* out, long n, int device) {
  void* stream = nullptr;
  if (aoti_torch_get_current_cuda_stream(device, &stream) != AOTI_TORCH_SUCCESS) return 1;
  launch_fill(out, n, stream);
  return 0;
}

extern "C" PyObject* PyInit__cuda_C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cuda_C", nullptr, -1,
                               nullptr, nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module);
}
"""
CPU = """\
#include <Python.h>
#include <stdlib.h>
extern "C" PyObject* PyInit__cpu_C(void) {
  if (getenv("LINKPROBE_REFUSE")) return nullptr;  // a libc call: auditwheel tells the libc from it
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu_C", nullptr, -1,
                               nullptr, nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module);
}
"""
MANIFEST = """\
[bundle]
name = "linkprobe-bundle"
version = "1.0.0"
torch = "2.13.0"
cuda-archs = ["9.0a"]

[mirrors]
"https://git.invalid/" = "remotes/"

[deps.linkprobe]
upstream = "https://git.invalid/linkprobe"
commit = "{commit}"

[deps.linkprobe.build]
backend = "setuptools"
sources = ["csrc/*.cu", "csrc/*.cpp"]

[deps.linkprobe.install]
"linkprobe/**" = "linkprobe_bundle/"
"""
# A g++ whose default is --as-needed, wherever the test runs: the flag first, as a distribution's
# specs put it before the command line's own arguments.
AS_NEEDED_GXX = """\
#!/bin/sh
exec {real} -Wl,--as-needed "$@"
"""


def dynamic(path: Path) -> DynamicInfo:
    source = FileSource(str(path), str(path))
    try:
        return read_dynamic(source)
    finally:
        source.close()


def as_needed_compiler(directory: Path) -> Path:
    """A directory holding ``g++`` (the driver distutils links C++ extensions with) that links
    --as-needed; checked: an unused library named on its command line is dropped."""
    real = shutil.which("g++")
    assert real is not None
    directory.mkdir()
    wrapper = directory / "g++"
    wrapper.write_text(AS_NEEDED_GXX.format(real=real))
    wrapper.chmod(0o755)
    (directory / "unused.c").write_text("int unused_symbol(void) { return 1; }\n")
    (directory / "user.c").write_text("int user(void) { return 2; }\n")
    subprocess.run([real, "-shared", "-fPIC", "-Wl,-soname,libunused.so", "unused.c", "-o", "libunused.so"],
                   cwd=directory, check=True, capture_output=True)
    subprocess.run([str(wrapper), "-shared", "-fPIC", "user.c", "-L.", "-lunused", "-o", "libuser.so"],
                   cwd=directory, check=True, capture_output=True)
    assert "libunused.so" not in dynamic(directory / "libuser.so").needed  # the wrapper really links --as-needed
    return directory


def test_a_cuda_module_keeps_libtorch_cuda_under_as_needed_and_a_cpu_module_gains_none(
    tmp_path: Path, private_cache: Path, build_env_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch_lib = next(build_env_path.glob("lib/python3*/site-packages/torch/lib"))
    assert not (torch_lib / "libtorch_cuda.so").exists()  # a CPU torch: libtorch_cuda is a stand-in here
    compilers = as_needed_compiler(tmp_path / "as-needed")
    monkeypatch.setenv("PATH", f"{compilers}{os.pathsep}{os.environ['PATH']}")
    upstream = Repo(tmp_path / "ws" / "remotes" / "linkprobe")
    commit = upstream.commit("link probe", {
        "setup.py": SETUP, "csrc/fill.cu": FILL, "csrc/stream.cpp": STREAM, "csrc/cpu.cpp": CPU,
        "linkprobe/__init__.py": "",
    })
    (tmp_path / "ws" / "deps.toml").write_text(MANIFEST.format(commit=commit))

    result = assemble("-C", str(tmp_path / "ws"), "build", "--cuda", HERMETIC_CUDA, "-j", "2", "--json",
                      cache=private_cache)

    assert result.returncode == 0, result.stderr[-4000:]
    [dep] = json.loads(result.stdout)["deps"]
    assert dep["status"] == "built", dep
    files = Path(json.loads(result.stdout)["artifacts"]) / "linkprobe" / "files" / "linkprobe"
    cuda_module, cpu_module = dynamic(files / "_cuda_C.abi3.so"), dynamic(files / "_cpu_C.abi3.so")
    undefined = {symbol.name for symbol in cuda_module.symbols if not symbol.defined}
    assert "aoti_torch_get_current_cuda_stream" in undefined  # what only libtorch_cuda defines
    assert "libtorch_cuda.so" in cuda_module.needed, cuda_module.needed
    assert "libcudart.so.13" in cuda_module.needed and "libtorch_cpu.so" in cpu_module.needed
    # the CPU module of the same setup.py names no CUDA library: it still loads on a CPU torch
    assert not {"libtorch_cuda.so", "libc10_cuda.so"} & set(cpu_module.needed), cpu_module.needed
