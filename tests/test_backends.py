"""The build backends, for real: the setuptools backend builds a dependency's own setup.py
(torch.utils.cpp_extension) in the cached torch build environment with our settings injected,
into an abi3 artifact that audits STABLE; a setup.py that does not ask for abi3 is refused;
build-env is validated with file:line:col; every cmake/setuptools build leaves its compile
commands in the compile-commands record (builder.units.compile_commands_path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from assembler.audit import audit_paths
from assembler.builder.pipeline import BuildFailed, BuildOptions, build_artifacts
from assembler.builder.planner import plan_dep
from assembler.builder.units import compile_commands_path, translation_units
from assembler.errors import ManifestError
from assembler.manifest import load_manifest
from assembler.workspace import open_workspace
from tests.build_support import HERMETIC_CUDA, assemble, sharing_toolchains
from tests.gitrepo import Repo, git

pytestmark = pytest.mark.integration

PROBE_SETUP = '''\
"""Records the environment setup.py sees, then builds one abi3 torch extension."""
import json
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

SEEN = ("MAX_JOBS", "TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "CFLAGS", "CXXFLAGS", "NVCC_APPEND_FLAGS", "PROBE_FLAG",
        "CMAKE_ARGS")
with open(os.environ["PROBE_OUT"], "w") as out:
    json.dump({name: os.environ.get(name) for name in SEEN}, out)

setup(
    name="probe",
    version="1.0",
    packages=["probe"],
    ext_modules=[CppExtension("probe._probe_C", ["csrc/probe.cpp"], py_limited_api=True)],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
'''
PROBE_SOURCE = """\
#include <Python.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
#ifndef PROBE_DEFINE
#error "the recipe's defines must reach the compiler"
#endif

torch::stable::Tensor same(const torch::stable::Tensor& x) { return x; }

STABLE_TORCH_LIBRARY(probe, m) { m.def("same(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(probe, CPU, m) { m.impl("same", TORCH_BOX(&same)); }

extern "C" PyObject* PyInit__probe_C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_probe_C", nullptr, -1,
                               nullptr, nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module);
}
"""
PROBE_MANIFEST = """\
[bundle]
name = "probe-bundle"
version = "1.0.0"
torch = "2.13.0"

[mirrors]
"https://git.invalid/" = "remotes/"

[deps.probe]
upstream = "https://git.invalid/probe"
commit = "{commit}"

[deps.probe.build]
backend = "setuptools"
project-dir = "py"              # setup.py is not at the root
cuda-archs = ["9.0a", "10.0a"]  # nvcc takes part: TORCH_CUDA_ARCH_LIST, CUDA_HOME
defines = ["PROBE_DEFINE=1"]
build-env = {{ PROBE_FLAG = "on", PROBE_OUT = "{out}" }}

