"""Fixtures of the build tests (a plugin of tests/conftest.py: ask for them by name). The hermetic CUDA toolkit and the
torch build venv are made once in the shared cache (``$ASSEMBLE_CACHE`` or the user cache) and reused by every test and
every later run; each test gets its own artifact store and mirrors through a private cache directory
that links to them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from assembler.cache import cache_root
from assembler.toolchain.cuda import select_cuda
from assembler.toolchain.torchenv import ensure_build_env

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "stable-abi"
HERMETIC_CUDA = "13.2"  # not installed locally: comes from PyPI
BUILD_TORCH = "2.13.0"  # the example's [bundle] torch
SHARED = ("venvs", "toolchains")


# The developer's (or CI's) own cache, read before any test points ASSEMBLE_CACHE elsewhere: only
# its toolchains and venvs are shared with the tests (made once, reused by every later run).
USER_CACHE = cache_root()


@pytest.fixture(scope="session", name="toolchains")
def toolchains_fixture() -> Path:
    """The shared cache, holding CUDA 13.2 and the torch build venv."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ASSEMBLE_CACHE", str(USER_CACHE))
        select_cuda(HERMETIC_CUDA)
        ensure_build_env(BUILD_TORCH)
    return USER_CACHE


@pytest.fixture(autouse=True)
def own_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
              monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs with a cache of its own (mirrors, artifacts, check results, evidence),
    never the developer's: only the toolchains and venvs are shared, through links. A test
    that makes its own (private_cache, a workspace's cache) sets ASSEMBLE_CACHE over this one."""
    if "private_cache" in request.fixturenames:
        return
    for name in SHARED:
        (USER_CACHE / name).mkdir(parents=True, exist_ok=True)
    cache = sharing_toolchains(tmp_path_factory.mktemp("assemble-cache") / "cache", USER_CACHE)
    monkeypatch.setenv("ASSEMBLE_CACHE", str(cache))


@pytest.fixture(scope="session", name="build_env_path")
def build_env_path_fixture(toolchains: Path) -> Path:
    return ensure_build_env(BUILD_TORCH).path


@pytest.fixture(name="private_cache")
def private_cache_fixture(tmp_path: Path, toolchains: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ASSEMBLE_CACHE (artifact store, mirrors) whose toolchains are the shared ones."""
    cache = sharing_toolchains(tmp_path / "cache", toolchains)
    monkeypatch.setenv("ASSEMBLE_CACHE", str(cache))
    return cache


@pytest.fixture(name="example_ws")
def example_ws_fixture(tmp_path: Path) -> Path:
    """A copy of examples/stable-abi with its upstream repositories created."""
    return example_copy(tmp_path / "ws")


def sharing_toolchains(cache: Path, toolchains: Path) -> Path:
    """A new, empty cache directory whose only entries link to the shared (read-only) toolchains."""
    cache.mkdir(parents=True)
    for name in SHARED:
        (cache / name).symlink_to(toolchains / name, target_is_directory=True)
    return cache


def example_copy(ws: Path) -> Path:
    """examples/stable-abi copied to ``ws``, its upstream repositories created."""
    shutil.copytree(EXAMPLE, ws,
                    ignore=shutil.ignore_patterns("forks", "upstreams", ".assemble", "dist", "__pycache__"))
    subprocess.run([sys.executable, str(ws / "make_upstreams.py")], cwd=ws, check=True, capture_output=True)
    return ws


def ci_runner(root: Path, toolchains: Path, cache_settings: str | None = None) -> tuple[Path, Path]:
    """A fresh CI runner under ``root``: a copy of the example at ``root/ws`` (``cache_settings``
    appended as its [cache] table) and an empty cache at ``root/cache`` that shares only the
    read-only toolchains, as a runner image would hold them."""
    shutil.rmtree(root, ignore_errors=True)
    cache = sharing_toolchains(root / "cache", toolchains)
    ws = example_copy(root / "ws")
    if cache_settings is not None:
        with (ws / "deps.toml").open("a") as manifest:
            manifest.write(f"\n[cache]\n{cache_settings}\n")
    return ws, cache


def assemble(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess, with the test's cache."""
    from tests.json_contract import check_json_output

    env = {**os.environ, "ASSEMBLE_CACHE": str(cache), "COLUMNS": "200"}
    result = subprocess.run([sys.executable, "-m", "assembler", *args], env=env, capture_output=True, text=True,
                            check=False)
    check_json_output(args, result.stdout, result.returncode)  # every --json run meets its JSON Schema
    return result


def uncompiled_uses(report: dict[str, Any]) -> list[str]:
    """A migrate report's uses left, each "file:line rule"; every one must sit on a line the
    build does not compile (what the build compiles, migrate has rewritten)."""
    assert all(item.get("compiled") is False for item in report["remaining"]), report["remaining"]
    return [f"{item['at']} {item['rule']}" for item in report["remaining"]]
