"""`assemble check` on the example workspace: real g++, the hermetic nvcc 13.2's own preprocessor
passes and the torch 2.13.0 headers of the cached build environment. The example's migrated
series is CLEAN; a half-migrated series, a missing header, pybind11 and Python.h without the
limited API each get their verdict, with the include chain and the exit code; the evidence
`assemble patches` reads follows the pin, the series and local edits."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from assembler.audit.gate import Verdict
from assembler.builder.units import TranslationUnit, compile_commands_path, translation_units
from assembler.check.evidence import check_evidence
from assembler.errors import InputError
from assembler.workspace import open_workspace
from tests.build_support import HERMETIC_CUDA, assemble, example_copy

pytestmark = pytest.mark.integration

# A small library of its own next to the example's add_scaled.cpp, one file per finding.
EXTRA_SOURCES = {
    "compat.h": "#pragma once\n// the old way, hidden one include deep\n#include <torch/extension.h>\n",
    "chain.cpp": "#include <torch/headeronly/core/ScalarType.h>\n#include \"compat.h\"\n",
    "feature.cpp": (
        "#include <torch/csrc/stable/c/shim.h>\n"
        "// torch 2.11 added this shim function; torch-target 2.10 hides its declaration\n"
        "int32_t newest_dtype() { return torch_dtype_float8_e8m0fnu(); }\n"
    ),
    "missing.cpp": "#include <torch/headeronly/core/ScalarType.h>\n#include \"generated/config.h\"\n",
    "pybind.cpp": "#include <pybind11/pybind11.h>\n",
    "python.cpp": "#undef Py_LIMITED_API\n#include <Python.h>\n",
}


def _check(ws: Path, cache: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    result = assemble("-C", str(ws), "check", "--cuda", HERMETIC_CUDA, "--json", *args, cache=cache)
    assert result.stdout, result.stderr[-3000:]
    document = json.loads(result.stdout)
    if "deps" in document:  # schema 2: a list keyed "name", as in every command; by name for the assertions
        assert document["schema"] == 2 and all("name" in entry for entry in document["deps"])
        document["deps"] = {entry["name"]: entry for entry in document["deps"]}
    return result, document


def _units(report: dict, dep: str) -> dict[str, dict]:
    return {unit["source"]: unit for unit in report["deps"][dep]["units"]}


def _truncate_series(ws: Path, dep: str, keep: int) -> None:
    """Keep the first ``keep`` patches of ``dep``'s series: a migration half done."""
    patches = ws / "patches" / dep
    series = [line for line in (patches / "series").read_text().splitlines() if line and not line.startswith("#")]
    for name in series[keep:]:
        (patches / name).unlink()
    (patches / "series").write_text("\n".join(series[:keep]) + "\n")


def _migrated(ws: Path, cache: Path) -> dict[str, tuple[str, dict]]:
    """`assemble patches`' "migrated on fork" per dependency, with the evidence it rests on."""
    result = assemble("-C", str(ws), "patches", "--format", "json", cache=cache)
    assert result.returncode == 0, result.stderr[-3000:]
    return {d["name"]: (d["migrated_on_fork"], d["migration_evidence"]) for d in json.loads(result.stdout)["deps"]}


