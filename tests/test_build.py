"""`assemble build` on the example workspace: real checkout, hermetic nvcc 13.2, torch build venv,
CMake, scikit-build-core, merge and audit. The toolchains come from the shared cache
(tests/build_support.py); each test has its own artifact store unless it says otherwise."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from assembler.builder import builder
from assembler.builder.pipeline import (
    BuildFailed,
    BuildOptions,
    BuildReport,
    build_artifacts,
    resolve_toolchain,
)
from assembler.builder.units import compile_commands_path
from assembler.git.state import series_digest
from assembler.git.sync import sync_checkouts
from assembler.workspace import Workspace, open_workspace
from tests.build_support import HERMETIC_CUDA, assemble
from tests.gitrepo import Repo, git

pytestmark = pytest.mark.integration

UNSTABLE_CALL = """
// Reaches into libc10 past the Stable ABI: the audit must call this extension UNSTABLE.
namespace c10 { namespace detail {
[[noreturn]] void torchCheckFail(const char* func, const char* file, unsigned int line, const char* msg);
} }
extern "C" __attribute__((visibility("default"))) void vecadd_internal_check() {
  c10::detail::torchCheckFail("f", "f", 1, "m");
}
"""


def _statuses(report: dict) -> dict[str, str]:
    return {dep["dep"]: dep["status"] for dep in report["deps"]}


def test_example_builds_into_one_wheel_a_noop_rebuild_and_byte_identical_rebuild(example_ws: Path, private_cache: Path,
                                                                                 build_env_path: Path) -> None:
    first = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--verify", "--json", cache=private_cache)
    assert first.returncode == 0, first.stderr[-4000:]
    # --json keeps the progress on stderr, a line per unit: CMake's ninja and setuptools' (cpp_extension's ninja)
    assert re.search(r"^scalekit: compiling \d+/\d+ scale\.cu \(", first.stderr, re.M), first.stderr
    assert re.search(r"^rowsum: compiling 1/1 rowsum\.cpp \(", first.stderr, re.M), first.stderr
    report = json.loads(first.stdout)
    assert _statuses(report) == {"vecadd": "built", "scalekit": "built", "rowsum": "built"}
    assert report["error"] is None
    verified = report["verify"]  # --verify: the matrix is part of the JSON summary
    assert verified["ok"] and [t["requested"] for t in verified["torch"]] == ["2.13.0", "2.14.1"]
    assert {(r["dep"], r["torch"]): r["status"] for r in verified["results"]}[("vecadd", "2.13.0")] == "PASS"
    # setuptools backend
    assert {(r["dep"], r["torch"]): r["status"] for r in verified["results"]}[("rowsum", "2.14.1")] == "PASS"
    assert report["cuda"] == HERMETIC_CUDA and report["nvcc"].startswith(HERMETIC_CUDA + ".")
    assert report["cuda_origin"] == "PyPI" and report["torch"].startswith("2.13.0")
    wheel = Path(report["wheel"])
    first_bytes = wheel.read_bytes()
    assert re.fullmatch(r"stable_abi_example-0\.1\.0\+cu132-cp39-abi3-.+\.whl", wheel.name), wheel.name
    assert ({dep["dep"]: dep["verdict"] for dep in report["deps"]}
            == {"vecadd": "STABLE", "scalekit": "STABLE", "rowsum": "STABLE"})

    artifacts = Path(report["artifacts"])
    record = json.loads((artifacts / "scalekit" / "artifact.json").read_text())
    assert record["toolchain"]["nvcc"] == report["nvcc"] and record["toolchain"]["cuda"] == HERMETIC_CUDA
    assert record["archs"] == ["9.0a"] and len(record["patches"]) == 3
    assert record["dirty"] is False and record["head"] == record["series_head"]  # the series, nothing local
    with zipfile.ZipFile(wheel) as archive:
        recorded = json.loads(next(archive.read(n) for n in archive.namelist()
                                   if n.endswith(".dist-info/assembler.json")))
    assert recorded["deps"]["scalekit"]["head"] == record["head"] and recorded["deps"]["scalekit"]["dirty"] is False
    assert (artifacts / "vecadd" / "files" / "vecadd" / "_vecadd_C.abi3.so").is_file()
    # the CPU extension is a working torch op (built against the Stable ABI, loaded by torch)
    probe = (
        "import sys, torch; sys.path.insert(0, sys.argv[1]); import vecadd; "
        "a, b = torch.ones(4), torch.arange(4.0); assert torch.equal(vecadd.add_scaled(a, b, 2.0), a + 2 * b)"
    )
    subprocess.run([build_env_path / "bin" / "python", "-c", probe, artifacts / "vecadd" / "files"], check=True)

    second = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--json", cache=private_cache)
    assert second.returncode == 0, second.stderr[-4000:]
    again = json.loads(second.stdout)
    assert _statuses(again) == {"vecadd": "cached", "scalekit": "cached", "rowsum": "cached"}
    # nothing rebuilt (no time asserted: benchmarks/build_noop.py)
    assert Path(again["wheel"]).read_bytes() == wheel.read_bytes()

    # from scratch again (no artifact store, no build trees, no wheel): the same bytes
    for state in (private_cache / "artifacts", example_ws / ".assemble", example_ws / "dist"):
        shutil.rmtree(state)
    third = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--json", cache=private_cache)
    assert third.returncode == 0, third.stderr[-4000:]
    rebuilt = json.loads(third.stdout)
    assert _statuses(rebuilt) == {"vecadd": "built", "scalekit": "built", "rowsum": "built"}
    assert Path(rebuilt["wheel"]).read_bytes() == first_bytes


def test_only_the_changed_dependency_rebuilds(example_ws: Path, private_cache: Path) -> None:
    workspace = open_workspace(example_ws)
    options = BuildOptions(cuda=HERMETIC_CUDA, only=("vecadd",), jobs=2)
    assert _by_dep(build_artifacts(workspace, options)) == {"vecadd": "built"}
    source = example_ws / "forks" / "vecadd" / "csrc" / "add_scaled.cpp"
    original = source.read_text()
    source.write_text(original + "\n// an uncommitted edit is part of the source\n")
    dirty = build_artifacts(workspace, options)
    assert _by_dep(dirty) == {"vecadd": "built"}
    assert json.loads((dirty.deps[0].artifact / "artifact.json").read_text())["dirty"] is True
    source.write_text(original)
    assert _by_dep(build_artifacts(workspace, options)) == {"vecadd": "cached"}  # the first key again: store hit


def test_cuda_version_is_honoured_and_keys_only_cuda_dependencies(example_ws: Path, private_cache: Path) -> None:
    if not Path("/usr/local/cuda-13.0/bin/nvcc").exists():
        pytest.skip("needs a second CUDA (local 13.0)")
    workspace = open_workspace(example_ws)
    report = build_artifacts(workspace, BuildOptions(cuda="13.0", only=("scalekit",), jobs=2))
    assert _by_dep(report) == {"scalekit": "built"} and report.nvcc.startswith("13.0.")
    record = json.loads((report.deps[0].artifact / "artifact.json").read_text())
    assert record["toolchain"]["nvcc"].startswith("13.0.") and record["toolchain"]["cuda_origin"] != "PyPI"
    keys = {cuda: _keys(workspace, cuda) for cuda in ("13.0", HERMETIC_CUDA)}
    assert keys["13.0"]["vecadd"] == keys[HERMETIC_CUDA]["vecadd"]  # a CPU-only dependency ignores --cuda
    assert keys["13.0"]["scalekit"] != keys[HERMETIC_CUDA]["scalekit"]


def test_key_follows_series_recipe_target_archs_and_flags(example_ws: Path, private_cache: Path) -> None:
    workspace = open_workspace(example_ws)
    options = BuildOptions(cuda=HERMETIC_CUDA)
    deps = workspace.manifest.select(["scalekit"])
    checkout = sync_checkouts(workspace, deps)["scalekit"].path
    ctx = builder.BuildContext(workspace.state_dir, workspace.state_dir / "artifacts", None,  # type: ignore[arg-type]
                               resolve_toolchain(workspace, options, lambda _: None), workspace.manifest.bundle)
    dep = deps[0]
    base = builder.prepare(ctx, dep, checkout, series_digest(dep)).key
    assert builder.prepare(ctx, dep, checkout, series_digest(dep)).key == base
    ext = dep.build.extensions[0]
    variants = {
        "series": (dep, "another-series-digest"),
        "recipe": (dep._replace(build=dep.build._replace(extensions=(ext._replace(defines=("FAST=1",)),))), None),
        "torch-target": (dep._replace(torch_target="2.11"), None),
        "archs": (dep._replace(build=dep.build._replace(cuda_archs=("10.0a",))), None),
        "flags": (dep._replace(build=dep.build._replace(cmake_args=("-DFAST=ON",))), None),
    }
    for name, (variant, digest) in variants.items():
        assert builder.prepare(ctx, variant, checkout, digest or series_digest(dep)).key != base, name
    python_abi = dataclasses.replace(ctx, bundle=ctx.bundle._replace(python_abi="3.10"))
    assert builder.prepare(python_abi, dep, checkout, series_digest(dep)).key != base


def test_unstable_header_is_reported_as_the_include_to_change(example_ws: Path, private_cache: Path) -> None:
    patches = example_ws / "patches" / "vecadd"
    for patch in patches.glob("*.patch"):
        patch.unlink()
    (patches / "series").write_text("")  # upstream vecadd as it is: written against ATen
    result = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--only", "vecadd", "--json",
                      cache=private_cache)
    assert result.returncode == 6, result.stderr
    assert "error: dep vecadd still includes <ATen/ATen.h> from csrc/add_scaled.cpp:1" in result.stderr
    assert "<torch/library.h> from csrc/add_scaled.cpp:2" in result.stderr
    assert "hint:" in result.stderr
    report = json.loads(result.stdout)  # --json reports a failed build too
    assert _statuses(report) == {"vecadd": "failed"} and report["wheel"] is None
    assert report["error"]["exit_code"] == 6 and "<ATen/ATen.h>" in report["error"]["message"]


@pytest.mark.parametrize(("args", "complaint"), [
    (("--jobs", "-1"), "argument --jobs/-j: -1 is negative"),
    (("--only", "vecadd", "--verify"), "--verify needs the merged wheel, and --only builds artifacts without merging"),
    (("--partial",), "--partial needs --only"),
])
def test_arguments_that_could_never_work_are_refused(example_ws: Path, args: tuple[str, ...], complaint: str) -> None:
    result = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, *args, cache=example_ws / "no-cache")
    assert result.returncode == 2 and complaint in result.stderr, result.stderr
    assert not (example_ws / "forks").exists()  # refused before anything ran


def test_gate_fails_on_an_unstable_dependency_unless_allowed(example_ws: Path, private_cache: Path) -> None:
    workspace = open_workspace(example_ws)
    sync_checkouts(workspace, workspace.manifest.select([]))
    source = example_ws / "forks" / "vecadd" / "csrc" / "add_scaled.cpp"
    source.write_text(source.read_text() + UNSTABLE_CALL)
    gated = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, cache=private_cache)
    assert gated.returncode == 1, gated.stderr[-4000:]
    error = next(line for line in gated.stderr.splitlines() if line.startswith("error:"))
    assert "_vecadd_C.abi3.so is UNSTABLE" in error and "torchCheckFail" in error
    assert "_scalekit_C" not in error
    assert "--allow-unstable vecadd" in gated.stderr
    assert "UNSTABLE" in gated.stdout  # the summary table is still printed
    assert "warning: vecadd: built from local work in forks/vecadd (uncommitted edits" in " ".join(gated.stderr.split())
    assert not list((example_ws / "dist").glob("*.whl"))  # no gated wheel left for a release job to upload

    allowed = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--allow-unstable", "vecadd", "--json",
                       cache=private_cache)
    assert allowed.returncode == 0, allowed.stderr[-4000:]
    report = json.loads(allowed.stdout)
    assert _statuses(report) == {"vecadd": "cached", "scalekit": "cached", "rowsum": "cached"}
    assert report["allowed_unstable"] == ["vecadd"]
    assert [w for w in report["warnings"] if "local work" in w] == [
        "vecadd: built from local work in forks/vecadd (uncommitted edits), not from commit + patches alone; "
        "commit, `assemble export vecadd` and rebuild before releasing"
    ]
    verdicts = {dep["dep"]: dep["verdict"] for dep in report["deps"]}
    assert verdicts == {"vecadd": "UNSTABLE (allowed)", "scalekit": "STABLE", "rowsum": "STABLE"}
    # built from local edits: the audit says nothing about the pin + series, so `patches`
    # does not use it; once the edit is committed and exported, it does
    def migrated() -> dict[str, tuple[str, object]]:
        result = assemble("-C", str(example_ws), "patches", "--format", "json", cache=private_cache)
        assert result.returncode == 0, result.stderr[-4000:]
        payload = json.loads(result.stdout)
        return {d["name"]: (d["migrated_on_fork"], d["build_verdicts"]) for d in payload["deps"]}

    assert migrated()["vecadd"] == ("not checked", None)
    git(example_ws / "forks" / "vecadd", "commit", "-qam", "Call an unstable helper")
    assert assemble("-C", str(example_ws), "export", "vecadd", cache=private_cache).returncode == 0
    rebuilt = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--allow-unstable", "vecadd",
                       cache=private_cache)
    assert rebuilt.returncode == 0, rebuilt.stderr[-4000:]
    assert (migrated() == {"vecadd": ("in progress", ["UNSTABLE"]), "scalekit": ("done", ["STABLE"]),
                           "rowsum": ("done", ["STABLE"])})


def test_failed_build_shows_the_log_tail(example_ws: Path, private_cache: Path) -> None:
    workspace = open_workspace(example_ws)
    sync_checkouts(workspace, workspace.manifest.select(["vecadd"]))
    source = example_ws / "forks" / "vecadd" / "csrc" / "add_scaled.cpp"
    source.write_text(source.read_text() + "\nthis is not C++;\n")
    with pytest.raises(BuildFailed) as failure:
        build_artifacts(workspace, BuildOptions(cuda=HERMETIC_CUDA, only=("vecadd",)))
    assert failure.value.message == "vecadd failed to build"
    assert str(failure.value.failed[0].log) in (failure.value.hint or "")
    assert "this is not C++" in builder.format_failure(failure.value.failed[0])


OWN_CMAKE = """cmake_minimum_required(VERSION 3.26)
project(own LANGUAGES CXX)
include(AssemblerStableExtension)  # assemble puts assembler/cmake on CMAKE_MODULE_PATH
assembler_stable_extension(_own_C SOURCES csrc/own.cpp DESTINATION own)
"""
OWN_SOURCE = """#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

