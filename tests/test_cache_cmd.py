"""`assemble cache dir|info|prune` on a real cache: venvs made by uv, bare git mirrors, artifacts,
entries held by other running processes (a creator's exclusive lock, a user's shared one)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from assembler.git.mirrors import mirror_path
from assembler.manifest.load import load_manifest
from assembler.toolchain import venv
from tests.conftest import run_assemble

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "stable-abi"
DAY = 86400.0

# Holds an entry the way assemble does: "create" = filelock (exclusive) as ensure_venv does while
# building, "use" = cache.in_use (shared) as a verify probe does. Prints "held", then waits.
HOLDER = """
import sys, time, filelock
from pathlib import Path
from assembler.cache import in_use
mode, entry = sys.argv[1], Path(sys.argv[2])
if mode == "create":
    lock = filelock.FileLock(str(entry) + ".lock"); lock.acquire()
    print("held", flush=True); time.sleep(600)
with in_use(entry):
    print("held", flush=True); time.sleep(600)
"""


def cache_cli(cache: Path, *args: str, cwd: Path | None = None) -> dict[str, Any]:
    # outside any workspace by default (prune keeps what the workspace at hand uses)
    result = run_assemble("cache", *args, "--json", cwd=cwd or cache.parent, env={"ASSEMBLE_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    assert data["schema"] == 1 and data["command"] == "cache" and data["ok"] is True
    return data


def env_dir(cache: Path, label: str) -> Path:
    return next(path for path in (cache / "venvs").glob(f"{label}-*") if path.is_dir())


class _NoMirrors:
    """A manifest without [mirrors], for mirror_path: every URL is fetched as written."""

    def resolve_url(self, url: str) -> str:
        return url


NO_MIRRORS: Any = _NoMirrors()


def names(entries: list[dict[str, Any]]) -> set[str]:
    return {entry["name"] for entry in entries}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache holding one entry of each kind, each real."""
    root = tmp_path / "cache"
    monkeypatch.setenv("ASSEMBLE_CACHE", str(root))
    venv.ensure_venv(["tomli==2.0.1"], label="verify-torch2.13.0")  # the name the example's verify env has
    venv.ensure_venv(["tomli==2.0.1"], label="verify-torch9.9.9")
    for url in ("https://example.invalid/stable-abi/vecadd.git", "https://example.invalid/elsewhere.git"):
        subprocess.run(["git", "init", "-q", "--bare", str(mirror_path(NO_MIRRORS, url))], check=True)
    artifact = root / "artifacts" / "vecadd" / ("a" * 32)
    (artifact / "files").mkdir(parents=True)
    (artifact / "files" / "lib.so").write_bytes(b"\0" * 100_000)
    (artifact / "artifact.json").write_text("{}")
    toolkit = root / "toolchains" / "cuda-13.2-00000000"
    (toolkit / "cuda" / "bin").mkdir(parents=True)
    (toolkit / ".assemble-toolkit.json").write_text("{}")
    return root


def test_dir_and_info_sizes_per_kind(cache: Path) -> None:
    assert cache_cli(cache, "dir")["root"] == str(cache)
    plain = run_assemble("cache", "dir", env={"ASSEMBLE_CACHE": str(cache)})
    assert plain.stdout.strip() == str(cache)
    info = cache_cli(cache, "info")
    kinds = info["kinds"]
    assert {kind: value["count"] for kind, value in kinds.items()} == {
        "mirrors": 2, "toolchains": 1, "environments": 2, "artifacts": 1, "compiler-cache": 0, "symbol-tables": 0,
        "evidence": 0, "checks": 0, "workspaces": 0}
    assert kinds["artifacts"]["bytes"] == 100_002 and kinds["environments"]["bytes"] > 0
    assert info["total_bytes"] == sum(value["bytes"] for value in kinds.values())
    assert info["uv_cache"] and Path(info["uv_cache"]).is_dir()  # where the environments' hard links lead
    entry = next(e for e in info["entries"] if e["name"].startswith("verify-torch9.9.9"))
    assert entry["kind"] == "environments" and abs(entry["last_used"] - time.time()) < 600
    table = run_assemble("cache", "info", env={"ASSEMBLE_CACHE": str(cache)})
    assert table.returncode == 0 and "vecadd/" + "a" * 32 in table.stdout  # names are never cut