def test_example_is_clean_cached_and_leaves_evidence(example_ws: Path, private_cache: Path) -> None:
    result, report = _check(example_ws, private_cache)
    assert result.returncode == 0, result.stderr[-3000:]
    assert report["schema"] == 2 and report["command"] == "check" and report["ok"] is True and report["exit_code"] == 0
    assert report["torch"].startswith("2.13.0") and report["nvcc"].startswith(HERMETIC_CUDA + ".")
    assert {entry["verdict"] for entry in report["deps"].values()} == {"CLEAN"}  # every dependency of the example
    for dep, source in (("vecadd", "csrc/add_scaled.cpp"), ("scalekit", "csrc/scale.cu")):
        entry = report["deps"][dep]
        assert entry["verdict"] == "CLEAN" and (entry["clean"], entry["total"]) == (1, 1), entry
        assert entry["summary"] == "1 of 1 translation units clean" and entry["error"] is None
        assert entry["cached"] is False and entry["key"] and entry["obtained"]
        unit = _units(report, dep)[source]
        assert unit["verdict"] == "CLEAN" and unit["seconds"] > 0
        assert not (unit["unstable"] or unit["symbols"] or unit["not_limited"] or unit["missing"] or unit["errors"])
    assert _units(report, "vecadd")["csrc/add_scaled.cpp"]["passes"] == ["c++", "syntax"]
    assert _units(report, "scalekit")["csrc/scale.cu"]["passes"] == ["host", "device 9.0a"]  # nvcc's own passes
    assert "vecadd: CLEAN, 1 of 1 translation units clean" in result.stderr  # progress: one line per dependency

    again, second = _check(example_ws, private_cache)
    assert again.returncode == 0
    assert {"vecadd", "scalekit"} <= set(second["deps"])
    assert all(entry["cached"] for entry in second["deps"].values()), second["deps"]
    assert second["deps"]["vecadd"]["key"] == report["deps"]["vecadd"]["key"]

    workspace = open_workspace(example_ws)
    evidence = check_evidence(workspace, workspace.manifest.deps["scalekit"])
    assert evidence is not None and evidence.done and evidence.summary == "1 of 1 translation units clean"
    assert evidence.verdicts == {"csrc/scale.cu": "CLEAN"}
    assert evidence.obtained == report["deps"]["scalekit"]["obtained"]
    # `patches` says "done" on this evidence alone (nothing was built), and names it
    status = _migrated(example_ws, private_cache)
    assert status["scalekit"][0] == "done", status
    assert status["scalekit"][1]["check"]["clean"] == 1 and status["scalekit"][1]["build"] is None
    assert status["scalekit"][1]["summary"].startswith("check: 1 of 1 translation units clean")
    manifest = example_ws / "deps.toml"
    original = manifest.read_text()
    manifest.write_text(original.replace('include-dirs = ["csrc"] ',
                                         'defines = ["SCALE_FAST=1"]\ninclude-dirs = ["csrc"] '))
    changed = open_workspace(example_ws)
    assert changed.manifest.deps["scalekit"].build.extensions[0].defines == ("SCALE_FAST=1",)
    assert check_evidence(changed, changed.manifest.deps["scalekit"]) is None  # a check of another recipe
    manifest.write_text(original)

    # evidence is keyed by pin, series and recipe: another workspace with the same deps.toml and
    # patches (not even checked out) reads the same, and `patches` there says the same
    other = open_workspace(example_copy(example_ws.parent / "other"))
    assert check_evidence(other, other.manifest.deps["scalekit"]) == evidence
    assert _migrated(other.root, private_cache)["scalekit"] == status["scalekit"]

    # a local edit is checked (a new key), but it is not evidence about the pinned series: the
    # evidence stays the check of the pin and series
    source = example_ws / "forks" / "vecadd" / "csrc" / "add_scaled.cpp"
    source.write_text(source.read_text() + "\n// local edit\n")
    edited, third = _check(example_ws, private_cache, "vecadd")
    assert edited.returncode == 0 and list(third["deps"]) == ["vecadd"]
    assert third["deps"]["vecadd"]["cached"] is False
    assert third["deps"]["vecadd"]["key"] != report["deps"]["vecadd"]["key"]
    kept = check_evidence(workspace, workspace.manifest.deps["vecadd"])
    assert kept is not None and kept.obtained == report["deps"]["vecadd"]["obtained"]