using torch::stable::Tensor;

Tensor twice(Tensor a) {
  Tensor out = torch::stable::empty_like(a);
  const float* x = a.const_data_ptr<float>();
  float* y = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < a.numel(); ++i) y[i] = 2 * x[i];
  return out;
}

STABLE_TORCH_LIBRARY(own, m) { m.def("twice(Tensor a) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(own, CPU, m) { m.impl("twice", TORCH_BOX(&twice)); }
"""
OWN_MANIFEST = """[bundle]
name = "own-bundle"
version = "1.0.0"
python-abi = "3.9"
torch = "2.13.0"

[mirrors]
"https://git.invalid/" = "remotes/"

[deps.own]
upstream = "https://git.invalid/own"
commit = "{commit}"

[deps.own.build]
cmake-dir = "."                 # the dependency's own CMakeLists.txt, using assembler's helper
python-packages = ["own"]
"""


def test_a_dependency_with_its_own_cmake_uses_the_helper(tmp_path: Path, private_cache: Path,
                                                         build_env_path: Path) -> None:
    upstream = Repo(tmp_path / "ws" / "remotes" / "own")
    commit = upstream.commit("own kernels", {
        "CMakeLists.txt": OWN_CMAKE, "csrc/own.cpp": OWN_SOURCE,
        "own/__init__.py": "import torch\nfrom . import _own_C\n",
    })
    (tmp_path / "ws" / "deps.toml").write_text(OWN_MANIFEST.format(commit=commit))
    result = assemble("-C", str(tmp_path / "ws"), "build", "--cuda", HERMETIC_CUDA, "--json", cache=private_cache)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout)
    assert [(d["dep"], d["status"], d["verdict"]) for d in report["deps"]] == [("own", "built", "STABLE")]
    files = Path(report["artifacts"]) / "own" / "files"
    probe = ("import sys, torch; sys.path.insert(0, sys.argv[1]); import own; assert "
             "torch.ops.own.twice(torch.ones(2)).tolist() == [2.0, 2.0]")
    subprocess.run([build_env_path / "bin" / "python", "-c", probe, files], check=True)
    # the cmake backend leaves CMake's compile commands for `check` and `build --plan`
    compdb = json.loads(compile_commands_path(tmp_path / "ws" / ".assemble", "own").read_text())
    own = [entry for entry in compdb if Path(entry["file"]) == tmp_path / "ws" / "forks" / "own" / "csrc" / "own.cpp"]
    assert own and "-DTORCH_TARGET_VERSION=0x020A000000000000" in own[0]["arguments"]


def _by_dep(report: BuildReport) -> dict[str, str]:
    return {dep.dep: dep.status for dep in report.deps}


def _keys(workspace: Workspace, cuda: str) -> dict[str, str]:
    options = BuildOptions(cuda=cuda)
    ctx = builder.BuildContext(workspace.state_dir, workspace.state_dir / "artifacts", None,  # type: ignore[arg-type]
                               resolve_toolchain(workspace, options, lambda _: None), workspace.manifest.bundle)
    deps = workspace.manifest.select([])
    checkouts = sync_checkouts(workspace, deps)
    return {dep.name: builder.prepare(ctx, dep, checkouts[dep.name].path, series_digest(dep)).key for dep in deps}


def test_piped_progress_names_each_unit_and_a_failing_compiler_cache_is_a_warning(example_ws: Path,
                                                                                  private_cache: Path) -> None:
    """--json keeps stderr's progress: one line per unit ninja finished, in order; a compiler
    cache whose writes fail (its directory holds files where sccache wants directories) is a
    warning that names sccache's error; a reuse reports the figures of the build that made it."""
    local = private_cache / "sccache"
    local.mkdir()
    for name in "0123456789abcdef":
        (local / name).write_text("a file where sccache wants a directory\n")
    built = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--only", "vecadd", "--json",
                     cache=private_cache)
    assert built.returncode == 0, built.stderr[-4000:]
    steps = [re.fullmatch(r"vecadd: compiling (\d+)/(\d+) (.+?) \(\d+\.\d s\)", line)
             for line in built.stderr.splitlines()
             if line.startswith("vecadd: compiling")]
    assert steps and all(steps), built.stderr
    total = int(steps[0][2])  # type: ignore[index]
    assert total >= 2 and [int(step[1]) for step in steps] == list(range(1, total + 1)), built.stderr  # type: ignore[index]
    assert "add_scaled.cpp" in [step[3] for step in steps], built.stderr  # type: ignore[index]
    warning = next(line for line in built.stderr.splitlines()
                   if line.startswith("warning: vecadd: the compiler cache failed"))
    assert "cache read/write error" in warning and "Not a directory" in warning, warning
    [dep] = json.loads(built.stdout)["deps"]
    assert "Not a directory" in dep["compiler_cache"]["problem"] and dep["compiler_cache"]["cache_errors"] > 0

    again = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--only", "vecadd", "--json",
                     cache=private_cache)
    assert again.returncode == 0, again.stderr[-4000:]
    [reused] = json.loads(again.stdout)["deps"]
    assert reused["status"] == "cached" and reused["compiler_cache"] == {**dep["compiler_cache"], "reused": True}
    assert "the compiler cache failed" not in again.stderr  # nothing was compiled this time


