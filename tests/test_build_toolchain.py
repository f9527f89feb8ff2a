"""Toolchain selection, cached venvs, artifact keys, unstable-header diagnosis and the scheduler's
resource pool. Real nvcc, pip, g++ and torch headers; nothing is mocked."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from assembler.builder import builder
from assembler.builder.artifact_keys import KeyParts
from assembler.builder.header_diagnostics import torch_include_roots, unstable_includes
from assembler.builder.scheduler import ResourcePool
from assembler.errors import InputError, NetworkError, ToolchainError
from assembler.toolchain import venv
from assembler.toolchain.cuda import select_cuda
from assembler.toolchain.torchenv import describe_build_env
from assembler.verify.envs import ensure_torch_env
from tests.build_support import BUILD_TORCH, HERMETIC_CUDA

pytestmark = pytest.mark.integration


def test_hermetic_cuda_reports_the_version_asked_for(toolchains: Path) -> None:
    toolkit = select_cuda(HERMETIC_CUDA)
    assert toolkit.version == HERMETIC_CUDA
    assert toolkit.release.startswith(HERMETIC_CUDA + ".")
    assert toolkit.origin == "PyPI"
    assert (set(toolkit.packages)
            == {"nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-cuda-cccl", "nvidia-cuda-runtime", "nvidia-nvvm"})
    out = subprocess.run([toolkit.nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    assert f"release {HERMETIC_CUDA}" in out
    assert (toolkit.root / "lib" / "libcudart.so").exists()  # what -lcudart and CMake look for


def test_hermetic_nvcc_compiles_sm90(toolchains: Path, tmp_path: Path) -> None:
    toolkit = select_cuda(HERMETIC_CUDA)
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2; }\n")
    subprocess.run([toolkit.nvcc, "-arch=sm_90", "-c", source, "-o", tmp_path / "k.o"], check=True, capture_output=True)
    assert (tmp_path / "k.o").stat().st_size > 0


def test_local_toolkit_is_preferred_when_it_reports_the_version(toolchains: Path) -> None:
    if not Path("/usr/local/cuda-13.0/bin/nvcc").exists():
        pytest.skip("no local CUDA 13.0")
    toolkit = select_cuda("13.0")
    assert toolkit.origin != "PyPI" and toolkit.release.startswith("13.0.")


def test_no_toolkit_anywhere_is_a_clear_error(toolchains: Path) -> None:
    with pytest.raises(ToolchainError) as error:
        select_cuda("11.1")  # no local 11.1, and NVIDIA published no 11.1 nvcc wheel for this layout
    assert "no CUDA 11.1 toolkit" in error.value.message
    assert error.value.exit_code == 7
    with pytest.raises(ToolchainError, match=r"not a MAJOR\.MINOR"):
        select_cuda("13")


def test_venv_names_the_requirement_that_cannot_be_installed(toolchains: Path) -> None:
    with pytest.raises(ToolchainError) as error:
        venv.ensure_venv(["torch==0.0.0.1"], label="bad-torch")
    assert "torch==0.0.0.1" in error.value.message
    leftovers = [p for p in (toolchains / "venvs").iterdir() if p.name.startswith(("bad-torch", ".tmp-bad-torch"))
                 and p.is_dir()]
    assert leftovers == []  # complete or absent


@pytest.mark.parametrize("tool", ["uv", "pip"])
def test_venv_is_created_once_and_reused(tool: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """uv, and pip as the fallback (ASSEMBLE_INSTALLER=pip), make the same complete venv; the
    second call reuses it: no installer step is reported, and the directory, its interpreter and
    its marker are the same files (no duration is asserted: uv with a warm cache is fast)."""
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path))
    monkeypatch.setenv("ASSEMBLE_INSTALLER", tool)
    created: list[str] = []
    first = venv.ensure_venv(["cmake==4.4.5"], label="probe", progress=created.append)
    assert any(line.startswith(f"creating probe environment with {tool}") for line in created), created
    marker = json.loads((first / venv.MARKER).read_text())
    assert marker["installer"].startswith(f"{tool} ") and marker["python"] == venv.python_tag()
    assert venv.installed_versions(first)["cmake"] == "4.4.5"
    # the console script the installer wrote in the staging directory points at the final one
    script = (first / "bin" / "cmake").read_text()
    assert str(first) in script and ".tmp-" not in script
    ran = subprocess.run([first / "bin" / "cmake", "--version"], capture_output=True, text=True, check=False)
    assert ran.stdout.startswith("cmake version 4.4.5"), ran.stderr
    def identity(path: Path) -> tuple[int, int]:
        return path.stat().st_ino, path.stat().st_dev

    before = [identity(p) for p in (first, venv.venv_python(first), first / venv.MARKER)]
    marker_bytes = (first / venv.MARKER).read_bytes()
    reused: list[str] = []
    assert venv.ensure_venv(["cmake==4.4.5"], label="probe", progress=reused.append) == first
    assert reused == []  # no "creating ..." nor installer output: nothing ran
    assert [identity(p) for p in (first, venv.venv_python(first), first / venv.MARKER)] == before
    assert (first / venv.MARKER).read_bytes() == marker_bytes
    assert not list(tmp_path.joinpath("venvs").glob(".tmp-*"))


@pytest.fixture
def offline_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip pointed at an index nobody listens on, with no local wheels or config to fall back on,
    and a fresh cache: what a machine without network sees."""
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")  # discard port: connection refused
    monkeypatch.setenv("PIP_RETRIES", "1")  # pip names the connection error only when it retries
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    return tmp_path / "cache"