def test_half_migrated_series_is_unstable_and_the_build_agrees(example_ws: Path, private_cache: Path) -> None:
    _truncate_series(example_ws, "vecadd", 1)  # header-only checks, still at::Tensor and TORCH_LIBRARY
    _truncate_series(example_ws, "scalekit", 1)
    result, report = _check(example_ws, private_cache)
    assert result.returncode == 1, result.stderr[-3000:]
    assert report["ok"] is False and report["exit_code"] == 1
    vecadd = _units(report, "vecadd")["csrc/add_scaled.cpp"]
    assert vecadd["verdict"] == "UNSTABLE"
    assert [(item["header"], item["chain"]) for item in vecadd["unstable"]] == [
        ("ATen/ATen.h", ["csrc/add_scaled.cpp:1"]), ("torch/library.h", ["csrc/add_scaled.cpp:4"]),
    ]
    assert vecadd["passes"] == ["c++"]  # no syntax pass on a unit already proven unstable
    scalekit = _units(report, "scalekit")["csrc/scale.cu"]
    assert scalekit["verdict"] == "UNSTABLE"
    assert {item["header"] for item in scalekit["unstable"]} == {
        "ATen/ATen.h", "ATen/cuda/CUDAContext.h", "c10/cuda/CUDAGuard.h", "torch/library.h",
    }
    assert report["deps"]["scalekit"]["summary"] == "0 of 1 translation units clean"

    text = assemble("-C", str(example_ws), "check", "vecadd", "--cuda", HERMETIC_CUDA, cache=private_cache)
    assert text.returncode == 1
    assert re.search(r"<ATen/ATen\.h> is outside the Stable ABI .* included from csrc/add_scaled\.cpp:1",
                     text.stdout), text.stdout

    workspace = open_workspace(example_ws)
    evidence = check_evidence(workspace, workspace.manifest.deps["vecadd"])
    assert evidence is not None and not evidence.done and (evidence.clean, evidence.total) == (0, 1)
    assert evidence.verdicts == {"csrc/add_scaled.cpp": "UNSTABLE"}
    status = _migrated(example_ws, private_cache)
    assert status["vecadd"][0] == "in progress", status
    assert status["vecadd"][1]["summary"].startswith("check: 0 of 1 translation units clean")
    markdown = assemble("-C", str(example_ws), "patches", "--format", "markdown", cache=private_cache).stdout
    assert "in progress (1 patch on" in markdown and "check: 0 of 1 translation units clean" in markdown, markdown

    # what check says is exactly where the build stops
    build = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--only", "vecadd", cache=private_cache)
    assert build.returncode == 6, build.stderr[-3000:]
    assert "still includes <ATen/ATen.h> from csrc/add_scaled.cpp:1" in build.stderr


def test_every_verdict_with_its_evidence(example_ws: Path, private_cache: Path) -> None:
    result, _ = _check(example_ws, private_cache, "vecadd")  # creates forks/vecadd
    assert result.returncode == 0
    csrc = example_ws / "forks" / "vecadd" / "csrc"
    for name, text in EXTRA_SOURCES.items():
        (csrc / name).write_text(text)
    manifest = example_ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace(
        'sources = ["csrc/add_scaled.cpp"]', 'sources = ["csrc/add_scaled.cpp", "csrc/[a-z]*.cpp"]'))

    result, report = _check(example_ws, private_cache, "vecadd")
    assert result.returncode == 1, result.stderr[-3000:]
    units = _units(report, "vecadd")
    assert {source: unit["verdict"] for source, unit in units.items()} == {
        "csrc/add_scaled.cpp": "CLEAN", "csrc/chain.cpp": "UNSTABLE", "csrc/feature.cpp": "UNSTABLE",
        "csrc/missing.cpp": "INCOMPLETE", "csrc/pybind.cpp": "NOT-LIMITED", "csrc/python.cpp": "NOT-LIMITED",
    }
    assert report["deps"]["vecadd"]["summary"] == "1 of 6 translation units clean"
    assert units["csrc/chain.cpp"]["unstable"] == [
        {"header": "torch/extension.h", "chain": ["csrc/chain.cpp:2", "csrc/compat.h:3"], "pass": "c++"},
    ]
    assert units["csrc/feature.cpp"]["symbols"] == [
        {"symbol": "torch_dtype_float8_e8m0fnu", "at": "csrc/feature.cpp:3", "since": "2.11.0"},
    ]
    assert units["csrc/feature.cpp"]["passes"] == ["c++", "syntax", "syntax (target 2.13)"]
    assert units["csrc/missing.cpp"]["missing"] == [{"header": "generated/config.h",
                                                     "included_from": ["csrc/missing.cpp:2"]}]
    pybind = units["csrc/pybind.cpp"]["not_limited"]
    assert [(item["header"], item["chain"]) for item in pybind] == [("pybind11/pybind11.h", ["csrc/pybind.cpp:1"])]
    python = units["csrc/python.cpp"]["not_limited"]
    assert [(item["header"], item["chain"]) for item in python] == [("Python.h", ["csrc/python.cpp:2"])]
    assert "without Py_LIMITED_API" in python[0]["reason"]

    # --preprocess-only: the shim call hidden by the torch-target is no longer seen
    result, report = _check(example_ws, private_cache, "vecadd", "--preprocess-only")
    assert _units(report, "vecadd")["csrc/feature.cpp"]["verdict"] == "CLEAN"


