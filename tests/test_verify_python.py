"""`assemble verify --python PATH` (the torch an interpreter already has: nothing created, nothing
downloaded) and a wheel that says whose it is (its assembler.json: bundle and embedded verify
specs). Real torch: the interpreters of the cached torch 2.13.0 (CPU) and 2.14.1 (CUDA build, no
GPU) venvs; a real merged wheel; the CLI in a subprocess."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from assembler.manifest import load_manifest
from assembler.toolchain.venv import site_packages
from assembler.verify.envs import TorchEnv, ensure_torch_env
from assembler.wheel.merge import merge_wheel
from tests.conftest import run_assemble
from tests.verify_fixtures.demo import MANIFEST, compiled

pytestmark = pytest.mark.integration

OLD, NEW = "2.13.0", "2.14.1"
STABLE_MANIFEST = MANIFEST.split("[deps.demo-unstable]")[0]
OTHER_MANIFEST = '''[bundle]
name = "someone-else"
version = "0.1.0"
python-abi = "3.9"
verify-torch = ["2.13.0"]

[deps.demo-stable]
upstream = "https://example.invalid/other.git"
commit = "4444444444444444444444444444444444444444"
[deps.demo-stable.verify]
ops = ["other::op(Tensor x) -> Tensor"]
'''


@pytest.fixture(scope="module")
def envs() -> dict[str, TorchEnv]:
    return {version: ensure_torch_env(version) for version in (OLD, NEW)}


@pytest.fixture(scope="module")
def merged(tmp_path_factory: pytest.TempPathFactory, envs: dict[str, TorchEnv], pytestconfig: pytest.Config) -> Path:
    """The demo's stable library as `assemble merge` ships it: a real merged wheel whose
    assembler.json names bundle verifydemo and carries demo-stable's ops and smoke call."""
    root = tmp_path_factory.mktemp("merged")
    env = envs[OLD]
    library = compiled(pytestconfig.cache.mkdir("verify-fixtures"), site_packages(env.path) / "torch", env.installed,
                       "stable_ops")
    (root / "deps.toml").write_text(STABLE_MANIFEST)
    artifact = root / "artifacts" / "demo-stable"
    (artifact / "files" / "verifydemo").mkdir(parents=True)
    (artifact / "files" / "verifydemo" / "__init__.py").write_bytes(b"from verifydemo import _C  # noqa: F401\n")
    (artifact / "files" / "verifydemo" / "_C.abi3.so").write_bytes(library.read_bytes())
    (artifact / "artifact.json").write_text(json.dumps({
        "dep": "demo-stable", "commit": "1" * 40, "source": "https://example.invalid/demo-stable.git", "patches": [],
        "key": hashlib.sha256(b"demo-stable").hexdigest()[:32],
        "toolchain": {"cuda": None, "torch": OLD, "python_abi": "3.9", "torch_target": "2.10"}, "archs": [],
        "build_seconds": 1.0,
    }))
    return merge_wheel(load_manifest(root / "deps.toml"), [artifact], root / "dist", cuda="13.0").wheel


