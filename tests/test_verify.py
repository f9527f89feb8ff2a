"""`assemble verify` for real: torch 2.13.0 (CPU) and 2.14.1 (CUDA build, no GPU) venvs from the
shared cache, op libraries compiled once against 2.13.0, the CLI in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from assembler.toolchain.venv import MARKER, site_packages
from assembler.verify.contents import scan
from assembler.verify.envs import TorchEnv, ensure_torch_env
from tests.conftest import run_assemble
from tests.verify_fixtures.demo import MANIFEST, compiled, package_files, write_wheel

pytestmark = pytest.mark.integration

OLD, NEW = "2.13.0", "2.14.1"
LIBRARIES = ("stable_ops", "unstable_ops", "cuda_ops")


@pytest.fixture(scope="session")
def torch_envs() -> dict[str, TorchEnv]:
    """Created once per cache (the 2.14.1 one is 5.5 GB) and shared by every test and run."""
    return {version: ensure_torch_env(version) for version in (OLD, NEW)}


@pytest.fixture(scope="session")
def libraries(torch_envs: dict[str, TorchEnv], pytestconfig: pytest.Config) -> dict[str, Path]:
    """Each demonstration library, compiled once against torch 2.13.0 (cached across runs)."""
    env = torch_envs[OLD]
    cache = pytestconfig.cache.mkdir("verify-fixtures")
    return {name: compiled(cache, site_packages(env.path) / "torch", env.installed, name) for name in LIBRARIES}


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory, libraries: dict[str, Path]) -> Path:
    root = tmp_path_factory.mktemp("verify-ws")
    (root / "deps.toml").write_text(MANIFEST)
    write_wheel(root / "dist", "verifydemo", package_files(libraries))
    stable = root / "stable"
    (stable / "deps.toml").parent.mkdir()
    (stable / "deps.toml").write_text(MANIFEST.split("[deps.demo-unstable]")[0])
    write_wheel(stable / "dist", "verifydemo", package_files({"stable_ops": libraries["stable_ops"]}))
    return root


def wheel(workspace: Path) -> Path:
    return next((workspace / "dist").glob("*.whl"))


def verify(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_assemble("-C", str(workspace), "verify", *args)


def cells(result: subprocess.CompletedProcess[str]) -> dict[tuple[str, str], dict[str, Any]]:
    data = json.loads(result.stdout)
    return {(cell["dep"], cell["torch"]): cell for cell in data["results"]}


@pytest.fixture(scope="session")
def demo(workspace: Path) -> subprocess.CompletedProcess[str]:
    """One verify run of the demonstration wheel on both versions ([bundle] verify-torch)."""
    return verify(workspace, str(wheel(workspace)), "--json")


def test_audit_flags_the_unstable_library_without_running_it(workspace: Path) -> None:
    """`assemble audit` reaches, from symbols alone, the verdict the 2.14.1 load failure proves."""
    result = run_assemble("audit", str(wheel(workspace)), "--check", "torch", "--json")
    assert result.returncode == 1, result.stderr  # the check fails before anything is loaded
    report = json.loads(result.stdout)
    objects = {e["path"]: e for e in report["extensions"]}
    assert report["torch_abi"] == "UNSTABLE"
    unstable = objects["verifydemo_unstable/libunstable_ops.so"]
    assert unstable["torch_abi"] == "UNSTABLE"
    assert "at::cpu::cholesky_out(at::Tensor&, at::Tensor const&, bool)" in unstable["unstable_symbols"]
    assert objects["verifydemo/_C.abi3.so"]["torch_abi"] == "STABLE"
    assert objects["verifydemo_cuda/libcuda_ops.so"]["torch_abi"] == "STABLE"


def test_stable_passes_on_both_unstable_fails_on_new_torch(demo: subprocess.CompletedProcess[str]) -> None:
    assert demo.returncode == 1, demo.stderr
    matrix = cells(demo)
    for version in (OLD, NEW):
        stable = matrix[("demo-stable", version)]
        assert stable["status"] == "PASS", stable
        assert [c["kind"] for c in stable["checks"]] == ["load", "registered", "op", "smoke"]
        assert stable["checks"][1]["ops"] == ["verifydemo::scaled_add"]
    assert matrix[("demo-unstable", OLD)]["status"] == "PASS", matrix[("demo-unstable", OLD)]
    broken = matrix[("demo-unstable", NEW)]
    assert broken["status"] == "FAIL"
    assert "undefined symbol" in broken["reason"]
    assert "at::cpu::cholesky_out(at::Tensor&, at::Tensor const&, bool)" in broken["reason"]
    assert "_ZN2at3cpu12cholesky_outERNS_6TensorERKS1_b" in broken["reason"]
    assert (broken["checks"][0]["kind"] == "load"
            and broken["checks"][0]["target"] == "verifydemo_unstable/libunstable_ops.so")
    # With the library unloadable, its op and smoke are reported as not run, never as passed.
    assert {c["kind"]: c["status"] for c in broken["checks"][1:]} == {"op": "SKIPPED", "smoke": "SKIPPED"}


def test_cuda_only_library_is_skipped_never_passed(demo: subprocess.CompletedProcess[str]) -> None:
    matrix = cells(demo)
    cpu = matrix[("demo-cuda", OLD)]
    assert cpu["status"] == "SKIPPED"
    assert "CPU-only" in cpu["reason"] and "libcudart.so.13" in cpu["reason"]
    assert [c["kind"] for c in cpu["checks"]] == ["cuda"]  # not even loaded
    cuda = matrix[("demo-cuda", NEW)]
    assert cuda["status"] == "SKIPPED"
    assert ({c["kind"]: c["status"] for c in cuda["checks"]}
            == {"load": "PASS", "registered": "PASS", "op": "PASS", "smoke": "SKIPPED"})
    assert "torch.cuda.is_available() is False" in cuda["reason"]
    data = json.loads(demo.stdout)
    assert data["summary"] == {"PASS": 3, "FAIL": 1, "SKIPPED": 2}
    torch = {t["requested"]: t for t in data["torch"]}
    assert torch[OLD]["cuda"] is None and torch[NEW]["cuda"] and torch[NEW]["gpu"] is False


def test_stable_wheel_table_and_exit_zero(workspace: Path) -> None:
    result = verify(workspace / "stable", str(wheel(workspace / "stable")), "--torch", OLD, "--torch", NEW)
    assert result.returncode == 0, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if "demo-stable" in line)
    assert row.count("PASS") == 2
    assert "torch 2.13.0+cpu" in result.stdout and "torch 2.14.1+cu130" in result.stdout
    assert "2 PASS, 0 FAIL, 0 SKIPPED" in result.stdout


def test_dependency_missing_from_the_wheel_fails(workspace: Path) -> None:
    """The stable-only wheel against the full manifest: a merge that dropped a dependency."""
    result = verify(workspace, str(wheel(workspace / "stable")), "--torch", OLD, "--json")
    assert result.returncode == 1
    missing = cells(result)[("demo-unstable", OLD)]
    assert missing["status"] == "FAIL"
    assert missing["reason"] == "no extension of demo-unstable in the wheel (verifydemo_unstable/** -> .)"


def test_schema_mismatch_smoke_error_and_crash_are_isolated(workspace: Path, tmp_path: Path) -> None:
    manifest = MANIFEST.replace("float alpha) -> Tensor", "int alpha) -> Tensor").replace(
        "a + 0.5 * b)", "a - 0.5 * b)"
    )
    manifest += '''
[deps.crasher]
upstream = "https://example.invalid/crasher.git"
commit = "4444444444444444444444444444444444444444"
[deps.crasher.verify]
smoke = "import ctypes\\nctypes.string_at(0)"

[deps.after-crash]
upstream = "https://example.invalid/after.git"
commit = "5555555555555555555555555555555555555555"
[deps.after-crash.verify]
ops = ["verifydemo::scaled_add", "verifydemo::nope(Tensor a) -> Tensor"]
'''
    (tmp_path / "deps.toml").write_text(manifest)
    result = verify(tmp_path, str(wheel(workspace / "stable")), "--torch", OLD, "--json")
    assert result.returncode == 1, result.stderr
    matrix = cells(result)
    stable = matrix[("demo-stable", OLD)]
    checks = {c["kind"]: c for c in stable["checks"]}
    assert checks["load"]["status"] == "PASS"
    assert checks["op"]["status"] == "FAIL" and "schema mismatch" in checks["op"]["detail"]
    assert "float alpha" in checks["op"]["detail"] and "int alpha" in checks["op"]["detail"]
    assert checks["smoke"]["status"] == "FAIL"
    assert checks["smoke"]["detail"].startswith("AssertionError: Tensor-likes are not close! (smoke line 5: ")
    crashed = matrix[("crasher", OLD)]
    assert crashed["status"] == "FAIL" and "SIGSEGV" in crashed["reason"] and "smoke" in crashed["reason"]
    after = {c["target"]: c["status"] for c in matrix[("after-crash", OLD)]["checks"]}
    assert after == {"verifydemo::scaled_add": "PASS", "verifydemo::nope(Tensor a) -> Tensor": "FAIL"}


def test_scan_tells_python_modules_op_libraries_and_cuda_needs(libraries: dict[str, Path], tmp_path: Path) -> None:
    for name, data in package_files(libraries).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    found = {f.path: f for f in scan(tmp_path)}
    assert (set(found)
            == {"verifydemo/_C.abi3.so", "verifydemo_unstable/libunstable_ops.so", "verifydemo_cuda/libcuda_ops.so"})
    assert found["verifydemo/_C.abi3.so"].module == "verifydemo._C"
    assert found["verifydemo_unstable/libunstable_ops.so"].module is None
    assert found["verifydemo_cuda/libcuda_ops.so"].cuda_libs == ("libcudart.so.13",)
    assert found["verifydemo/_C.abi3.so"].cuda_libs == ()


def test_outside_a_workspace_each_extension_must_load(workspace: Path, tmp_path: Path) -> None:
    result = run_assemble("verify", str(wheel(workspace)), "--torch", OLD, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "no deps.toml found" in result.stderr
    matrix = cells(result)
    assert ({dep for dep, _ in matrix}
            == {"verifydemo/_C.abi3.so", "verifydemo_unstable/libunstable_ops.so", "verifydemo_cuda/libcuda_ops.so"})
    assert matrix[("verifydemo/_C.abi3.so", OLD)]["status"] == "PASS"
    assert matrix[("verifydemo_unstable/libunstable_ops.so", OLD)]["status"] == "PASS"
    assert matrix[("verifydemo_cuda/libcuda_ops.so", OLD)]["status"] == "SKIPPED"  # needs libcudart


def test_missing_wheel_is_exit_2(workspace: Path) -> None:
    result = verify(workspace, str(workspace / "nope.whl"), "--torch", OLD)
    assert result.returncode == 2
    assert "nope.whl: no such wheel" in result.stderr and "Traceback" not in result.stderr


def test_uninstallable_torch_version_is_exit_7_naming_it(workspace: Path, tmp_path: Path) -> None:
    """"Not available" is exit 7 (toolchain), as in `check` and `build` (issue 22, item 3)."""
    result = run_assemble(
        "-C", str(workspace), "verify", str(wheel(workspace / "stable")), "--torch", "1.0.99",
        env={"ASSEMBLE_CACHE": str(tmp_path / "cache")},
    )
    assert result.returncode == 7, result.stderr
    assert "torch==1.0.99" in result.stderr and "Traceback" not in result.stderr
    venvs = tmp_path / "cache" / "venvs"
    assert not [p for p in venvs.iterdir() if p.is_dir()], "a failed creation left an environment behind"


ENSURE = ("import sys; from assembler.verify.envs import ensure_torch_env; print(ensure_torch_env(sys.argv[1], "
          "print).path)")


def _installing(venvs: Path) -> bool:
    """uv has begun to put packages into the environment being made (its site-packages holds
    more than the venv's own _virtualenv files): the kill lands in the middle of the install."""
    return any(not entry.name.startswith("_virtualenv") for entry in venvs.glob(".tmp-*/lib/python*/site-packages/*"))


def test_env_creation_killed_midway_is_not_reused_and_concurrent_runs_share_one(tmp_path: Path) -> None:
    """Complete-or-absent and file-locked, on a fresh cache with the small CPU torch. A fresh uv
    cache too, so that uv spends seconds unpacking torch and is killed while it does."""
    env = {**os.environ, "ASSEMBLE_CACHE": str(tmp_path), "UV_CACHE_DIR": str(tmp_path / "uv")}
    venvs = tmp_path / "venvs"
    victim = subprocess.Popen(
        [sys.executable, "-c", ENSURE, OLD], env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300  # a bound on waiting for the install, not a measured duration
    while not _installing(venvs) and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    assert not [p for p in venvs.iterdir() if p.is_dir() and not p.name.startswith(".tmp-")], "half-built venv in place"

    runs = [
        subprocess.Popen([sys.executable, "-c", ENSURE, OLD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    paths = {out.strip().splitlines()[-1] for out, _ in outputs}
    assert len(paths) == 1
    assert sum(out.count("creating verify-torch2.13.0") for out, _ in outputs) == 1  # one install, one waiter
    assert (Path(paths.pop()) / MARKER).is_file()
    shutil.rmtree(venvs)  # 900 MB; pytest would keep it among its last three temporary trees
    shutil.rmtree(tmp_path / "uv", ignore_errors=True)