[deps.probe.install]
"probe/**" = "probe_bundle/"
"""


def _so_verdicts(path: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    [report] = audit_paths([path])
    return [(elf.path, elf.torch_abi, tuple(elf.abi3_violations)) for elf in report.extensions]


def test_setuptools_backend_builds_the_example_library_into_a_stable_abi3_artifact(
    example_ws: Path, private_cache: Path, build_env_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    workspace = open_workspace(example_ws)
    options = BuildOptions(cuda=HERMETIC_CUDA, only=("rowsum",), jobs=2)
    report = build_artifacts(workspace, options)
    [dep] = report.deps
    assert (dep.dep, dep.status, dep.archs) == ("rowsum", "built", [])  # a CPU library: no archs, no nvcc
    files = dep.artifact / "files"
    assert sorted(p.relative_to(files).as_posix() for p in files.rglob("*") if p.is_file()) == [
        "rowsum/_C.abi3.so", "rowsum/__init__.py",
    ]
    record = json.loads((dep.artifact / "artifact.json").read_text())
    assert record["backend"] == "setuptools" and record["dirty"] is False and len(record["patches"]) == 3
    assert record["toolchain"]["nvcc"] is None  # the key does not follow --cuda
    [(_, verdict, violations)] = _so_verdicts(files / "rowsum" / "_C.abi3.so")
    assert (verdict, violations) == ("STABLE", ())

    # the operator works (the wheel setup.py built, loaded by torch)
    probe = ("import sys, torch; sys.path.insert(0, sys.argv[1]); import rowsum; x = torch.randn(3, 5); "
             "torch.testing.assert_close(rowsum.row_sum(x), x.sum(dim=1))")
    subprocess.run([build_env_path / "bin" / "python", "-c", probe, files], check=True)

    # the compile commands, with our defines; the checkout stays clean (setuptools' build and
    # egg-info went to .assemble/), so the next build is a cache hit
    checkout = example_ws / "forks" / "rowsum"
    [entry] = json.loads(compile_commands_path(workspace.state_dir, "rowsum").read_text())
    assert Path(entry["file"]) == checkout / "csrc" / "rowsum.cpp"
    assert {"-DTORCH_TARGET_VERSION=0x020A000000000000", "-DPy_LIMITED_API=0x03090000"} <= set(entry["arguments"])
    assert git(checkout, "status", "--porcelain", "--untracked-files=all") == ""
    assert [d.status for d in build_artifacts(workspace, options).deps] == ["cached"]

    # built again elsewhere (another workspace path, an empty artifact store): the same bytes
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(example_ws, elsewhere, ignore=shutil.ignore_patterns("forks", ".assemble", "dist"))
    cache = sharing_toolchains(tmp_path / "cache2", private_cache)
    monkeypatch.setenv("ASSEMBLE_CACHE", str(cache))
    [again] = build_artifacts(open_workspace(elsewhere), options).deps
    assert again.status == "built" and again.key == dep.key
    assert (again.artifact / "files" / "rowsum" / "_C.abi3.so").read_bytes() == (
        files / "rowsum" / "_C.abi3.so").read_bytes()


def test_a_setup_py_that_does_not_ask_for_abi3_is_refused(example_ws: Path, private_cache: Path) -> None:
    # Only the source port: setup.py still builds a version-specific (cpython-311) module.
    series = example_ws / "patches" / "rowsum" / "series"
    lines = series.read_text().splitlines()
    for name in lines[2:]:
        (series.parent / name).unlink()
    series.write_text("\n".join(lines[:2]) + "\n")
    workspace = open_workspace(example_ws)
    with pytest.raises(BuildFailed) as failure:
        build_artifacts(workspace, BuildOptions(cuda=HERMETIC_CUDA, only=("rowsum",), jobs=2))
    message = failure.value.message
    assert "rowsum/_C.cpython-" in message and "is not an abi3 module" in message
    assert "py_limited_api=True" in message and '"py_limited_api": "cp39"' in message
    assert int(failure.value.exit_code) == 6


def test_a_project_dir_without_a_project_is_reported_at_its_manifest_line(example_ws: Path,
                                                                          private_cache: Path) -> None:
    """The setuptools backend's missing project is the same located error as any recipe path
    (units.RecipePathError): deps.toml:LINE:COL, the key, what is wrong, and the fix."""
    from assembler.builder.units import RecipePathError

    manifest = example_ws / "deps.toml"
    text = manifest.read_text()
    assert 'project-dir = "."' in text
    manifest.write_text(text.replace('project-dir = "."', 'project-dir = "csrc"', 1))
    line = next(number for number, row in enumerate(manifest.read_text().splitlines(), 1)
                if 'project-dir = "csrc"' in row)
    with pytest.raises(RecipePathError) as refused:
        build_artifacts(open_workspace(example_ws), BuildOptions(cuda=HERMETIC_CUDA, only=("rowsum",), jobs=2))
    message = refused.value.message
    assert message.startswith(f"{manifest}:{line}:") and "deps.rowsum.build.project-dir:" in message
    assert "csrc holds neither pyproject.toml nor setup.py" in message and int(refused.value.exit_code) == 2
    assert refused.value.hint is not None and "relative to the checkout" in refused.value.hint


def test_setuptools_backend_injects_our_settings_and_records_compile_commands(
    tmp_path: Path, private_cache: Path, build_env_path: Path,
) -> None:
    upstream = Repo(tmp_path / "ws" / "remotes" / "probe")
    commit = upstream.commit("probe", {
        "py/setup.py": PROBE_SETUP, "py/csrc/probe.cpp": PROBE_SOURCE,
        "py/probe/__init__.py": "import torch\nfrom . import _probe_C\n",
    })
    seen = tmp_path / "seen.json"
    ws = tmp_path / "ws"
    (ws / "deps.toml").write_text(PROBE_MANIFEST.format(commit=commit, out=seen))
    # what the user's shell may hold must not reach the build: ours replaces it
    leaky = {"CFLAGS": "-DUSER_LEAK", "TORCH_CUDA_ARCH_LIST": "5.0", "MAX_JOBS": "99", "CMAKE_ARGS": "-DX=1",
             "NVCC_APPEND_FLAGS": "-DUSER_LEAK"}
    env = {**os.environ, **leaky, "ASSEMBLE_CACHE": str(private_cache), "COLUMNS": "200"}
    command = [str(Path(os.sys.executable)), "-m", "assembler", "-C", str(ws), "build", "--cuda", HERMETIC_CUDA, "-j",
               "2", "--json"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout)
    assert [(d["dep"], d["status"], d["verdict"], d["archs"]) for d in report["deps"]] == [
        ("probe", "built", "STABLE", ["9.0a", "10.0a"])]

    env_seen = json.loads(seen.read_text())
    ours = {"-DTORCH_TARGET_VERSION=0x020A000000000000", "-DPy_LIMITED_API=0x03090000", "-DPROBE_DEFINE=1"}
    for name in ("CFLAGS", "CXXFLAGS", "NVCC_APPEND_FLAGS"):
        assert ours <= set(env_seen[name].split()) and "USER_LEAK" not in env_seen[name], (name, env_seen[name])
    assert env_seen["MAX_JOBS"] == "2" and env_seen["TORCH_CUDA_ARCH_LIST"] == "9.0a;10.0a"
    assert (env_seen["CUDA_HOME"] == report["cuda_root"] and env_seen["PROBE_FLAG"] == "on"
            and env_seen["CMAKE_ARGS"] is None)

    workspace = open_workspace(ws)
    checkout = ws / "forks" / "probe"
    assert git(checkout, "status", "--porcelain", "--untracked-files=all") == ""
    # no sources in the recipe: check and the plan take the units from the build's compile commands
    dep = workspace.manifest.deps["probe"]
    [unit] = translation_units(workspace, dep, checkout)
    assert (unit.source, unit.language, unit.origin) == ("py/csrc/probe.cpp", "cxx", "compile-commands")
    assert "PROBE_DEFINE=1" in unit.defines
    plan = plan_dep(workspace, dep, checkout)
    assert plan.error is None and plan.archs == ["9.0a", "10.0a"] and plan.jobs == 1
    assert [u["source"] for u in plan.units or []] == ["py/csrc/probe.cpp"]


CUDA_SETUP = '''\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="cprobe",
    version="1.0",
    packages=["cprobe"],
    ext_modules=[CUDAExtension("cprobe._cprobe_C", ["csrc/ones.cu", "csrc/module.cpp"], py_limited_api=True)],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
'''
CUDA_SOURCE = """\
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
// What only the injection provides: NVCC_APPEND_FLAGS reached nvcc, TORCH_CUDA_ARCH_LIST chose sm_90a.
#ifndef TORCH_TARGET_VERSION
#error "TORCH_TARGET_VERSION must reach nvcc"
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 900
#error "compiled for an architecture other than the recipe's 9.0a"
#endif

