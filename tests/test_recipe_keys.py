"""The recipe keys of a helper extension (cxx-flags, cuda-flags, cxx-std, cuda-std, ptx,
libraries) and cuda-components: what they load as, how the compile model and the generated CMake
project use them, and a file:line error with a hint for each bad value. No compiler runs here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from assembler.builder import recipe, units
from assembler.errors import ManifestError
from assembler.manifest import load_manifest
from assembler.manifest.model import CUDA, CXX

HEAD = """[bundle]
name = "b"
version = "1.0.0"
cuda-archs = ["9.0a"]

[deps.kern]
upstream = "https://git.invalid/kern"
commit = "0123456789abcdef0123456789abcdef01234567"
"""
EXTENSION = """
[deps.kern.build]
[[deps.kern.build.extensions]]
name = "_k"
sources = ["csrc/a.cpp", "csrc/b.cu"]
language = "cuda"
"""


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "deps.toml"
    path.write_text(text)
    return load_manifest(path)


def test_keys_load_into_the_compile_model_and_the_generated_project(tmp_path: Path) -> None:
    manifest = _load(tmp_path, HEAD + 'cuda-components = ["nvrtc", "curand"]\n' + EXTENSION + (
        'cxx-flags = ["-fopenmp"]\ncuda-flags = ["--expt-relaxed-constexpr", "-Xptxas=-v"]\ncxx-std = 20\n'
        'libraries = ["cuda"]\n'))
    dep = manifest.deps["kern"]
    assert dep.cuda_components == ("curand", "nvrtc")
    ext = dep.build.extensions[0]
    cxx, cuda = units.helper_shape(dep, ext, CXX), units.helper_shape(dep, ext, CUDA)
    assert (cxx.std, cxx.flags) == ("gnu++20", ("-fopenmp",))
    assert (cuda.std, cuda.flags) == ("c++20", ("--expt-relaxed-constexpr", "-Xptxas=-v"))  # CUDA follows cxx-std
    # the C++ units of a CUDA extension see the toolkit's headers (cuda_fp16.h), .cu units nvcc's own
    assert cxx.system_includes == units.TORCH_INCLUDES + units.CUDA_INCLUDES
    assert cuda.system_includes == units.TORCH_INCLUDES
    assert "USE_CUDA" in cxx.defines and "USE_CUDA" in cuda.defines
    call = recipe.generate(dep, "3.9").cmakelists
    assert "CXX_STD 20" in call and "CUDA_STD 20" in call
    assert 'CXX_FLAGS "-fopenmp"' in call and 'CUDA_FLAGS "--expt-relaxed-constexpr" "-Xptxas=-v"' in call
    assert ('"${ASSEMBLER_CUDA_HOME}/include"' in call
            and '"${ASSEMBLER_TORCH_DIR}/include/torch/csrc/api/include"' in call)
    assert "  PTX" not in call  # arch-specific targets ship SASS only unless ptx = true


def test_cuda_std_overrides_and_ptx_is_asked_for(tmp_path: Path) -> None:
    dep = _load(tmp_path, HEAD + EXTENSION + 'cxx-std = "23"\ncuda-std = "c++20"\nptx = true\n').deps["kern"]
    ext = dep.build.extensions[0]
    assert units.helper_standards(dep, ext) == ("23", "20")
    assert "  PTX" in recipe.generate(dep, "3.9").cmakelists


def test_bundle_components_reach_every_dependency(tmp_path: Path) -> None:
    text = HEAD.replace('cuda-archs = ["9.0a"]',
                        'cuda-archs = ["9.0a"]\ncuda-components = ["cublas"]') + 'cuda-components = ["curand"]\n'
    assert _load(tmp_path, text).deps["kern"].cuda_components == ("cublas", "curand")


BAD = [
    ("output flag", EXTENSION + 'cuda-flags = ["-o"]\n', "changes what the build runs or writes", "cuda-flags"),
    ("std as a flag", EXTENSION + 'cxx-flags = ["-std=c++20"]\n', "is what cxx-std / cuda-std says", "cxx-flags"),
    ("define as a flag", EXTENSION + 'cxx-flags = ["-DX=1"]\n', "is what defines says", "cxx-flags"),
    ("arch as a flag", EXTENSION + 'cuda-flags = ["-gencode=arch=compute_90a,code=sm_90a"]\n', "cuda-archs",
     "cuda-flags"),
    ("split flag", EXTENSION + 'cuda-flags = ["-Xptxas", "-v"]\n', "needs its value in the same string", "cuda-flags"),
    ("two options in one", EXTENSION + 'cxx-flags = ["-O3 -g"]\n', "is not one compiler option", "cxx-flags"),
    ("response file", EXTENSION + 'cxx-flags = ["@/etc/passwd"]\n', "is not one compiler option", "cxx-flags"),
    ("plugin", EXTENSION + 'cxx-flags = ["-fplugin=/tmp/x.so"]\n', "changes what the build runs", "cxx-flags"),
    ("bad standard", EXTENSION + "cxx-std = 14\n", "is not a C++ standard", "cxx-std"),
    ("nvcc has no C++23", EXTENSION + "cxx-std = 23\n", "nvcc knows no C++23", "cxx-std"),
    ("cuda key on a C++ extension",
     EXTENSION.replace('language = "cuda"', 'language = "cxx"').replace('"csrc/b.cu"', '"csrc/b.cpp"')
     + 'cuda-flags = ["-lineinfo"]\n', "is not a CUDA extension", "cuda-flags"),
    ("ptx not a bool", EXTENSION + 'ptx = "yes"\n', "expected true or false", "ptx"),
    ("library path", EXTENSION + 'libraries = ["/usr/lib/libx.so"]\n', "is not a library name", "libraries"),
    ("unknown component", 'cuda-components = ["curnad"]\n', "did you mean 'curand'", "cuda-components"),
    ("base component", 'cuda-components = ["nvcc"]\n', "part of every toolkit already", "cuda-components"),
]


@pytest.mark.parametrize(("description", "tail", "fragment", "key"), BAD, ids=[b[0] for b in BAD])
def test_bad_recipe_keys_name_their_line(tmp_path: Path, description: str, tail: str, fragment: str, key: str) -> None:
    text = HEAD + tail
    with pytest.raises(ManifestError) as error:
        _load(tmp_path, text)
    assert error.value.hint
    assert fragment in f"{error.value.message} {error.value.hint}", (description, error.value.message)
    match = re.match(rf"{re.escape(str(tmp_path / 'deps.toml'))}:(\d+):\d+: ", error.value.message)
    assert match, error.value.message
    assert text.splitlines()[int(match[1]) - 1].startswith(f"{key} ="), (description, error.value.message)


def test_flags_that_look_owned_but_are_not_are_accepted(tmp_path: Path) -> None:
    dep = _load(tmp_path,
                HEAD + EXTENSION + 'cuda-flags = ["-lineinfo", "--use_fast_math", "-Xcompiler=-fno-strict-aliasing"]\n'
                'cxx-flags = ["-march=x86-64-v3", "-Wno-unused"]\n').deps["kern"]
    assert dep.build.extensions[0].cuda_flags == ("-lineinfo", "--use_fast_math", "-Xcompiler=-fno-strict-aliasing")


def test_the_hermetic_toolkit_is_the_cuda_toolkit_wheel_with_its_extras() -> None:
    from assembler.toolchain import cuda

    assert (cuda.toolkit_requirement("13.2", ("curand", "nvrtc"))
            == "cuda-toolkit[nvcc,cccl,cudart,curand,nvrtc]==13.2.*")
    assert cuda.toolkit_dir_name("13.2", ()).startswith("cuda-13.2-")
    assert cuda.toolkit_dir_name("13.2", ("curand", "nvrtc")).endswith("-curand+nvrtc")
    assert cuda._minor_versions(["0.0.1", "12.8.0", "12.8.1", "12.9.2.0", "13.0.0"]) == ["12.8", "12.9", "13.0"]
    # NVIDIA's CUDA 12 nvcc wheels hold only ptxas: said as such, with what works instead
    error = cuda._no_nvcc("12.9", {"nvidia-cuda-nvcc-cu12": "12.9.86", "nvidia-cuda-runtime-cu12": "12.9.79"})
    assert "nvidia-cuda-nvcc-cu12 12.9.86 holds only ptxas" in error.message and "13.0" in (error.hint or "")
    from assembler.manifest.model import CUDA_COMPONENTS

    assert set(cuda.COMPONENT_FILES) == set(CUDA_COMPONENTS)  # every component a manifest names can be proven present