def test_incomplete_alone_fails_and_is_never_clean(example_ws: Path, private_cache: Path) -> None:
    result, _ = _check(example_ws, private_cache, "vecadd")
    source = example_ws / "forks" / "vecadd" / "csrc" / "add_scaled.cpp"
    source.write_text('#include "cutlass/cutlass.h"  // a submodule that is not checked out\n' + source.read_text())
    result, report = _check(example_ws, private_cache, "vecadd")
    assert result.returncode == 1
    entry = report["deps"]["vecadd"]
    assert entry["verdict"] == "INCOMPLETE" and entry["clean"] == 0
    assert _units(report, "vecadd")["csrc/add_scaled.cpp"]["missing"] == [
        {"header": "cutlass/cutlass.h", "included_from": ["csrc/add_scaled.cpp:1"]},
    ]


def test_keeps_going_past_a_dependency_it_cannot_check(example_ws: Path, private_cache: Path) -> None:
    manifest = example_ws / "deps.toml"
    text = manifest.read_text().replace('sources = ["csrc/scale.cu"]', 'sources = ["csrc/scale.cu", "csrc/gone.cu"]')
    manifest.write_text(text)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "csrc/gone.cu" in row)
    result, report = _check(example_ws, private_cache)
    assert result.returncode == 2
    assert report["deps"]["vecadd"]["verdict"] == "CLEAN"  # checked although scalekit could not be
    error = report["deps"]["scalekit"]["error"]
    assert report["deps"]["scalekit"]["verdict"] is None and error["exit_code"] == 2
    assert error["message"].startswith(f"{manifest}:{line}:") and "csrc/gone.cu does not exist" in error["message"]
    plain = assemble("-C", str(example_ws), "check", "--cuda", HERMETIC_CUDA, cache=private_cache)
    assert plain.returncode == 2 and "scalekit: not checked" in plain.stdout and "Traceback" not in plain.stderr


def test_setuptools_units_from_the_compile_commands_of_its_build(example_ws: Path, private_cache: Path) -> None:
    """rowsum builds with its own setup.py; without sources in its recipe, check reads the
    compile commands that build recorded (and before any build says how to fix it)."""
    manifest = example_ws / "deps.toml"
    text = manifest.read_text()
    assert 'sources = ["csrc/rowsum.cpp"]' in text
    manifest.write_text(text.replace('sources = ["csrc/rowsum.cpp"]', "# sources: from the build's compile commands"))
    result, report = _check(example_ws, private_cache, "rowsum")
    assert result.returncode == 2 and "build it once" in report["deps"]["rowsum"]["error"]["hint"]
    build = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--only", "rowsum", cache=private_cache)
    assert build.returncode == 0, build.stderr[-3000:]
    result, report = _check(example_ws, private_cache, "rowsum")
    assert result.returncode == 0, result.stderr[-3000:]
    [unit] = report["deps"]["rowsum"]["units"]
    assert (unit["source"], unit["origin"], unit["verdict"], unit["passes"]) == ("csrc/rowsum.cpp", "compile-commands",
                                                                                 "CLEAN", ["c++", "syntax"])