def test_prune_older_than_goes_by_last_use(cache: Path) -> None:
    old_env = env_dir(cache, "verify-torch9.9.9")
    long_ago = time.time() - 10 * DAY
    os.utime(old_env / venv.MARKER, (long_ago, long_ago))
    dry = cache_cli(cache, "prune", "--older-than", "5", "--dry-run")
    assert names(dry["removed"]) == {old_env.name} and old_env.is_dir()
    pruned = cache_cli(cache, "prune", "--older-than", "5")
    assert names(pruned["removed"]) == {old_env.name} and not old_env.exists()
    assert pruned["freed_bytes"] == dry["freed_bytes"] > 0
    assert len(pruned["recent"]) == 5
    # a use refreshes it: ensure_venv on the kept one touches its marker
    kept = env_dir(cache, "verify-torch2.13.0")
    os.utime(kept / venv.MARKER, (long_ago, long_ago))
    assert venv.ensure_venv(["tomli==2.0.1"], label="verify-torch2.13.0") == kept
    assert names(cache_cli(cache, "prune", "--older-than", "5")["removed"]) == set()


def test_prune_removes_only_unused_entries_and_clean_removes_everything(cache: Path, tmp_path: Path) -> None:
    """As uv (issue 22, item 4): `prune` with no option removed every entry; now it removes what
    is unused (not used for 30 days, and not the workspace's), and `clean` removes everything."""
    stale, fresh = env_dir(cache, "verify-torch9.9.9"), env_dir(cache, "verify-torch2.13.0")
    long_ago = time.time() - 40 * DAY
    for entry in (stale, fresh):
        os.utime(entry / venv.MARKER, (long_ago, long_ago))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "deps.toml").write_text('[bundle]\nname = "b"\nversion = "1"\nverify-torch = ["2.13.0"]\n')
    everything = names(cache_cli(cache, "info")["entries"])

    pruned = cache_cli(cache, "prune", cwd=workspace)
    assert names(pruned["removed"]) == {stale.name} and not stale.exists()  # old and not the workspace's
    assert names(pruned["kept"]) == {fresh.name} and fresh.is_dir()  # old, but the workspace's verify-torch
    assert len(pruned["recent"]) == len(everything) - 2 and pruned["older_than_days"] == 30

    dry = cache_cli(cache, "clean", "--dry-run", cwd=workspace)
    assert names(dry["removed"]) == everything - {stale.name} and fresh.is_dir()
    cleaned = cache_cli(cache, "clean", cwd=workspace)
    assert names(cleaned["removed"]) == everything - {stale.name}
    assert cache_cli(cache, "info")["entries"] == []


@pytest.mark.parametrize("mode", ["create", "use"])
def test_prune_never_removes_what_a_running_command_holds(cache: Path, mode: str) -> None:
    held = env_dir(cache, "verify-torch9.9.9")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, mode, str(held)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "ASSEMBLE_CACHE": str(cache)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        pruned = cache_cli(cache, "clean")
        assert names(pruned["in_use"]) == {held.name} and held.is_dir()
        assert held.name not in names(pruned["removed"]) and len(pruned["removed"]) == 5
    finally:
        holder.kill()
        holder.wait()
    assert names(cache_cli(cache, "clean")["removed"]) == {held.name} and not held.exists()


