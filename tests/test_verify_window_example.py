"""`assemble verify WHEEL --torch window` end to end on the example's wheel, built by the real
pipeline: the window is computed against this machine's find-links folder alone (its only torch
is 2.13.0, CPU), so it resolves to 2.13.0 and nothing is downloaded; the matrix comes back in
markdown and in JSON, and the CUDA dependency is SKIPPED on the CPU-only torch, with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assembler.manifest import load_manifest
from assembler.toolchain.pipconfig import pip_settings
from tests.build_support import HERMETIC_CUDA, assemble
from tests.conftest import run_assemble

pytestmark = pytest.mark.integration


def test_the_example_wheel_on_its_torch_window(example_ws: Path, private_cache: Path, build_env_path: Path) -> None:
    built = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--json", cache=private_cache)
    assert built.returncode == 0, built.stderr[-4000:]
    wheel = json.loads(built.stdout)["wheel"]
    links = pip_settings().find_links  # the machine's find-links: torch 2.13.0+cpu, the one torch tests may install
    assert links, "this test needs the machine's find-links folder with torch 2.13.0 (PIP_FIND_LINKS)"
    only_links = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": " ".join(links), "COLUMNS": "200"}
    ops = {name: len(dep.verify.ops) for name, dep in load_manifest(example_ws / "deps.toml").deps.items()}

    result = run_assemble("-C", str(example_ws), "verify", wheel, "--torch", "window", "--json", env=only_links)
    assert result.returncode == 0, result.stderr[-4000:]
    data = json.loads(result.stdout)
    window = data["window"]
    assert ([(r["version"], r["resolved"], r["label_cuda"]) for r in window["releases"]]
            == [("2.13.0", "2.13.0+cpu", "cpu")])
    assert (window["floor"]["version"].startswith("2.10")
            and {f["source"] for f in window["floors"]} >= {"symbols", "torch-target"})
    assert ([(t["requested"], t["installed"], t["build"]) for t in data["torch"]]
            == [("2.13.0", "2.13.0+cpu", "CPU-only")])
    # the full builds
    assert data["deps"] == [{"name": name, "profile": None} for name in ("vecadd", "scalekit", "rowsum")]
    cells = {cell["dep"]: cell for cell in data["results"]}
    for name in ("vecadd", "rowsum"):
        assert cells[name]["status"] == "PASS" and cells[name]["text"] == f"PASS {ops[name]}/{ops[name]} ops, smoke"
    scalekit = cells["scalekit"]
    assert scalekit["status"] == "SKIPPED" and scalekit["text"] == "SKIPPED"
    assert "CUDA-only" in scalekit["reason"] and "torch 2.13.0+cpu is a CPU-only build" in scalekit["reason"]
    assert [check["kind"] for check in scalekit["checks"]] == ["cuda"]  # skipped before loading, never FAILed
    assert "torch window: 2.13.0+cpu (index: " in " ".join(result.stderr.split())
    window_lines = result.stderr[result.stderr.index("torch window:"):result.stderr.index("installing ")].splitlines()
    assert len(window_lines) > 2 and all(len(line) <= 80 for line in window_lines), window_lines  # wrapped, not cut

    markdown = run_assemble("-C", str(example_ws), "verify", wheel, "--torch", "window", "--format", "markdown",
                            env=only_links)
    assert markdown.returncode == 0, markdown.stderr[-4000:]
    lines = markdown.stdout.splitlines()
    assert lines[0] == f"### {Path(wheel).name}"
    assert "| dependency | torch 2.13.0+cpu (CPU-only) |" in lines
    assert f"| vecadd | PASS {ops['vecadd']}/{ops['vecadd']} ops, smoke |" in lines
    assert "| scalekit | SKIPPED [1] |" in lines
    assert any(line.startswith("1. scalekit on torch 2.13.0+cpu: SKIPPED: CUDA-only") for line in lines)
    assert lines[-1] == "2 PASS, 0 FAIL, 1 SKIPPED."
