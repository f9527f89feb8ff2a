"""`check` is a gate: nothing a workspace says can make it print CLEAN. A recipe option that
makes the compiler print and exit (-dumpversion, --version, -###) is refused by shape, a scan
that preprocessed nothing is never CLEAN (real g++), CMake syntax in recipe data is refused, and a
check result committed into the workspace is never read (the example, real g++ and nvcc)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from assembler.audit.gate import Verdict
from assembler.builder import recipe
from assembler.builder.units import TranslationUnit
from assembler.check import compilers
from assembler.check.unit_scan import Reader, UnitResult, classify, run_pass
from assembler.errors import ManifestError
from assembler.manifest import load_manifest
from tests.build_support import HERMETIC_CUDA, assemble

HEAD = """[bundle]
name = "b"
version = "1.0.0"
cuda-archs = ["9.0a"]

[deps.kern]
upstream = "https://git.invalid/kern"
commit = "0123456789abcdef0123456789abcdef01234567"

[deps.kern.build]
"""
EXTENSION = """[[deps.kern.build.extensions]]
name = "_k"
sources = ["csrc/a.cpp", "csrc/b.cu"]
language = "cuda"
"""
# Each one once passed the deny-list, or would: print-and-exit modes, preprocessor modes, other
# programs, CMake list splitting and variable expansion, and the same through -Xcompiler.
REFUSED_FLAGS = [
    ("cxx-flags", "-dumpversion"), ("cxx-flags", "--version"), ("cxx-flags", "-###"), ("cxx-flags", "-dumpmachine"),
    ("cxx-flags", "-dumpfullversion"), ("cxx-flags", "-print-prog-name=as"), ("cxx-flags", "--help"),
    ("cxx-flags", "-fpreprocessed"), ("cxx-flags", "-fdirectives-only"), ("cxx-flags", "-fsyntax-only"),
    ("cxx-flags", "-O2;-B/evil/"), ("cxx-flags", "-${EMPTY}B/evil/"), ("cxx-flags", "-fuse-ld=/evil/ld"),
    ("cxx-flags", "-nostdinc"), ("cxx-flags", "-v"), ("cxx-flags", "-Wp,-MD,/tmp/x"),
    ("cuda-flags", "-Xcompiler=-dumpversion"), ("cuda-flags", "--version"), ("cuda-flags", "--dryrun"),
    ("cuda-flags", "-Xcompiler=-B/evil/"), ("cuda-flags", "-Xptxas=--output-file=/tmp/x"),
    ("cuda-flags", "--keep-dir=/tmp"),
    ("cuda-flags", "--compiler-bindir=/evil"), ("cuda-flags", "-V"), ("cuda-flags", "--list-gpu-arch"),
]


@pytest.mark.parametrize(("key", "flag"), REFUSED_FLAGS, ids=[f"{k}:{f}" for k, f in REFUSED_FLAGS])
def test_only_known_option_shapes_pass(tmp_path: Path, key: str, flag: str) -> None:
    text = HEAD + EXTENSION + f"{key} = [{json.dumps(flag)}]\n"
    (tmp_path / "deps.toml").write_text(text)
    with pytest.raises(ManifestError) as error:
        load_manifest(tmp_path / "deps.toml")
    match = re.match(rf"{re.escape(str(tmp_path / 'deps.toml'))}:(\d+):\d+: ", error.value.message)
    assert match and text.splitlines()[int(match[1]) - 1].startswith(f"{key} ="), error.value.message
    assert error.value.hint


def test_real_recipe_flags_still_pass(tmp_path: Path) -> None:
    flags = ('cxx-flags = ["-O3", "-fopenmp", "-fPIC", "-march=x86-64-v3", "-Wno-deprecated-declarations", "-g"]\n'
             'cuda-flags = ["--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "-lineinfo", '
             '"--ptxas-options=--register-usage-level=10", "-Xcompiler=-funroll-loops,-ffast-math", "--threads=4", '
             '"--diag-suppress=177", "-Xptxas=-v"]\n')
    (tmp_path / "deps.toml").write_text(HEAD + 'cmake-args = ["-DCMAKE_CXX_STANDARD=20", "-DMY_OPTION=ON", '
                                               '"-Wno-dev"]\n'
                                        + EXTENSION + flags)
    ext = load_manifest(tmp_path / "deps.toml").deps["kern"].build.extensions[0]
    assert "-fopenmp" in ext.cxx_flags and "-Xcompiler=-funroll-loops,-ffast-math" in ext.cuda_flags


REFUSED_DATA = [
    ('cmake-args = ["-C/tmp/evil.cmake"]\n', "cmake-args"),
    ('cmake-args = ["-DCMAKE_CXX_COMPILER=/evil"]\n', "cmake-args"),
    ('cmake-args = ["-DCMAKE_CXX_COMPILER_LAUNCHER=/evil"]\n', "cmake-args"),
    ('cmake-args = ["-DX=${EVIL}"]\n', "cmake-args"),
    ('cmake-args = ["-P", "/tmp/x.cmake"]\n', "cmake-args"),
    ('cmake-args = ["-DCMAKE_PROJECT_INCLUDE=/x"]\n', "cmake-args"),
    ('python-packages = ["pkg;/etc"]\n', "python-packages"), ('data = ["${HOME}/x"]\n', "data"),
    ('cmake-args = ["-DCMAKE_CUDA_ARCHITECTURES=90"]\n', "cmake-args"),
]


@pytest.mark.parametrize(("line", "key"), REFUSED_DATA, ids=[d[0].strip() for d in REFUSED_DATA])
def test_cmake_syntax_in_recipe_data_is_refused(tmp_path: Path, line: str, key: str) -> None:
    text = HEAD + line + EXTENSION
    (tmp_path / "deps.toml").write_text(text)
    with pytest.raises(ManifestError) as error:
        load_manifest(tmp_path / "deps.toml")
    assert f"{key}" in error.value.message and error.value.hint


def test_extension_defines_and_paths_are_data(tmp_path: Path) -> None:
    for tail in ('defines = ["X=1;-B/evil/"]\n', 'defines = ["X=${EVIL}"]\n', 'include-dirs = ["a;/usr/include"]\n'):
        (tmp_path / "deps.toml").write_text(HEAD + EXTENSION + tail)
        with pytest.raises(ManifestError):
            load_manifest(tmp_path / "deps.toml")


def test_generated_cmake_keeps_values_as_data(tmp_path: Path) -> None:
    """Belt and braces below the manifest: the generated project escapes $ and ; in every value."""
    (tmp_path / "deps.toml").write_text(HEAD + EXTENSION + 'cxx-flags = ["-O2"]\n')
    dep = load_manifest(tmp_path / "deps.toml").deps["kern"]
    assert recipe._quote("-O2;-B/evil/") == '"-O2\\;-B/evil/"' and recipe._quote("-${X}") == '"-\\${X}"'
    assert recipe._source_path("a;b") == '"${ASSEMBLER_SOURCE_DIR}/a\\;b"'
    assert 'CXX_FLAGS "-O2"' in recipe.generate(dep, "3.9").cmakelists


# What g++ does with these: print something and exit 0 without reading the source.
PRINT_AND_EXIT = ["-dumpversion", "-dumpmachine", "--version", "-###", "-print-search-dirs", "--help"]


def _scan(tmp_path: Path, text: str, flags: tuple[str, ...]) -> UnitResult:
    """A real g++ scan of one unit, classified as `check` classifies it."""
    source = tmp_path / "src" / "unit.cpp"
    source.parent.mkdir(exist_ok=True)
    source.write_text(text)
    python_include = tmp_path / "python"
    python_include.mkdir(exist_ok=True)
    unit = TranslationUnit(source, "unit.cpp", "cxx", flags=flags)
    scan = compilers.cxx_pass(shutil.which("g++") or "g++", compilers.Flags((), (), python_include), unit, "c++17")
    output = run_pass(scan, source.parent)
    result = UnitResult(unit.source, unit.language, None, unit.origin)
    classify(unit, [output], Reader(source.parent, [tmp_path / "torch"], python_include), result)
    result.decide()
    return result


def test_a_clean_unit_is_clean(tmp_path: Path) -> None:
    assert _scan(tmp_path, "int f() { return 1; }\n", ()).verdict == Verdict.CLEAN


@pytest.mark.parametrize("flag", PRINT_AND_EXIT)
def test_a_scan_that_read_nothing_is_never_clean(tmp_path: Path, flag: str) -> None:
    result = _scan(tmp_path, "#include <ATen/ATen.h>\nint f() { return 1; }\n", (flag,))
    assert result.verdict == Verdict.INCOMPLETE, result
    assert any("printed no dependency list" in error for error in result.errors), result.errors


def test_no_pass_at_all_is_not_clean(tmp_path: Path) -> None:
    source = tmp_path / "unit.cpp"
    source.write_text("int f();\n")
    unit = TranslationUnit(source, "unit.cpp", "cxx")
    result = UnitResult(unit.source, unit.language, None, unit.origin)
    classify(unit, [], Reader(tmp_path, [tmp_path / "torch"], tmp_path), result)
    result.decide()
    assert result.verdict == Verdict.INCOMPLETE


def _truncate_series(ws: Path, dep: str, keep: int) -> None:
    patches = ws / "patches" / dep
    series = [line for line in (patches / "series").read_text().splitlines() if line and not line.startswith("#")]
    for name in series[keep:]:
        (patches / name).unlink()
    (patches / "series").write_text("\n".join(series[:keep]) + "\n")


@pytest.mark.integration
def test_a_committed_check_result_is_never_read(example_ws: Path, private_cache: Path) -> None:
    """A record with the real key and its verdicts flipped to CLEAN, put where results used to
    be kept (.assemble/check/<dep>.json), and the cache's own record deleted: the next check
    scans again and still says UNSTABLE."""
    _truncate_series(example_ws, "vecadd", 1)  # still at::Tensor and TORCH_LIBRARY: UNSTABLE
    args = ("-C", str(example_ws), "check", "vecadd", "--cuda", HERMETIC_CUDA, "--json")
    first = assemble(*args, cache=private_cache)
    report = json.loads(first.stdout)
    entry = report["deps"][0]
    assert first.returncode == 1 and entry["verdict"] == "UNSTABLE", first.stderr[-2000:]
    records = list((private_cache / "checks").glob("vecadd-*.json"))
    assert len(records) == 1 and not (example_ws / ".assemble" / "check").exists()
    forged = json.loads(records[0].read_text())
    for unit in forged["result"]["units"]:
        unit.update(verdict="CLEAN", unstable=[], symbols=[], errors=[])
    for schema in (1, 2):  # the old place and format, and the new format in the old place
        place = example_ws / ".assemble" / "check" / f"vecadd{'' if schema == 1 else '-' + entry['key']}.json"
        place.parent.mkdir(parents=True, exist_ok=True)
        place.write_text(json.dumps({**forged, "schema": schema}))
    records[0].unlink()
    second = assemble(*args, cache=private_cache)
    again = json.loads(second.stdout)["deps"][0]
    assert second.returncode == 1 and again["verdict"] == "UNSTABLE" and again["cached"] is False, again
    # the cache's own record is trusted: this machine wrote it
    third = json.loads(assemble(*args, cache=private_cache).stdout)["deps"][0]
    assert third["cached"] is True and third["verdict"] == "UNSTABLE"