__global__ void fill_one(float* out, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 1.0f;
}

torch::stable::Tensor ones(const torch::stable::Tensor& x) {
  torch::stable::Tensor out = torch::stable::empty_like(x);
  const int64_t n = x.numel();
  if (n > 0) fill_one<<<static_cast<unsigned>((n + 255) / 256), 256>>>(out.mutable_data_ptr<float>(), n);
  return out;
}

STABLE_TORCH_LIBRARY(cprobe, m) { m.def("ones(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(cprobe, CUDA, m) { m.impl("ones", TORCH_BOX(&ones)); }
"""
CUDA_MODULE = """\
#include <Python.h>
#ifndef TORCH_TARGET_VERSION
#error "TORCH_TARGET_VERSION must reach g++"
#endif
extern "C" PyObject* PyInit__cprobe_C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cprobe_C", nullptr, -1,
                               nullptr, nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module);
}
"""
CUDA_MANIFEST = """\
[bundle]
name = "cprobe-bundle"
version = "1.0.0"
torch = "2.13.0"
cuda-archs = ["9.0a"]

[mirrors]
"https://git.invalid/" = "remotes/"

[deps.cprobe]
upstream = "https://git.invalid/cprobe"
commit = "{commit}"

[deps.cprobe.build]
backend = "setuptools"
sources = ["csrc/*.cu", "csrc/*.cpp"]

