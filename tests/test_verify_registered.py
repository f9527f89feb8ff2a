"""`verify` reports the ops each extension registers, with or without a [verify] section, and
fails an extension that calls STABLE_TORCH_LIBRARY's shim but registers none (issue 19)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from assembler.toolchain.venv import site_packages
from tests.conftest import run_assemble
from tests.test_verify import OLD, libraries, torch_envs  # noqa: F401  (session fixtures)
from tests.verify_fixtures.demo import MANIFEST, compile_flags, package_files, write_wheel

pytestmark = pytest.mark.integration

EMPTY_LIBRARY = """\
#include <Python.h>
#include <torch/csrc/stable/library.h>
// A torch library block that defines nothing: the module loads, and no op appears.
STABLE_TORCH_LIBRARY(verifydemo_empty, m) {}
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_empty", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit__empty(void) { return PyModule_Create(&module); }
"""


def _without_verify(manifest: str) -> str:
    """The demo manifest's demo-stable alone, without its [verify] table."""
    stable = manifest.split("[deps.demo-unstable]")[0]
    return stable.split("[deps.demo-stable.verify]")[0]


def test_registered_ops_are_counted_without_a_verify_section(tmp_path: Path, libraries: dict[str, Path]) -> None:  # noqa: F811
    (tmp_path / "deps.toml").write_text(_without_verify(MANIFEST))
    wheel = write_wheel(tmp_path / "dist", "verifydemo", package_files({"stable_ops": libraries["stable_ops"]}))
    done = run_assemble("-C", str(tmp_path), "verify", str(wheel), "--torch", OLD, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    [cell] = json.loads(done.stdout)["results"]
    assert [c["kind"] for c in cell["checks"]] == ["load", "registered"]
    registered = cell["checks"][1]
    assert registered["status"] == "PASS" and registered["ops"] == ["verifydemo::scaled_add"]
    assert registered["detail"].startswith("1 op(s) in verifydemo: verifydemo::scaled_add")
    assert cell["reason"] == "1 loaded, 1 registered"


def test_an_extension_that_registers_no_op_fails(tmp_path: Path, torch_envs: dict) -> None:  # noqa: F811
    torch_dir = site_packages(torch_envs[OLD].path) / "torch"
    source, built = tmp_path / "empty.cpp", tmp_path / "_empty.abi3.so"
    source.write_text(EMPTY_LIBRARY)
    subprocess.run(["g++", str(source), "-o", str(built), *compile_flags(torch_dir, "stable_ops")], check=True,
                   capture_output=True)
    (tmp_path / "deps.toml").write_text(_without_verify(MANIFEST))
    wheel = write_wheel(tmp_path / "dist", "verifydemo",
                        {"verifydemo/__init__.py": b"", "verifydemo/_empty.abi3.so": built.read_bytes()})
    done = run_assemble("-C", str(tmp_path), "verify", str(wheel), "--torch", OLD, "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    [cell] = json.loads(done.stdout)["results"]
    assert cell["status"] == "FAIL"
    assert {c["kind"]: c["status"] for c in cell["checks"]} == {"load": "PASS", "registered": "FAIL"}
    assert "registers no op" in cell["reason"] and "verifydemo/_empty.abi3.so" in cell["reason"]