def test_an_unreachable_index_is_a_network_error(offline_pip: Path) -> None:
    """Exit 3, not "no such version" (7 or 2): for the build venv, the hermetic CUDA and verify."""
    with pytest.raises(NetworkError) as venv_error:
        venv.ensure_venv(["tomli==2.0.1"], label="offline")
    assert venv_error.value.exit_code == 3
    assert "offline environment" in venv_error.value.message and "could not be reached" in venv_error.value.message
    with pytest.raises(NetworkError, match=r"no CUDA 13\.1 toolkit.*could not be reached"):
        select_cuda("13.1")  # no local 13.1 here: the PyPI wheels are the only way
    with pytest.raises(NetworkError, match="could not be reached"):
        ensure_torch_env("2.13.0")  # verify says exit 2 for a torch that does not exist, not for this
    assert not [p for p in (offline_pip / "venvs").iterdir() if p.is_dir()]


def test_source_identity_of_a_broken_checkout_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"git rev-parse failed"):
        builder.source_identity(tmp_path)


def test_build_env_refuses_another_torch(build_env_path: Path) -> None:
    env = describe_build_env(build_env_path, BUILD_TORCH)
    assert env.torch.split("+")[0] == BUILD_TORCH
    assert (env.torch_dir / "include" / "torch" / "csrc" / "stable" / "library.h").is_file()
    with pytest.raises(ToolchainError, match=r"not 2\.14\.1"):
        describe_build_env(build_env_path, "2.14.1")


def _parts() -> KeyParts:
    return KeyParts(
        dep="vecadd", source="a" * 40, series="s1", recipe="r1",
        toolchain=(("nvcc", "13.2.86"), ("cmake", "4.4.5")), torch="2.13.0+cpu", torch_target="2.10",
        archs=("9.0a",), flags=("Release",), python_abi="3.9",
    )


CHANGES = {
    "dep": "scalekit", "source": "b" * 40, "series": "s2", "recipe": "r2",
    "toolchain": (("nvcc", "13.0.88"), ("cmake", "4.4.5")), "torch": "2.14.1", "torch_target": "2.11",
    "archs": ("10.0a",), "flags": ("Release", "-DFAST=1"), "python_abi": "3.10", "profile": "smoke",
}


def test_key_changes_with_every_part() -> None:
    assert set(CHANGES) == {f.name for f in dataclasses.fields(KeyParts)}
    base = _parts()
    assert base.digest() == _parts().digest()  # a hit: same inputs, same key
    for name, value in CHANGES.items():
        assert dataclasses.replace(base, **{name: value}).digest() != base.digest(), name


def test_unstable_header_is_named_with_file_and_line(build_env_path: Path, tmp_path: Path) -> None:
    torch_include = describe_build_env(build_env_path, BUILD_TORCH).torch_dir / "include"
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "ops.h").write_text("#pragma once\n#include <torch/csrc/stable/library.h>\n#include "
                                             "<torch/all.h>\n")
    (tmp_path / "csrc" / "op.cpp").write_text('#include <torch/headeronly/core/ScalarType.h>\n#include '
                                              '"ops.h"\n#include <ATen/ATen.h>\n')
    result = subprocess.run(
        ["c++", "-std=c++17", "-DTORCH_TARGET_VERSION=0x020A000000000000", "-isystem", torch_include,
         "-isystem", torch_include / "torch" / "csrc" / "api" / "include", "-c", tmp_path / "csrc" / "op.cpp", "-o",
         "/dev/null"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode != 0
    found = [item.describe("kern")
             for item in unstable_includes(result.stderr, tmp_path, torch_include_roots(torch_include.parent))]
    assert found == [
        "dep kern still includes <torch/all.h> from csrc/ops.h:3",
        "dep kern still includes <ATen/ATen.h> from csrc/op.cpp:3",
    ]


def test_resource_pool_keeps_builds_within_jobs_and_memory() -> None:
    gib = 1 << 30
    pool = ResourcePool(jobs=4, memory=5 * gib)
    assert pool.acquire(wanted=8, per_job=2 * gib) == 2  # memory allows two CUDA compilers
    assert pool.acquire(wanted=8, per_job=1 * gib) == 1  # one GiB left
    started = threading.Event()

    def third() -> None:
        pool.acquire(wanted=1, per_job=2 * gib)
        started.set()

    thread = threading.Thread(target=third)
    thread.start()
    assert not started.wait(0.2)  # waits for memory
    pool.release(2, 2 * gib)
    assert started.wait(5)
    thread.join()
    # a single job larger than the whole budget still runs, alone
    lone = ResourcePool(jobs=2, memory=1 * gib)
    assert lone.acquire(wanted=2, per_job=4 * gib) == 1
    with pytest.raises(ValueError, match="could never start"):  # instead of waiting forever
        ResourcePool(jobs=0, memory=gib)
