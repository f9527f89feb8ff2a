"""`assemble assess` on the example's unmigrated normkit (examples/stable-abi/migrate): real g++
with the torch 2.13.0 headers of the cached build environment decides which lines the build
compiles. Every use is counted exactly, code behind a define the recipe does not set is not a
use (and becomes one when the recipe sets it), and the summary's floor and pybind11 surface
are what the sources say."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.build_support import assemble, example_copy

pytestmark = pytest.mark.integration

# Counted by hand in upstream-src/normkit/01-rms-norm/csrc (normkit.h and normkit.cpp), less
# what `#ifdef NORMKIT_WITH_CUDA` and `#ifndef NORMKIT_NO_LEGACY` leave out of the build.
EXPECTED = {
    "include-torch-extension": 1, "pybind11-module": 1, "pybind11-arg": 9, "tensor-type": 40, "scalar-type": 3,
    "tensor-options": 2, "device-guard": 1, "torch-check": 7, "contiguous": 7, "view": 2, "data-ptr": 12,
    "empty-like": 3, "empty": 1, "zeros": 1,
}


@pytest.fixture(name="migrate_ws")
def migrate_ws_fixture(tmp_path: Path) -> Path:
    return example_copy(tmp_path / "ws") / "migrate"


def _assess(ws: Path, cache: Path) -> dict:
    result = assemble("-C", str(ws), "assess", "normkit", "--json", cache=cache)
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    # a list keyed name, as check's
    assert document["schema"] == 2 and [dep["name"] for dep in document["deps"]] == ["normkit"]
    return document["deps"][0]


def _counts(dep: dict) -> Counter[str]:
    return Counter({api["rule"]: api["count"] for family in dep["families"] for api in family["apis"]})


def test_assess_counts_every_use_of_the_example(migrate_ws: Path, private_cache: Path) -> None:
    dep = _assess(migrate_ws, private_cache)
    assert _counts(dep) == EXPECTED
    summary = dep["summary"]
    assert summary["uses"] == sum(EXPECTED.values()) == 90  # shift->contiguous() is one
    assert (summary["apis"], summary["files"]) == (14, 2)
    # the device guard is mechanical now (through migrate's helper header)
    assert summary["kinds"] == {"mechanical": 73, "judgment": 15, "none": 2}
    # contiguous, view and const_/mutable_data_ptr came with torch 2.10 (their headers' guards say so)
    assert summary["torch_floor"] == "2.10" and summary["floor_set_by"] == ["contiguous", "data-ptr", "view"]
    assert not summary["raises_torch_target"]
    progress = summary["progress"]
    assert progress["line"] == "0 of 1 units clean, 90 uses left (17 need judgment)"
    assert (progress["units_clean"], progress["units"], progress["uses"], progress["judgment"]) == (0, 1, 90, 17)
    head = subprocess.run(["git", "-C", str(migrate_ws / "forks" / "normkit"), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert progress["evidence"]["source"] == "assemble assess" and progress["evidence"]["head"] == head
    assert dep["pybind11"] | {"functions": None} == {
        "modules": 1, "helpers": 0, "defs": 4, "args": 9, "tuple_parameters": 1, "tuple_returns": 1,
        "reference_scalars": 1, "functions": None}
    apis = {api["rule"]: api for family in dep["families"] for api in family["apis"]}
    assert apis["view"]["since_source"] == "torch headers" and apis["view"]["stable"] == "torch::stable::view(t, sizes)"
    assert apis["tensor-options"]["stable"] is None and "dtype" in apis["tensor-options"]["way_round"]
    assert apis["include-torch-extension"]["uses"][0]["at"] == "csrc/normkit.h:3"
    source = (migrate_ws / "forks" / "normkit" / "csrc" / "normkit.cpp").read_text().splitlines()
    for api in apis.values():
        for use in api["uses"]:
            file, line = use["at"].rsplit(":", 1)
            text = (migrate_ws / "forks" / "normkit" / file).read_text().splitlines()[int(line) - 1]
            assert use["text"].split("(")[0].strip() in text, (api["rule"], use)
    cuda_stream = next(n for n, text in enumerate(source, 1) if "getCurrentCUDAStream" in text)
    assert not any(use["at"] == f"csrc/normkit.cpp:{cuda_stream}" for api in apis.values() for use in api["uses"])

    markdown = assemble("-C", str(migrate_ws), "assess", "normkit", "--format", "markdown", cache=private_cache)
    assert markdown.returncode == 0
    assert "## normkit: 90 uses of 14 APIs in 2 files" in markdown.stdout
    assert "| t.view(sizes) | 2 | torch::stable::view(t, sizes) | 2.10 | mechanical |" in markdown.stdout
    assert (f"- progress: 0 of 1 units clean, 90 uses left (17 need judgment) (assemble assess of {head[:12]} at "
            in markdown.stdout)


def test_patches_prints_the_progress_assess_counted(migrate_ws: Path, private_cache: Path) -> None:
    """One line, one computation (migration/progress.py): `patches` reads what the assess of the
    pin plus the series counted and prints the same line, naming that run; an assess of a
    checkout with edits is no evidence about the pin."""
    before = assemble("-C", str(migrate_ws), "patches", "normkit", cache=private_cache)
    assert before.returncode == 0, before.stderr[-2000:]
    assert "migration progress: not assessed (`assemble assess normkit`)" in before.stdout
    progress = _assess(migrate_ws, private_cache)["summary"]["progress"]
    listed = assemble("-C", str(migrate_ws), "patches", "normkit", "--json", cache=private_cache)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert json.loads(listed.stdout)["deps"][0]["migration_progress"] == progress
    text = assemble("-C", str(migrate_ws), "patches", "normkit", cache=private_cache).stdout
    evidence = progress["evidence"]
    assert (f"migration progress: {progress['line']} (assemble assess of {evidence['head'][:12]} at "
            f"{evidence['obtained']}, "
            f"torch {evidence['torch']}, rules {evidence['rules_version']})") in text
    markdown = assemble("-C", str(migrate_ws), "patches", "normkit", "--format", "markdown", cache=private_cache).stdout
    assert f"migration progress: {progress['line']}" in markdown

    # an edit in the checkout: the assess of it is not published, the pin's evidence stays
    source = migrate_ws / "forks" / "normkit" / "csrc" / "normkit.cpp"
    source.write_text(source.read_text().replace("torch::Tensor", "torch::stable::Tensor", 1))
    edited = assemble("-C", str(migrate_ws), "assess", "normkit", "--json", cache=private_cache)
    assert json.loads(edited.stdout)["deps"][0]["summary"]["progress"]["uses"] == 89
    again = assemble("-C", str(migrate_ws), "patches", "normkit", "--json", cache=private_cache)
    assert json.loads(again.stdout)["deps"][0]["migration_progress"] == progress


def test_a_define_the_recipe_sets_decides_what_is_a_use(migrate_ws: Path, private_cache: Path) -> None:
    """Without NORMKIT_NO_LEGACY the legacy entry point is compiled, so its uses count; with
    NORMKIT_WITH_CUDA the stream is (headers of it this machine lacks are empty stand-ins)."""
    manifest = migrate_ws / "deps.toml"
    text = manifest.read_text()
    manifest.write_text(re.sub(r'defines = \["NORMKIT_NO_LEGACY"\]', 'defines = ["NORMKIT_WITH_CUDA"]', text))
    dep = _assess(migrate_ws, private_cache)
    counts = _counts(dep)
    assert counts - Counter(EXPECTED) == Counter({"tensor-type": 2, "aten-function": 1, "tensor-options": 1,
                                                  "pybind11-arg": 1, "cuda-stream": 1, "include-aten-cuda": 1})
    assert not dep["units"][0]["errors"]  # headers this machine lacks were preprocessed as empty stand-ins