def test_a_partial_build_merges_gates_and_verifies_only_what_was_built(example_ws: Path, private_cache: Path) -> None:
    """`build --only DEP --partial --verify`: the dependencies built, merged into a wheel labelled
    partial, gated and verified; the others are not rows of the verify matrix."""
    built = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--only", "vecadd", "--partial",
                     "--verify", "--json", cache=private_cache)
    assert built.returncode == 0, built.stderr[-4000:]
    report = json.loads(built.stdout)
    wheel = Path(report["wheel"])
    assert wheel.parent == example_ws / "dist" / "partial"
    assert "+cu132.partial.vecadd-" in wheel.name and report["partial"] == ["scalekit", "rowsum"]
    assert [(d["dep"], d["verdict"]) for d in report["deps"]] == [("vecadd", "STABLE")]
    assert {r["dep"] for r in report["verify"]["results"]} == {"vecadd"} and report["verify"]["ok"]
    assert not list((example_ws / "dist").glob("*.whl"))  # a release job's dist/*.whl finds none


def test_a_stable_audit_is_done_only_when_the_wheel_also_passed_verify_and_this_gate(example_ws: Path,
                                                                                     private_cache: Path) -> None:
    """The build publishes its gate verdicts and verify results as evidence about the pin,
    series and recipe: STABLE with a verify FAIL is "in progress", STABLE and verified is
    "done", and evidence from another assembler's gate counts for nothing."""
    manifest = example_ws / "deps.toml"
    original = manifest.read_text()
    smoke = "import stable_abi_example.vecadd as vecadd\n"
    assert smoke in original
    manifest.write_text(original.replace('verify-torch = ["2.13.0", "2.14.1"]', 'verify-torch = ["2.13.0"]')
                        .replace(smoke, smoke + "raise SystemExit('this wheel does not work')\n", 1))
    failed = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--only", "vecadd", "--partial",
                      "--verify", "--json", cache=private_cache)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert json.loads(failed.stdout)["deps"][0]["verdict"] == "STABLE"

    def migrated() -> tuple[str, dict]:
        result = assemble("-C", str(example_ws), "patches", "vecadd", "--format", "json", cache=private_cache)
        assert result.returncode == 0, result.stderr[-3000:]
        [dep] = json.loads(result.stdout)["deps"]
        return dep["migrated_on_fork"], dep["migration_evidence"]

    verdict, evidence = migrated()
    assert verdict == "in progress" and evidence["build"]["verify_failed"] == ["2.13.0"], evidence
    assert "build audit: STABLE, verify FAIL on torch 2.13.0" in evidence["summary"]

    manifest.write_text(original.replace('verify-torch = ["2.13.0", "2.14.1"]', 'verify-torch = ["2.13.0"]'))
    passed = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--only", "vecadd", "--partial",
                      "--verify", "--json", cache=private_cache)
    assert passed.returncode == 0, passed.stderr[-3000:]
    verdict, evidence = migrated()
    assert verdict == "done" and evidence["build"]["passes"] and evidence["build"]["verified"] == ["2.13.0"], evidence

    [record] = (private_cache / "evidence" / "vecadd").glob("*-build.json")
    record.write_text(record.read_text().replace(json.loads(record.read_text())["audit"], "0" * 32))  # an older gate's
    verdict, evidence = migrated()
    assert verdict == "not checked" and "by another assembler's gate" in evidence["summary"], evidence
