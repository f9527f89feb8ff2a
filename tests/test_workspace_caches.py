"""Cached results a workspace could forge: the materialized artifact of a dependency, the last
merge's audit, the compile commands of a build. Each is committed, forged, into a real example
workspace (its key is deterministic, so anyone can write one that matches), and the real command
must not use it: the artifact is made again from this machine's store (or rebuilt), the wheel is
merged and audited again, and `check` reads only compile commands this machine's build recorded.
The records live in the user's cache (``<cache>/workspaces/<digest>/``), never the workspace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from assembler.builder.evidence import merge_state_path, workspace_records
from assembler.builder.pipeline import _stat
from assembler.builder.units import compile_commands_path
from assembler.wheel.artifact import PACK_NAME, pack_files
from assembler.workspace import open_workspace
from tests.build_support import HERMETIC_CUDA, assemble
from tests.gitrepo import git

pytestmark = pytest.mark.integration

# What a forged artifact carries: a shared object that uses no torch and no Python, so no audit
# verdict stops it; it runs a command of its author's once loaded.
FORGED_SOURCE = """
#include <cstdlib>
__attribute__((constructor)) static void forged() { std::system("true"); }
"""
FORGED = "vecadd/_forged.abi3.so"  # below the artifact's files/; in the wheel below stable_abi_example/


def forged_object(where: Path) -> Path:
    """A real shared object, compiled by the host compiler."""
    source = where / "forged.cpp"
    source.write_text(FORGED_SOURCE)
    subprocess.run(["c++", "-shared", "-fPIC", "-o", str(where / "forged.so"), str(source)],
                   check=True, capture_output=True)
    return where / "forged.so"


def commit(ws: Path, *paths: Path) -> None:
    """Commit ``paths`` in the workspace's own repository (made on first use), past the
    ``.gitignore`` of ``*`` that assemble writes: what a pull request can carry."""
    if not (ws / ".git").is_dir():
        git(ws, "init", "-q", "-b", "main")
    git(ws, "add", "-f", "--", *(str(path.relative_to(ws)) for path in paths))
    git(ws, "commit", "-q", "--allow-empty", "-m", "cached results, from a pull request")


def build(ws: Path, cache: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    result = assemble("-C", str(ws), "build", "--cuda", HERMETIC_CUDA, "--json", *args, cache=cache)
    assert result.returncode == 0, result.stderr[-4000:]
    return result, json.loads(result.stdout)


def statuses(report: dict) -> dict[str, str]:
    return {dep["dep"]: dep["status"] for dep in report["deps"]}


def members(wheel: str) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def forge_artifact(ws: Path, obj: Path) -> Path:
    """Replace the workspace's vecadd artifact by a copy with the same artifact.json (so the
    same key) and one more shared object, packed as the build packs: what a pull request can
    commit under .assemble/artifacts/vecadd/. No wheel yet (dist/ is not in the pull request),
    so the next build merges whatever artifact it takes."""
    artifact = ws / ".assemble" / "artifacts" / "vecadd"
    forged = artifact.with_name("forged")
    shutil.copytree(artifact, forged)  # copies: new files, none the store's
    shutil.copy(obj, forged / "files" / FORGED)
    (forged / PACK_NAME).unlink()
    pack_files(forged / "files", forged / PACK_NAME)
    shutil.rmtree(artifact)
    forged.rename(artifact)
    commit(ws, artifact)
    shutil.rmtree(ws / "dist")
    return artifact


def test_a_forged_artifact_with_the_right_key_never_ships(example_ws: Path, private_cache: Path,
                                                          tmp_path: Path) -> None:
    _, first = build(example_ws, private_cache, "--only", "vecadd", "--partial")
    assert statuses(first) == {"vecadd": "built"}
    key = first["deps"][0]["key"]
    stored = private_cache / "artifacts" / "vecadd" / key
    record = example_ws / ".assemble" / "artifacts" / "vecadd" / "artifact.json"
    linked = os.stat(record).st_ino
    assert linked == os.stat(stored / "artifact.json").st_ino  # materialize's hard links

    _, noop = build(example_ws, private_cache, "--only", "vecadd", "--partial")
    assert statuses(noop) == {"vecadd": "cached"}
    assert os.stat(record).st_ino == linked  # a no-op build copies nothing: the links prove it is the store's

    obj = forged_object(tmp_path)
    artifact = forge_artifact(example_ws, obj)
    assert json.loads((artifact / "artifact.json").read_text())["key"] == key
    _, again = build(example_ws, private_cache, "--only", "vecadd", "--partial")
    assert statuses(again) == {"vecadd": "cached"}  # from this machine's store, made again in the workspace
    assert f"stable_abi_example/{FORGED}" not in members(again["wheel"])
    assert not (artifact / "files" / FORGED).exists()
    assert os.stat(record).st_ino == os.stat(stored / "artifact.json").st_ino  # the store's again

    forge_artifact(example_ws, obj)  # and on a machine whose store lacks the key: rebuilt, not trusted
    shutil.rmtree(private_cache / "artifacts")
    _, rebuilt = build(example_ws, private_cache, "--only", "vecadd", "--partial")
    assert statuses(rebuilt) == {"vecadd": "built"}
    assert f"stable_abi_example/{FORGED}" not in members(rebuilt["wheel"])
    assert not (artifact / "files" / FORGED).exists()


def forge_merge(ws: Path, wheel: Path, obj: Path, key: str) -> Path:
    """A wheel with one more shared object at the merged wheel's path, and a last-merge.json in
    .assemble/ whose key is the merge key and whose stat is that wheel's, calling everything
    STABLE: committed together, as a pull request can."""
    forged = wheel.with_name("forged.whl")
    shutil.copy(wheel, forged)
    with zipfile.ZipFile(forged, "a") as archive:
        archive.write(obj, f"stable_abi_example/{FORGED}")
    forged.replace(wheel)
    state = ws / ".assemble" / "last-merge.json"
    stable = {"verdict": "STABLE", "min_torch": "2.10", "offending": []}
    state.write_text(json.dumps({
        "key": key, "wheel": str(wheel), "stat": _stat(wheel), "warnings": [], "partial": ["scalekit", "rowsum"],
        "audit": {"vecadd": [{"path": "stable_abi_example/vecadd/_vecadd_C.abi3.so", **stable},
                             {"path": f"stable_abi_example/{FORGED}", **stable}]},
    }))
    commit(ws, state, wheel)
    return state


def test_a_committed_last_merge_never_skips_the_merge_and_the_audit(example_ws: Path, private_cache: Path,
                                                                     tmp_path: Path) -> None:
    _, first = build(example_ws, private_cache, "--only", "vecadd", "--partial")
    wheel = Path(first["wheel"])
    record = merge_state_path(open_workspace(example_ws))
    assert not record.is_relative_to(example_ws) and record.is_file()  # the user's cache, written by this build
    key = json.loads(record.read_text())["key"]
    noop, _ = build(example_ws, private_cache, "--only", "vecadd", "--partial")
    assert "auditing" not in noop.stderr  # unchanged: the record of this machine's merge is reused

    obj = forged_object(tmp_path)
    state = forge_merge(example_ws, wheel, obj, key)
    again, report = build(example_ws, private_cache, "--only", "vecadd", "--partial")
    assert "auditing" in again.stderr, again.stderr[-3000:]
    assert Path(report["wheel"]) == wheel and f"stable_abi_example/{FORGED}" not in members(report["wheel"])
    assert [item["path"] for item in report["deps"][0]["extensions"]] == ["stable_abi_example/vecadd/_vecadd_C.abi3.so"]

    shutil.rmtree(workspace_records(example_ws))  # a machine that never merged here: only the committed record
    forge_merge(example_ws, wheel, obj, key)
    assert state.is_file()
    fresh, report = build(example_ws, private_cache, "--only", "vecadd", "--partial")
    assert "auditing" in fresh.stderr, fresh.stderr[-3000:]
    assert f"stable_abi_example/{FORGED}" not in members(report["wheel"])


def test_check_reads_only_the_compile_commands_this_machine_recorded(example_ws: Path, private_cache: Path) -> None:
    """rowsum without sources in its recipe: `check` takes its units from the compile commands
    of its last build. A compilation database committed in .assemble/compdb/ (naming another
    unit and dropping the real one) is never read, before or after a build here."""
    manifest = example_ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace('sources = ["csrc/rowsum.cpp"]', "# sources: from the build"))
    fork = example_ws / "forks" / "rowsum"
    forged = example_ws / ".assemble" / "compdb" / "rowsum.json"
    forged.parent.mkdir(parents=True)
    forged.write_text(json.dumps([{"directory": str(fork), "file": "setup.py",
                                   "arguments": ["c++", "-c", "setup.py"]}]))
    commit(example_ws, forged)

    def check() -> tuple[subprocess.CompletedProcess[str], dict]:
        result = assemble("-C", str(example_ws), "check", "--cuda", HERMETIC_CUDA, "--json", "rowsum",
                          cache=private_cache)
        return result, next(dep for dep in json.loads(result.stdout)["deps"] if dep["name"] == "rowsum")

    result, dep = check()
    assert result.returncode == 2, result.stdout[-3000:]
    assert "translation units are unknown" in dep["error"]["message"] and "build it once" in dep["error"]["hint"]

    build(example_ws, private_cache, "--only", "rowsum")
    recorded = compile_commands_path(open_workspace(example_ws).state_dir, "rowsum")
    assert recorded.is_file() and not recorded.is_relative_to(example_ws)
    assert "setup.py" in forged.read_text()  # the build wrote the cache's record, not this one
    result, dep = check()
    assert result.returncode == 0, result.stderr[-3000:]
    assert [(unit["source"], unit["origin"], unit["verdict"]) for unit in dep["units"]] == [
        ("csrc/rowsum.cpp", "compile-commands", "CLEAN")]