SETUPTOOLS_MANIFEST = """\
[bundle]
name = "b"
version = "1.0"

[deps.lib]
upstream = "https://example.invalid/lib.git"
commit = "0000000000000000000000000000000000000001"

[deps.lib.build]
backend = "setuptools"
{recipe}
"""


def _setuptools_ws(tmp_path: Path, recipe: str) -> Path:
    ws = tmp_path / "ws"
    (ws / "forks" / "lib" / "csrc" / "kernels").mkdir(parents=True)
    for name in ("csrc/api.cpp", "csrc/kernels/a.cu", "csrc/kernels/b.cu", "csrc/kernels/note.txt"):
        (ws / "forks" / "lib" / name).write_text("// source\n")
    (ws / "deps.toml").write_text(SETUPTOOLS_MANIFEST.format(recipe=recipe))
    return ws


def test_units_of_a_setuptools_recipe_from_sources_globs(tmp_path: Path) -> None:
    ws = _setuptools_ws(tmp_path,
                        'sources = ["csrc/api.cpp", "csrc/kernels/*.cu"]\ninclude-dirs = ["csrc"]\n'
                        'defines = ["LIB_FAST=1"]')
    workspace = open_workspace(ws)
    units = translation_units(workspace, workspace.manifest.deps["lib"])
    checkout = ws / "forks" / "lib"
    assert [(u.source, u.language, u.defines) for u in units] == [
        ("csrc/api.cpp", "cxx", ("LIB_FAST=1",)),
        ("csrc/kernels/a.cu", "cuda", ("LIB_FAST=1", "USE_CUDA")),
        ("csrc/kernels/b.cu", "cuda", ("LIB_FAST=1", "USE_CUDA")),
    ]
    assert all(u.include_dirs == (checkout.resolve() / "csrc",) and u.origin == "recipe" for u in units)
    assert all(u.std is None for u in units)  # setuptools: torch.utils.cpp_extension's default, read by check


def test_helper_units_carry_the_standard_cmake_compiles_them_with(example_ws: Path) -> None:
    manifest = example_ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace(
        'python-packages = ["vecadd"]', 'cmake-args = ["-DCMAKE_CXX_STANDARD=20"]\npython-packages = ["vecadd"]'))
    workspace = open_workspace(example_ws)
    for dep in ("vecadd", "scalekit"):
        (example_ws / "forks" / dep / "csrc").mkdir(parents=True)
        for source in workspace.manifest.deps[dep].build.extensions[0].sources:
            (example_ws / "forks" / dep / source).write_text("// source\n")
    [vecadd] = translation_units(workspace, workspace.manifest.deps["vecadd"])
    [scalekit] = translation_units(workspace, workspace.manifest.deps["scalekit"])
    assert (vecadd.language, vecadd.std, vecadd.defines, vecadd.extension) == ("cxx", "gnu++20", (), "_vecadd_C")
    assert (scalekit.language, scalekit.std, scalekit.defines) == ("cuda", "c++17", ("USE_CUDA",))  # CUDA_STANDARD 17


