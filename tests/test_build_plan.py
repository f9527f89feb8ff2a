"""`assemble build --plan`: each dependency's backend, translation units x archs and compile
jobs, resolved against a real checkout of the example workspace, compiling nothing (no
toolchain needed); a recipe path the checkout lacks is an error naming its deps.toml line, and
the other dependencies are still planned."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.build_support import assemble


@pytest.fixture(name="cache")
def cache_fixture(tmp_path: Path) -> Path:
    """An empty cache: planning needs mirrors of the repositories, no toolkit and no torch."""
    cache = tmp_path / "cache"
    cache.mkdir()
    return cache


def _plan(ws: Path, cache: Path, *args: str) -> tuple[int, dict]:
    result = assemble("-C", str(ws), "build", "--plan", "--json", *args, cache=cache)
    assert result.stdout, result.stderr[-3000:]
    document = json.loads(result.stdout)
    if "deps" in document:  # schema 2: a list keyed "name", as in every command; by name for the assertions
        assert all("name" in entry for entry in document["deps"])
        document["deps"] = {entry["name"]: entry for entry in document["deps"]}
    return result.returncode, document


def test_plan_of_the_example(example_ws: Path, cache: Path) -> None:
    manifest = example_ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace('cuda-archs = ["9.0a"]           # defaults',
                                                     'cuda-archs = ["9.0a", "10.0a"]  # defaults'))
    code, plan = _plan(example_ws, cache)
    assert code == 0
    assert (plan["schema"], plan["command"], plan["ok"]) == (2, "build-plan", True)
    deps = plan["deps"]
    assert list(deps) == ["vecadd", "scalekit", "rowsum"]
    summary = {name: (d["backend"], d["archs"], d["jobs"], d["arch_compilations"],
                      [(u["source"], u["compiler"], u["archs"]) for u in d["units"]]) for name, d in deps.items()}
    assert summary == {
        # one C++ unit plus the helper's generated PyInit stub
        "vecadd": ("helper", [], 2, 1, [("csrc/add_scaled.cpp", "c++", [])]),
        # one nvcc process compiles both architectures
        "scalekit": ("helper", ["9.0a", "10.0a"], 2, 2, [("csrc/scale.cu", "nvcc", ["9.0a", "10.0a"])]),
        # setuptools: the recipe's sources; torch.utils.cpp_extension writes its own module init
        "rowsum": ("setuptools", [], 1, 1, [("csrc/rowsum.cpp", "c++", [])]),
    }
    scale = deps["scalekit"]["units"][0]
    assert scale["include_dirs"] == [str(example_ws / "forks" / "scalekit" / "csrc")]
    assert "USE_CUDA" in scale["defines"] and scale["extension"] == "_scalekit_C"
    assert deps["rowsum"]["defines"][:2] == ["TORCH_TARGET_VERSION=0x020A000000000000", "Py_LIMITED_API=0x03090000"]
    assert deps["rowsum"]["checkout"] == str(example_ws / "forks" / "rowsum")
    # checked out, nothing compiled
    assert (example_ws / "forks" / "rowsum" / "setup.py").is_file()
    assert not (example_ws / ".assemble" / "build").exists() and not (cache / "artifacts").exists()
    assert not (cache / "toolchains").exists() and not (cache / "venvs").exists()

    text = assemble("-C", str(example_ws), "build", "--plan", "--only", "scalekit", cache=cache)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines() == [
        "scalekit (helper, torch-target 2.10, archs 9.0a 10.0a): 1 unit, 2 unit x arch compilations, 2 compile jobs",
        "  nvcc  csrc/scale.cu x 9.0a 10.0a",
    ]


def test_a_missing_source_or_include_dir_names_the_recipe_line(example_ws: Path, cache: Path) -> None:
    manifest = example_ws / "deps.toml"
    text = manifest.read_text()
    text = text.replace('sources = ["csrc/rowsum.cpp"]',
                        'sources = [\n  "csrc/rowsum.cpp",\n  "csrc/kernels/*.cpp",\n]')
    text = text.replace('include-dirs = ["csrc"]         # scale.cu',
                        'include-dirs = ["csrc", "third_party/include"]  # scale.cu')
    manifest.write_text(text)
    lines = text.splitlines()
    glob_line = next(n for n, line in enumerate(lines, 1) if '"csrc/kernels/*.cpp"' in line)
    include_line = next(n for n, line in enumerate(lines, 1) if '"third_party/include"' in line)

    code, plan = _plan(example_ws, cache)
    assert code == 2 and plan["ok"] is False
    deps = plan["deps"]
    assert deps["vecadd"]["error"] is None and deps["vecadd"]["jobs"] == 2  # the others are still planned
    rowsum, scalekit = deps["rowsum"]["error"], deps["scalekit"]["error"]
    assert re.match(rf"{re.escape(str(manifest))}:{glob_line}:3: deps\.rowsum\.build\.sources: csrc/kernels/\*\.cpp "
                    r"matches no file", rowsum["message"])
    column = lines[include_line - 1].index('"third_party/include"') + 1
    assert scalekit["message"].startswith(f"{manifest}:{include_line}:{column}: "
                                          "deps.scalekit.build.extensions.include-dirs: ")
    assert "third_party/include" in scalekit["message"] and rowsum["exit_code"] == scalekit["exit_code"] == 2

    human = assemble("-C", str(example_ws), "build", "--plan", cache=cache)
    assert human.returncode == 2
    assert f"deps.toml:{glob_line}:3" in human.stdout and f"deps.toml:{glob_line}:3" in human.stderr
    assert "error:" in human.stderr and "Traceback" not in human.stderr


def test_a_setuptools_recipe_without_sources_is_planned_after_its_first_build(example_ws: Path, cache: Path) -> None:
    manifest = example_ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace('sources = ["csrc/rowsum.cpp"]', ""))
    code, plan = _plan(example_ws, cache, "--only", "rowsum")
    assert code == 0 and plan["ok"]
    rowsum = plan["deps"]["rowsum"]
    assert (rowsum["units"] is None and rowsum["jobs"] == 0
            and "no build recorded compile commands yet" in rowsum["note"])


def test_plan_refuses_an_unknown_dependency(example_ws: Path, cache: Path) -> None:
    result = assemble("-C", str(example_ws), "build", "--plan", "--only", "rowsun", cache=cache)
    assert result.returncode == 2 and "did you mean 'rowsum'?" in result.stderr


def test_build_without_plan_still_needs_cuda(example_ws: Path, cache: Path) -> None:
    result = assemble("-C", str(example_ws), "build", cache=cache)
    assert result.returncode == 2 and "--cuda" in result.stderr


def test_a_plan_does_not_wait_for_the_workspace_lock(example_ws: Path, cache: Path) -> None:
    """A running build holds the lock for minutes: `build --plan` of checked-out dependencies
    reads them without it; one that still needs a checkout waits for it (and says who holds it)."""
    import os
    import subprocess
    import sys

    code, _ = _plan(example_ws, cache, "--only", "vecadd")  # checks vecadd out
    assert code == 0
    holding = ("import sys, time, pathlib\nfrom assembler.workspace import open_workspace\n"
               "sys.argv = ['assemble', 'build', '--cuda', '13.2']\n"
               f"with open_workspace(pathlib.Path({str(example_ws)!r})).lock():\n    print('held', flush=True)\n    "
               "time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", holding], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "ASSEMBLE_CACHE": str(cache)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        os.environ["ASSEMBLE_LOCK_TIMEOUT"] = "0.5"
        try:
            code, plan = _plan(example_ws, cache, "--only", "vecadd")
            assert code == 0 and plan["deps"]["vecadd"]["units"], plan
            waiting = assemble("-C", str(example_ws), "build", "--plan", "--only", "rowsum", cache=cache)
        finally:
            del os.environ["ASSEMBLE_LOCK_TIMEOUT"]
        assert (waiting.returncode == 8
                and f"held by pid {holder.pid} (`assemble build --cuda 13.2`" in waiting.stderr), waiting.stderr
    finally:
        holder.kill()
        holder.wait()
