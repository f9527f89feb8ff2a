"""`assemble migrate` compiles what it rewrites before committing it, and `assemble review` compiles
the series' result (migration/proof.py), with real git, g++, nvcc and the torch build environment.

oldlib, a small library written the old way (here, not in examples/): ``ops.cpp`` migrates
cleanly and loses its unstable includes; ``util.h`` has no use left either, but ``keep.cpp``
(which still uses ``c10::Scalar``) reads ATen through it, so the compile keeps them; in
``bad.cpp`` the type rewrite leaves ``is_quantized()``, which ``torch::stable::Tensor`` lacks:
that file is not committed and is listed with the compiler's message, and the rest is."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import make_git_workspace, run_assemble
from tests.gitrepo import Repo

if TYPE_CHECKING:
    from assembler.builder.units import TranslationUnit

OPS = """#include <torch/library.h>
#include <ATen/core/Tensor.h>

at::Tensor dense_copy(const at::Tensor& x) {
  return x.contiguous();
}

TORCH_LIBRARY(oldlib, m) {
  m.def("dense_copy(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(oldlib, CPU, m) {
  m.impl("dense_copy", &dense_copy);
}
"""
UTIL = """#pragma once
#include <ATen/core/Tensor.h>

inline at::Tensor dense(const at::Tensor& x) {
  return x.contiguous();
}
"""
KEEP = """#include "util.h"

double scaled_numel(const at::Tensor& x, const c10::Scalar& factor) {
  return factor.toDouble() * static_cast<double>(dense(x).numel());
}
"""
BAD = """#include <ATen/core/Tensor.h>

bool quantized(const at::Tensor& x) {
  return x.is_quantized();
}
"""
OLDLIB = {"csrc/ops.cpp": OPS, "csrc/util.h": UTIL, "csrc/keep.cpp": KEEP, "csrc/bad.cpp": BAD}
MANIFEST = """[bundle]
name = "{name}-bundle"
version = "0.1.0"
python-abi = "3.9"
torch-target = "2.10"
torch = "2.13.0"
cuda-archs = ["9.0"]

[mirrors]
"https://git.invalid/" = "remotes/"

[deps.{name}]
upstream = "https://git.invalid/{name}"
commit = "{base}"
track = "main"

[deps.{name}.build]
backend = "setuptools"
project-dir = "."
sources = {sources}
include-dirs = ["csrc"]
"""


def _workspace(root: Path, name: str, files: dict[str, str]) -> Path:
    upstream = Repo(root / "remotes" / name)
    base = upstream.commit(f"{name} as it was written", files)
    sources = json.dumps(sorted(path for path in files if not path.endswith(".h")))
    (root / "deps.toml").write_text(MANIFEST.format(name=name, base=base, sources=sources))
    return root


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def test_a_dirty_fork_is_refused_before_any_work(tmp_path: Path) -> None:
    """Uncommitted edits in forks/DEP: exit 4 naming five of them and the fix, before assess
    (which would first make the torch environment: this workspace names no torch, and no
    environment is made)."""
    ws = make_git_workspace(tmp_path)
    assert ws.assemble("checkout", "kern").returncode == 0
    (ws.fork / "csrc" / "kern.cpp").write_text("// an edit of my own\n")
    for index in range(6):
        (ws.fork / f"note{index}.txt").write_text("mine\n")
    result = ws.assemble("migrate", "kern", "--json")
    assert result.returncode == 4, result.stdout + result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["exit_code"] == 4
    named = "forks/kern has uncommitted edits (csrc/kern.cpp, note0.txt, note1.txt, note2.txt, note3.txt and 2 more)"
    assert named in error["message"]
    assert "commit them" in error["hint"] and "--dry-run" in error["hint"]
    assert not (ws.cache / "venvs").exists()
    assert (ws.fork / "csrc" / "kern.cpp").read_text() == "// an edit of my own\n"


@pytest.mark.integration
def test_only_what_compiles_is_committed(tmp_path: Path, private_cache: Path) -> None:
    ws = _workspace(tmp_path / "ws", "oldlib", OLDLIB)
    env = {"ASSEMBLE_CACHE": str(private_cache)}
    result = run_assemble("-C", str(ws), "migrate", "oldlib", "--no-check", "--json", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    proof = json.loads(result.stdout)["proof"]
    assert proof["compiled"] and proof["changed"] == 4 and proof["proven"] == 3
    assert proof["proven_files"] == ["csrc/keep.cpp", "csrc/ops.cpp", "csrc/util.h"] and proof["not_proven"] == []
    [failed] = proof["not_committed"]
    # at the line as the file still is (the rewritten one had two stable includes more)
    assert (failed["file"], failed["at"], failed["unit"]) == ("csrc/bad.cpp", "csrc/bad.cpp:4", "csrc/bad.cpp")
    assert "'const class torch::stable::Tensor' has no member named 'is_quantized'" in failed["error"]
    [kept] = proof["includes_kept"]
    assert (kept["file"], kept["unit"]) == ("csrc/util.h", "csrc/keep.cpp")
    assert kept["at"] == "csrc/keep.cpp:5" and "'Scalar' in namespace 'c10' does not name a type" in kept["error"]
    # the first compile, every file rewritten: both errors, each at its line of the rewritten file
    first = {(item["unit"], item["at"].split(":")[0]) for item in proof["first_errors"]}
    assert {("csrc/bad.cpp", "csrc/bad.cpp"), ("csrc/keep.cpp", "csrc/keep.cpp")} <= first, proof["first_errors"]
    assert any("is_quantized" in item["error"] for item in proof["first_errors"])
    units = {unit["source"]: unit for unit in proof["units"]}
    assert set(units) == {"csrc/ops.cpp", "csrc/keep.cpp", "csrc/bad.cpp"}
    assert all(unit["ok"] for unit in units.values())  # as committed
    assert {unit["model"] for unit in units.values()} == {"today"}  # each still reached ATen before the rewrite

    fork = ws / "forks" / "oldlib"
    assert _git(fork, "status", "--porcelain") == ""
    assert (fork / "csrc" / "bad.cpp").read_text() == BAD
    assert _git(fork, "log", "--format=%s", "HEAD~3..HEAD", "--", "csrc/bad.cpp") == ""
    touched = set(_git(fork, "diff", "--name-only", "HEAD~3", "HEAD").split())
    assert touched == {"csrc/ops.cpp", "csrc/util.h", "csrc/keep.cpp"}
    ops, util = (fork / "csrc" / "ops.cpp").read_text(), (fork / "csrc" / "util.h").read_text()
    assert "#include <ATen/" not in ops and "#include <torch/library.h>" not in ops  # no use left in it: they went
    assert "#include <torch/csrc/stable/library.h>" in ops and "TORCH_BOX(&dense_copy)" in ops
    assert "#include <ATen/core/Tensor.h>" in util  # kept: keep.cpp reads c10::Scalar through it
    assert "torch::stable::contiguous(x)" in util


@pytest.mark.integration
def test_review_flags_a_hunk_that_does_not_compile(tmp_path: Path, private_cache: Path) -> None:
    """The token criterion passes ``x.contiguous()`` for ``torch::stable::contiguous(x)`` as
    API-only; the compile of the series' result flags it, with the compiler's message, until
    a trailer acknowledges it. The migration's own table names what it did not commit."""
    ws = _workspace(tmp_path / "ws", "oldlib", OLDLIB)
    env = {"ASSEMBLE_CACHE": str(private_cache), "COLUMNS": "200"}
    migrated = run_assemble("-C", str(ws), "migrate", "oldlib", "--no-check", env=env)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    lines = migrated.stdout.splitlines()
    assert "proof: 3 of 4 rewritten files proven to compile, 1 not committed (3 units compiled" in migrated.stdout
    row = next(line for line in lines if line.startswith("csrc/bad.cpp "))
    assert row.split()[:2] == ["csrc/bad.cpp", "csrc/bad.cpp:4:"] and "is_quantized" in row, migrated.stdout
    kept = "kept the unstable includes of csrc/util.h: csrc/keep.cpp does not compile without them"
    assert any(line.startswith(kept) for line in lines)

    assert run_assemble("-C", str(ws), "export", "oldlib", env=env).returncode == 0
    fork = ws / "forks" / "oldlib"
    ops = fork / "csrc" / "ops.cpp"
    ops.write_text(ops.read_text().replace("return torch::stable::contiguous(x);", "return x.contiguous();"))
    _git(fork, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "Use the method form")
    assert run_assemble("-C", str(ws), "export", "oldlib", env=env).returncode == 0

    tokens_only = run_assemble("-C", str(ws), "review", "oldlib", "--no-compile", "--json", env=env)
    assert tokens_only.returncode == 0, tokens_only.stdout  # what the tokens alone say
    reviewed = run_assemble("-C", str(ws), "review", "oldlib", "--json", env=env)
    assert reviewed.returncode == 1, reviewed.stdout[-3000:]
    document = json.loads(reviewed.stdout)
    assert document["compile"]["compiled"] and document["not_compiling"] == 1 and document["flagged"] == 1
    hunks = {(patch["patch"][:4], hunk["id"]): hunk for patch in document["patches"] for hunk in patch["hunks"]}
    flagged = hunks[("0004", "csrc/ops.cpp#1")]
    assert flagged["verdict"] == "flagged" and flagged["compile_error"].startswith("csrc/ops.cpp:7: ")
    assert "has no member named 'contiguous'" in flagged["compile_error"]
    assert [key for key, hunk in hunks.items() if hunk["compile_error"]] == [("0004", "csrc/ops.cpp#1")]
    table = run_assemble("-C", str(ws), "review", "oldlib", env={**env, "COLUMNS": "80"})
    assert "csrc/ops.cpp#1 does not compile: csrc/ops.cpp:7:" in table.stdout, table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80, table.stdout

    patch = next((ws / "patches" / "oldlib").glob("0004-*.patch"))
    trailer = "\n\nMigration-Review: csrc/ops.cpp#1 fixed in the next patch\n---\n"
    patch.write_text(patch.read_text().replace("\n---\n", trailer, 1))
    acknowledged = run_assemble("-C", str(ws), "review", "oldlib", "0004", "--json", env=env)
    assert acknowledged.returncode == 0, acknowledged.stdout[-3000:]


CUDA_GOOD = """template <typename T> __global__ void twice(T* p) { p[threadIdx.x] *= 2; }
void launch(float* p) { twice<<<1, 32>>>(p); }
"""
CUDA_BAD = """struct Half { float x; };
template <typename T> __global__ void twice(T* p) { p[threadIdx.x] *= 2; }
void launch(Half* p) { twice<<<1, 32>>>(p); }
"""


@pytest.mark.integration
def test_a_cuda_unit_goes_through_nvccs_front_ends(tmp_path: Path, private_cache: Path) -> None:
    """``nvcc -cuda -fdevice-syntax-only`` instantiates the kernel template: an error only an
    instantiation shows is found, at file:line, and the build's defines are there (target model)."""
    from assembler.migration.proof import TARGET, Prover
    from assembler.workspace import open_workspace

    ws = _workspace(tmp_path / "ws", "cukit", {"csrc/good.cu": CUDA_GOOD, "csrc/bad.cu": CUDA_BAD})
    assert run_assemble("-C", str(ws), "checkout", "cukit", env={"ASSEMBLE_CACHE": str(private_cache)}).returncode == 0
    workspace = open_workspace(ws)
    dep = workspace.manifest.select(["cukit"])[0]
    prover = Prover(workspace, dep, workspace.fork_path(dep))
    found = {result.unit.source: result for result in prover.baseline(prover.units).values()}
    assert found["csrc/good.cu"].ok and found["csrc/good.cu"].mode == TARGET
    assert found["csrc/good.cu"].reads == {prover.checkout / "csrc" / "good.cu"}
    bad = found["csrc/bad.cu"]
    assert not bad.ok and bad.errors[0].at == "csrc/bad.cu:2" and "no operator \"*=\"" in bad.errors[0].text, bad.errors


GUARDED = """#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>

at::Tensor on_its_device(const at::Tensor& x) {
  const c10::cuda::CUDAGuard device_guard(x.device());
  return x.contiguous();
}

TORCH_LIBRARY(cudalib, m) {
  m.def("on_its_device(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(cudalib, CUDA, m) {
  m.impl("on_its_device", &on_its_device);
}
"""


@pytest.mark.integration
def test_a_unit_that_compiled_only_after_the_rewrite_proves_its_file(tmp_path: Path, private_cache: Path) -> None:
    """On a CPU build torch, c10/cuda's generated cuda_cmake_macros.h is missing, so a unit that
    includes <c10/cuda/CUDAGuard.h> never compiled as it was (FlashKDA's and FlashMLA's did not).
    After migrate the guard is the helper header's and the include is gone: the unit compiles
    under the target, and that compile is the file's proof."""
    ws = _workspace(tmp_path / "ws", "cudalib", {"csrc/guarded.cpp": GUARDED})
    env = {"ASSEMBLE_CACHE": str(private_cache)}
    result = run_assemble("-C", str(ws), "migrate", "cudalib", "--no-check", "--json", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    proof = json.loads(result.stdout)["proof"]
    assert proof["compiled"] and proof["not_committed"] == [], proof
    assert "csrc/guarded.cpp" in proof["proven_files"] and proof["not_proven"] == [], proof
    text = (ws / "forks" / "cudalib" / "csrc" / "guarded.cpp").read_text()
    assert "c10/cuda" not in text and "STABLE_TORCH_LIBRARY" in text


CHECKED = """#include <cuda_runtime_api.h>
#include <c10/cuda/CUDAException.h>

void synchronized(cudaStream_t stream) {
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
}
"""


@pytest.mark.integration
def test_on_a_cpu_torch_a_unit_reaching_c10_cuda_compiles_before_the_rewrite(tmp_path: Path,
                                                                              private_cache: Path) -> None:
    """The build torch here is a CPU wheel: c10/cuda's generated cuda_cmake_macros.h is missing,
    and every unit reaching c10/cuda (through CUDAException.h, as all of FA2's .cu units do)
    failed its baseline, so nothing proved the rewrite. The proof's stand-in for that header
    lets the unit compile as it was, so the rewrite (STD_CUDA_CHECK) is proven by a unit that
    compiled before and after."""
    ws = _workspace(tmp_path / "ws", "cudachk", {"csrc/check.cpp": CHECKED})
    manifest = ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace('include-dirs = ["csrc"]',
                                                     'include-dirs = ["csrc"]\ndefines = ["USE_CUDA"]'))
    env = {"ASSEMBLE_CACHE": str(private_cache)}
    result = run_assemble("-C", str(ws), "migrate", "cudachk", "--no-check", "--json", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    proof = json.loads(result.stdout)["proof"]
    assert proof["proven_files"] == ["csrc/check.cpp"] and proof["not_committed"] == [], proof
    assert [unit["source"] for unit in proof["units"]] == ["csrc/check.cpp"], proof  # a baseline that compiled
    text = (ws / "forks" / "cudachk" / "csrc" / "check.cpp").read_text()
    assert "STD_CUDA_CHECK(cudaStreamSynchronize(stream));" in text and "c10/cuda" not in text


RELAXED = """#include <ATen/core/Tensor.h>

constexpr int twice(int x) { return 2 * x; }

__global__ void fill_twice(int* out) { out[0] = twice(3); }

int64_t elements(const at::Tensor& x) {
  return x.numel();
}
"""


@pytest.mark.integration
def test_a_cuda_unit_is_compiled_with_the_relaxed_constexpr_every_torch_build_gives_it(
        tmp_path: Path, private_cache: Path) -> None:
    """A constexpr host function called in device code needs --expt-relaxed-constexpr, which torch's
    cpp_extension and vLLM's CMake pass every .cu unit (FA2's launch templates rely on it): the
    proof's nvcc gives it too, so the unit compiles as it was and proves its rewrite."""
    ws = _workspace(tmp_path / "ws", "cudarel", {"csrc/kernel.cu": RELAXED})
    env = {"ASSEMBLE_CACHE": str(private_cache)}
    result = run_assemble("-C", str(ws), "migrate", "cudarel", "--no-check", "--json", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    proof = json.loads(result.stdout)["proof"]
    assert proof["proven_files"] == ["csrc/kernel.cu"] and proof["not_committed"] == [], proof
    assert [unit["source"] for unit in proof["units"]] == ["csrc/kernel.cu"], proof


def _unit(root: Path, name: str) -> TranslationUnit:
    from assembler.builder.units import TranslationUnit

    return TranslationUnit(root / name, name, "cuda")


def test_one_unit_reading_every_changed_header_proves_them_all(tmp_path: Path) -> None:
    """FA2's sparse kernel unit reads both launch templates migrate changes (the sparse one
    includes the other): one CUTLASS compile proves the two, where the first reader of each
    in recipe order made two. A unit that cannot be used leaves its headers to the others."""
    from assembler.migration.proof import cover

    plain, sparse, other = (_unit(tmp_path, name) for name in ("a_plain.cu", "b_sparse.cu", "c_other.cu"))
    launch, sparse_launch = tmp_path / "launch.h", tmp_path / "sparse_launch.h"
    reads = {plain.path: {plain.path, launch}, sparse.path: {sparse.path, launch, sparse_launch},
             other.path: {other.path}}
    found = cover([launch, sparse_launch], [plain, sparse, other], reads)
    assert [unit.source for unit in found.units] == ["b_sparse.cu"]
    assert found.proves == {launch: [sparse], sparse_launch: [sparse]} and found.unread == []
    without = cover([launch, sparse_launch], [plain, sparse, other], reads, lambda unit: unit is not sparse)
    assert [unit.source for unit in without.units] == ["a_plain.cu"]
    assert without.proves == {launch: [plain], sparse_launch: []}
    mine = cover([launch, other.path], [plain, sparse, other], reads)  # a changed unit proves itself
    assert [unit.source for unit in mine.units] == ["a_plain.cu", "c_other.cu"]


def test_a_proof_compile_may_take_its_share_of_the_machine() -> None:
    """cudafe++ on FA2's launch-template unit peaks at 3.9 GB resident: under a scan's 4 GiB of
    address space it stopped with "out of memory" and proved nothing. A proof compile gets the
    machine's memory over the compiles run at once, never less than a scan's, never past the cap."""
    from assembler.check.unit_scan import MEMORY
    from assembler.migration.proof import PROOF_MEMORY_CAP, proof_memory

    gib = 1 << 30
    assert proof_memory(2, 24 * gib) == 12 * gib
    assert proof_memory(1, 256 * gib) == PROOF_MEMORY_CAP
    assert proof_memory(16, 8 * gib) == MEMORY


def test_a_proof_compile_may_map_more_than_a_scan(tmp_path: Path) -> None:
    """The limit is real: a process mapping 5 GiB fails under a scan's ulimit and runs under the
    proof's on a machine whose share allows it."""
    import sys

    from assembler.check.unit_scan import Limits
    from assembler.migration.proof import proof_memory
    from assembler.system import available_cpus

    share = proof_memory(available_cpus())
    if share < 6 << 30:
        pytest.skip(f"this machine's share per compile is {share >> 30} GiB")
    program = [sys.executable, "-c", "import mmap; mmap.mmap(-1, 5 << 30)"]
    assert subprocess.run(Limits().wrap(program), capture_output=True, check=False).returncode != 0
    assert subprocess.run(Limits(memory=share).wrap(program), capture_output=True, check=False).returncode == 0


HEAVY_UNIT = """#include <regex>
#include <iostream>
#include <map>
#include <unordered_map>
#include <functional>
#include <algorithm>
#include <future>
std::map<std::string, std::vector<int>> table;
std::regex pattern("a+");
"""


def _small_prover(root: Path, share: int) -> Any:
    """A Prover whose compile is plain g++ on the unit, each of its compiles at once given
    ``share`` bytes: what a real tree's CUTLASS unit is to a 24 GiB machine, at a small scale."""
    import os

    from assembler.check.unit_scan import C_ENV, Limits, Reader
    from assembler.migration.proof import Prover

    prover = Prover.__new__(Prover)
    prover.checkout, prover.jobs, prover.alone, prover.name = root, 2, set(), "heavy"
    prover.notes = []
    prover.note = prover.notes.append
    prover.limits = Limits(memory=share)
    prover.reader = Reader(root, [], root)
    prover.command = lambda unit, mode, depfile, scratch: (  # type: ignore[method-assign]
        ["g++", "-std=c++17", "-fsyntax-only", "-MD", "-MF", str(depfile), str(unit.path)], {**os.environ, **C_ENV})
    return prover


def test_a_compile_out_of_its_share_of_memory_runs_again_alone(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """QuTLASS's gemm.cu takes 13 GB in cudafe++: under a share of the machine it ran out of
    memory and was reported as "did not compile before the rewrite either". Now such a compile
    runs again alone with what the machine has free, and so does every later compile of it;
    where even that is not enough, the error says the limit, not a compiler line."""
    from assembler.migration import proof

    (tmp_path / "heavy.cpp").write_text(HEAVY_UNIT)
    (tmp_path / "light.c").write_text("int x;\n")
    heavy, light = _unit(tmp_path, "heavy.cpp"), _unit(tmp_path, "light.c")
    prover = _small_prover(tmp_path, 96 << 20)
    monkeypatch.setattr(proof, "alone_memory", lambda: 2 << 30)
    first = prover.compile_all([(heavy, proof.TODAY), (light, proof.TODAY)])
    assert [result.ok for result in first] == [True, True], [result.first for result in first]
    assert prover.alone == {heavy.path} and not first[0].memory
    # the progress says so (the heartbeat repeats the line while the compile runs alone)
    assert prover.notes == ["heavy: heavy.cpp ran out of 0.1 GiB; compiling it again alone, under 2.0 GiB"]
    assert prover.compile_all([(heavy, proof.TODAY)])[0].ok  # straight to the lane of its own
    starved = _small_prover(tmp_path, 96 << 20)
    monkeypatch.setattr(proof, "alone_memory", lambda: 96 << 20)  # nothing more free: no second try
    [result] = starved.compile_all([(heavy, proof.TODAY)])
    assert result.memory and not result.ok and starved.alone == set()
    assert "ran out of memory under its limit of 0.1 GiB of address space" in result.first