[deps.cprobe.install]
"cprobe/**" = "cprobe_bundle/"
"""


def test_setuptools_backend_builds_a_cuda_extension_with_the_selected_nvcc(tmp_path: Path, private_cache: Path) -> None:
    upstream = Repo(tmp_path / "ws" / "remotes" / "cprobe")
    commit = upstream.commit("cuda probe", {
        "setup.py": CUDA_SETUP, "csrc/ones.cu": CUDA_SOURCE, "csrc/module.cpp": CUDA_MODULE,
        "cprobe/__init__.py": "import torch\nfrom . import _cprobe_C\n",
    })
    (tmp_path / "ws" / "deps.toml").write_text(CUDA_MANIFEST.format(commit=commit))
    result = assemble("-C", str(tmp_path / "ws"), "build", "--cuda", HERMETIC_CUDA, "-j", "2", "--json",
                      cache=private_cache)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout)
    assert ([(d["dep"], d["status"], d["verdict"], d["archs"]) for d in report["deps"]]
            == [("cprobe", "built", "STABLE", ["9.0a"])])
    module = Path(report["artifacts"]) / "cprobe" / "files" / "cprobe" / "_cprobe_C.abi3.so"
    needed = subprocess.run(["readelf", "-d", str(module)], capture_output=True, text=True, check=True).stdout
    # CUDAExtension's -ltorch_cuda -lc10_cuda link although the build's torch is CPU-only (soname
    # stand-ins; libtorch_cuda is kept in DT_NEEDED whatever the compiler's --as-needed default:
    # tests/test_setuptools_link.py); cudart is the toolkit's
    assert "[libcudart.so.13]" in needed and "[libtorch_cpu.so]" in needed
    record = json.loads((module.parents[2] / "artifact.json").read_text())
    assert record["toolchain"]["nvcc"] == report["nvcc"]
    compdb = json.loads(compile_commands_path(tmp_path / "ws" / ".assemble", "cprobe").read_text())
    commands = {Path(entry["file"]).name: entry["arguments"] for entry in compdb}
    assert set(commands) == {"ones.cu", "module.cpp"}
    assert Path(commands["ones.cu"][0]) == Path(report["cuda_root"]) / "bin" / "nvcc"
    assert "-gencode=arch=compute_90a,code=sm_90a" in commands["ones.cu"]


@pytest.mark.parametrize(("entry", "complaint"), [
    ('PATH = "/evil"', "PATH is set by assemble itself"),
    ('LD_PRELOAD = "x.so"', "LD_PRELOAD is set by assemble itself"),
    ('NVCC_APPEND_FLAGS = "-G"', "NVCC_APPEND_FLAGS is set by assemble itself"),
    ('PYTHONPATH = "/x"', "PYTHONPATH is set by assemble itself"),
    ('MAX_JOBS = "64"', "MAX_JOBS is set by assemble itself"),
    ('TORCH_CUDA_ARCH_LIST = "8.0"', "TORCH_CUDA_ARCH_LIST is set by assemble itself"),
    ('lower_case = "1"', "'lower_case' is not an environment variable name"),
    ("FAST = 1", "expected a string value, got 1"),
])
def test_build_env_names_are_checked_with_file_line_and_column(tmp_path: Path, entry: str, complaint: str) -> None:
    manifest = tmp_path / "deps.toml"
    manifest.write_text(
        '[bundle]\nname = "b"\nversion = "1.0"\n\n'
        '[deps.x]\nupstream = "https://git.invalid/x"\ncommit = "' + "a" * 40 + '"\n\n'
        '[deps.x.build]\nbackend = "setuptools"\n'
        f'build-env = {{ OK_NAME = "1", {entry} }}\n'
    )
    with pytest.raises(ManifestError) as error:
        load_manifest(manifest)
    lines = manifest.read_text().splitlines()
    line = next(number for number, text in enumerate(lines, 1) if text.startswith("build-env"))
    column = lines[line - 1].index(entry.split(" ")[0]) + 1
    assert error.value.message.startswith(f"{manifest}:{line}:{column}: deps.x.build.build-env.")
    assert complaint in error.value.message


@pytest.mark.parametrize(("recipe", "complaint"), [
    ('backend = "setuptools"\nextensions = []', "extensions: not used by the 'setuptools' backend"),
    ('backend = "cmake"', "cmake-dir is not set"),
    ('backend = "meson"', "'meson' is not a build backend"),
    ('backend = "setuptools"\nproject-dir = "../outside"', "'../outside' leaves the checkout"),
    ('backend = "setuptools"\nsources = ["/abs/a.cpp"]', "'/abs/a.cpp' leaves the checkout"),
    ('backend = "setuptools"\ndefines = ["-DX"]', "'-DX' is not a NAME or NAME=VALUE define"),
])
def test_backend_keys_are_checked(tmp_path: Path, recipe: str, complaint: str) -> None:
    manifest = tmp_path / "deps.toml"
    manifest.write_text('[bundle]\nname = "b"\nversion = "1.0"\n\n[deps.x]\nupstream = "https://git.invalid/x"\n'
                        'commit = "' + "a" * 40 + '"\n\n[deps.x.build]\n' + recipe + "\n")
    with pytest.raises(ManifestError, match=rf"^{manifest}:1[01]:\d+: deps\.x\.build\.") as error:
        load_manifest(manifest)
    assert complaint in error.value.message


def test_the_setuptools_backend_replaces_a_planted_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    """The build tree is the workspace's: a link planted where the backend writes its ninja
    wrapper is replaced by the file, and what it pointed at is never written (#29 item 3)."""
    from assembler.builder.backends.setuptools import ninja_wrapper

    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    build_base = tmp_path / "build"
    (build_base / "assemble-bin").mkdir(parents=True)
    (build_base / "assemble-bin" / "ninja").symlink_to(victim)
    bin_dir, _ = ninja_wrapper(build_base, Path("/usr/bin/ninja"))
    wrapper = bin_dir / "ninja"
    assert victim.read_text() == "keep me\n"
    assert not wrapper.is_symlink() and os.access(wrapper, os.X_OK) and "ASSEMBLE_REAL_NINJA" in wrapper.read_text()