def test_prune_keep_spares_the_workspaces_entries(cache: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    shutil.copytree(EXAMPLE, workspace,
                    ignore=shutil.ignore_patterns("forks", "upstreams", ".assemble", "dist", "__pycache__"))
    # the workspace's last build materialized the vecadd artifact under .assemble/artifacts
    stored = cache / "artifacts" / "vecadd" / ("a" * 32)
    record = {"dep": "vecadd", "commit": "1" * 40, "source": "x", "patches": [], "key": "a" * 32,
              "toolchain": {"cuda": "13.2"}, "archs": [], "build_seconds": 1.0}
    (stored / "artifact.json").write_text(json.dumps(record))
    shutil.copytree(stored, workspace / ".assemble" / "artifacts" / "vecadd")
    other_env = env_dir(cache, "verify-torch9.9.9").name
    # the workspace's own vecadd mirror: keyed by the URL [mirrors] maps it to (issue 21)
    own_mirror = mirror_path(load_manifest(workspace / "deps.toml"), "https://example.invalid/stable-abi/vecadd.git")
    subprocess.run(["git", "init", "-q", "--bare", str(own_mirror)], check=True)
    result = run_assemble("-C", str(workspace), "cache", "prune", "--keep", "--older-than", "0", "--json",
                          env={"ASSEMBLE_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr
    pruned = json.loads(result.stdout)
    kept = names(pruned["kept"])
    assert any(name.startswith("verify-torch2.13.0-") for name in kept)  # [bundle] verify-torch
    assert own_mirror.name in kept
    assert "vecadd/" + "a" * 32 in kept and "cuda-13.2-00000000" in kept
    assert names(pruned["removed"]) == {other_env, *(mirror_path(NO_MIRRORS, url).name for url in (
        "https://example.invalid/elsewhere.git", "https://example.invalid/stable-abi/vecadd.git"))}


def test_compiler_cache_and_symbol_tables_are_entries_and_a_held_store_is_kept(cache: Path) -> None:
    """sccache's local store is one entry, held shared while a build's server runs; the torch
    symbol tables of `verify`'s diagnosis are one file each and re-creatable."""
    from assembler.cache import in_use

    store = cache / "sccache"
    (store / "a").mkdir(parents=True)
    (store / "a" / "object").write_bytes(b"o" * 5000)
    tables = cache / "torch-exports"
    tables.mkdir()
    (tables / "2.13.0-abc.json.gz").write_bytes(b"t" * 700)
    kinds = cache_cli(cache, "info")["kinds"]
    assert (kinds["compiler-cache"] == {"count": 1, "bytes": 5000}
            and kinds["symbol-tables"] == {"count": 1, "bytes": 700})
    with in_use(store):  # a build's sccache server is running
        pruned = cache_cli(cache, "clean")
    assert "sccache" in names(pruned["in_use"]) and (store / "a" / "object").is_file()
    assert "2.13.0-abc.json.gz" in names(pruned["removed"]) and not (tables / "2.13.0-abc.json.gz").exists()
    assert not [p for p in tables.iterdir() if not p.name.endswith(".lock")]  # nothing left aside


def test_a_killed_write_of_a_symbol_table_is_a_leftover(cache: Path) -> None:
    """An atomic write killed midway leaves `.NAME.PID-RANDOM.tmp` among the symbol tables: `cache
    info` marks it a leftover, `prune` removes it once its writer is gone and keeps it while the
    writer lives."""
    tables = cache / "torch-exports"
    tables.mkdir()
    (tables / "2.13.0-abc.json.gz").write_bytes(b"t" * 700)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    killed = tables / f".2.14.1-def.json.gz.{dead.stdout.strip()}-k3x9q.tmp"
    killed.write_bytes(b"partial")
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        writing = tables / f".2.11.0-ghi.json.gz.{writer.pid}-a1b2c3.tmp"
        writing.write_bytes(b"being written")
        entries = {entry["name"]: entry for entry in cache_cli(cache, "info")["entries"]
                   if entry["kind"] == "symbol-tables"}
        assert entries[killed.name]["leftover"] and entries[writing.name]["leftover"]
        assert not entries["2.13.0-abc.json.gz"]["leftover"]
        pruned = cache_cli(cache, "prune", "--older-than", "30")
        assert killed.name in names(pruned["removed"]) and not killed.exists()
        assert writing.name in names(pruned["in_use"]) and writing.exists()
        assert (tables / "2.13.0-abc.json.gz").exists()  # used recently
    finally:
        writer.kill()
        writer.wait()