def verify(cwd: Path, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return run_assemble("verify", *args, cwd=cwd, env={"ASSEMBLE_CACHE": str(cache)})


def report(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.stdout, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def checks(data: dict[str, Any], dep: str) -> dict[str, list[str]]:
    """torch column -> the kinds of the PASS checks of ``dep``."""
    return {cell["torch"]: [c["kind"] for c in cell["checks"] if c["status"] == "PASS"] for cell in data["results"]
            if cell["dep"] == dep}


def test_python_verifies_on_the_interpreters_torch_and_creates_nothing(
    merged: Path, envs: dict[str, TorchEnv], tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    old, new = envs[OLD].python, envs[NEW].python
    result = verify(merged.parent.parent, str(merged), "--python", str(old), "--python", str(new), "--json",
                    cache=cache)
    assert result.returncode == 0, result.stderr
    data = report(result)
    labels = [info["requested"] for info in data["torch"]]
    assert labels == [f"{envs[OLD].installed} ({old})", f"{envs[NEW].installed} ({new})"]
    assert [info["python"] for info in data["torch"]] == [str(old), str(new)]
    assert [info["cuda"] is None for info in data["torch"]] == [True, False]  # 2.14.1 is the CUDA build
    assert (checks(data, "demo-stable")
            == {labels[0]: ["load", "registered", "op", "smoke"], labels[1]: ["load", "registered", "op", "smoke"]})
    assert not (cache / "venvs").exists(), "--python created an environment"
    table = verify(merged.parent.parent, str(merged), "--python", str(old), cache=cache)
    assert table.returncode == 0 and f"torch {envs[OLD].installed}" in table.stdout


def test_python_mixes_with_torch_versions(merged: Path, envs: dict[str, TorchEnv], tmp_path: Path) -> None:
    """A cached environment by version and the same torch through its interpreter: two columns."""
    python = envs[OLD].python
    result = run_assemble("verify", str(merged), "--torch", OLD, "--python", str(python), "--json",
                          cwd=merged.parent.parent)
    assert result.returncode == 0, result.stderr
    assert [info["requested"] for info in report(result)["torch"]] == [OLD, f"{envs[OLD].installed} ({python})"]


def test_python_that_cannot_serve_is_exit_2(merged: Path, tmp_path: Path) -> None:
    missing = verify(tmp_path, str(merged), "--python", str(tmp_path / "nope" / "python"), cache=tmp_path / "cache")
    assert missing.returncode == 2 and "cannot run it" in missing.stderr and "Traceback" not in missing.stderr
    # assembler's venv: no torch
    no_torch = verify(tmp_path, str(merged), "--python", sys.executable, cache=tmp_path / "cache")
    assert no_torch.returncode == 2, no_torch.stderr
    assert "no torch installed" in no_torch.stderr and "Traceback" not in no_torch.stderr


def test_workspace_specs_are_used_for_its_own_bundle_and_said(merged: Path, envs: dict[str, TorchEnv],
                                                              tmp_path: Path) -> None:
    workspace = merged.parent.parent
    data = report(verify(workspace, str(merged), "--python", str(envs[OLD].python), "--json", cache=tmp_path))
    assert data["specs"]["source"] == "workspace" and data["specs"]["bundle"] == "verifydemo"
    assert str(workspace / "deps.toml") in data["specs"]["detail"]


def test_wheel_of_another_bundle_is_verified_with_its_own_specs(merged: Path, envs: dict[str, TorchEnv],
                                                                tmp_path: Path) -> None:
    """Inside a workspace whose [bundle] is someone else's: the wheel's embedded ops and smoke
    call, not the workspace's (whose op would fail every row, or whose rows would not match)."""
    (tmp_path / "deps.toml").write_text(OTHER_MANIFEST)
    result = verify(tmp_path, str(merged), "--python", str(envs[OLD].python), "--json", cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    data = report(result)
    assert data["specs"]["source"] == "wheel" and data["specs"]["bundle"] == "verifydemo"
    assert "someone-else" in data["specs"]["detail"]
    assert list(checks(data, "demo-stable").values()) == [["load", "registered", "op", "smoke"]]
    ops = [c["target"] for cell in data["results"] for c in cell["checks"] if c["kind"] == "op"]
    assert ops == ["verifydemo::scaled_add(Tensor a, Tensor b, float alpha) -> Tensor"]


def _without_specs(wheel: Path, target: Path) -> Path:
    """The same wheel as an assembler without embedded specs wrote it."""
    target.mkdir(parents=True, exist_ok=True)
    copy = target / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(copy, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith(".dist-info/assembler.json"):
                record = json.loads(data)
                for entry in record["deps"].values():
                    entry.pop("verify")
                data = json.dumps(record).encode()
            out.writestr(info, data)
    return copy


def test_wheel_of_another_bundle_without_specs_is_a_clear_error(merged: Path, envs: dict[str, TorchEnv],
                                                                tmp_path: Path) -> None:
    old_wheel = _without_specs(merged, tmp_path / "old")
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "deps.toml").write_text(OTHER_MANIFEST)
    inside = verify(tmp_path / "ws", str(old_wheel), "--python", str(envs[OLD].python), cache=tmp_path / "cache")
    assert inside.returncode == 2, inside.stderr
    assert "belongs to bundle verifydemo, not to this workspace's bundle someone-else" in inside.stderr
    assert "Traceback" not in inside.stderr
    outside = verify(tmp_path, str(old_wheel), "--python", str(envs[OLD].python), "--json", cache=tmp_path / "cache")
    assert outside.returncode == 0, outside.stderr
    data = report(outside)
    assert data["specs"]["source"] == "wheel" and "each extension must load" in data["specs"]["detail"]
    # its rows: loading, and the ops that registered
    assert list(checks(data, "demo-stable").values()) == [["load", "registered"]]