@pytest.mark.parametrize(("recipe", "value", "problem"), [
    ('sources = ["csrc/*.cc"]', "csrc/*.cc", "csrc/*.cc matches no file"),
    ('sources = ["csrc/api.cpp"]\ninclude-dirs = ["csrc", "third_party/cutlass/include"]',
     "third_party/cutlass/include", "include dir third_party/cutlass/include is not a directory"),
])
def test_units_name_the_recipe_line_of_a_missing_path(tmp_path: Path, recipe: str, value: str, problem: str) -> None:
    ws = _setuptools_ws(tmp_path, recipe)
    workspace = open_workspace(ws)
    line = next(n for n, row in enumerate((ws / "deps.toml").read_text().splitlines(), 1) if value in row)
    with pytest.raises(InputError,
                       match=rf"^{re.escape(str(ws / 'deps.toml'))}:{line}:\d+: deps\.lib\.build\.\S+: "
                             rf"{re.escape(problem)}"):
        translation_units(workspace, workspace.manifest.deps["lib"])


def test_units_from_the_last_build_compile_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the record lives in the cache: never the developer's
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    ws = _setuptools_ws(tmp_path, "")
    workspace = open_workspace(ws)
    dep = workspace.manifest.deps["lib"]
    with pytest.raises(InputError,
                       match=r"deps\.toml:\d+:\d+: deps\.lib\.build: the setuptools backend's translation units are "
                             r"unknown"):
        translation_units(workspace, dep)
    checkout = ws / "forks" / "lib"
    build = tmp_path / "build"
    compdb = compile_commands_path(workspace.state_dir, "lib")
    compdb.parent.mkdir(parents=True)
    compdb.write_text(json.dumps([
        {"directory": str(checkout), "file": "csrc/api.cpp",
         "arguments": ["c++", "-std=c++20", "-Icsrc", "-isystem", "/torch/include",
                       "-DTORCH_TARGET_VERSION=0x020A000000000000",
                       "-DTORCH_EXTENSION_NAME=_lib_C", "-c", "csrc/api.cpp", "-o", "api.o"]},
        {"directory": str(build), "file": str(checkout / "csrc/kernels/a.cu"),
         "command": f"nvcc -I{checkout}/csrc --define-macro USE_CUDA -Xcompiler -fPIC,-DHOSTONLY -c "
                    f"{checkout}/csrc/kernels/a.cu"},
        {"directory": str(build), "file": str(build / "generated_stub.cpp"),
         "arguments": ["c++", "-c", "generated_stub.cpp"]},
    ]))
    units = translation_units(workspace, dep)
    assert units == [
        TranslationUnit(checkout.resolve() / "csrc/api.cpp", "csrc/api.cpp", "cxx",
                        (checkout / "csrc", Path("/torch/include")), ("TORCH_EXTENSION_NAME=_lib_C",),
                        origin="compile-commands",
                        std="c++20"),
        TranslationUnit(checkout.resolve() / "csrc/kernels/a.cu", "csrc/kernels/a.cu", "cuda",
                        (checkout / "csrc",), ("USE_CUDA", "HOSTONLY"), origin="compile-commands"),
    ]


def test_check_without_checkout_of_a_bad_name_is_a_clean_error(example_ws: Path, private_cache: Path) -> None:
    result = assemble("-C", str(example_ws), "check", "vecad", cache=private_cache)
    assert result.returncode == 2 and "did you mean 'vecadd'" in result.stderr and "Traceback" not in result.stderr
    assert not (example_ws / "forks").exists() or not any((example_ws / "forks").iterdir())


def test_a_dependency_compiling_nothing_passes_but_is_no_evidence() -> None:
    from assembler.check.run import CheckReport, DepCheck
    from assembler.check.unit_scan import UnitResult

    nothing = DepCheck("pure-python")
    assert nothing.verdict == "no extensions" and nothing.summary == "0 of 0 translation units clean"
    incomplete = DepCheck("lib", units=[UnitResult("a.cpp", "cxx", None, "recipe", verdict=Verdict.INCOMPLETE)])
    assert CheckReport([nothing]).exit_code == 0
    assert CheckReport([nothing, incomplete]).exit_code == 1  # INCOMPLETE is never clean

