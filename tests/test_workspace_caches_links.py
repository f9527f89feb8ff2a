"""What proves a workspace's artifact is the store's, and the writers below the build tree and
the rebase journal, which never write through a symbolic link committed deeper than
`Workspace.check_state_paths` looks: real files, links and the host compiler."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from assembler.builder.artifact_keys import is_materialization, materialize
from assembler.builder.recipe import Project
from assembler.errors import InputError
from assembler.toolchain.driver import driver_stub
from assembler.upstreaming import journal as jr
from assembler.workspace import open_workspace

SECRET = b"export TOKEN=do-not-touch\n"
SHA = "1" * 40
MANIFEST = """\
[bundle]
name = "b"
version = "1.0"

[deps.kern]
upstream = "https://example.invalid/kern.git"
commit = "0000000000000000000000000000000000000001"
"""


def snapshot(path: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every entry below ``path``: its bytes (None for a directory) and mtime."""
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*"))}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Files of the user outside the workspace, which the links below point at."""
    home = tmp_path / "home"
    (home / "dir").mkdir(parents=True)
    (home / "bashrc").write_bytes(SECRET)
    os.utime(home / "bashrc", ns=(10**18, 10**18))
    return home


@pytest.fixture
def store_entry(tmp_path: Path) -> Path:
    stored = tmp_path / "cache" / "artifacts" / "dep" / "key"
    (stored / "files" / "pkg").mkdir(parents=True)
    (stored / "artifact.json").write_text('{"key": "key"}\n')
    (stored / "files" / "pkg" / "_C.abi3.so").write_bytes(b"\x7fELF" + bytes(range(256)) * 64)
    (stored / "files.zip").write_bytes(b"PK\x05\x06" + bytes(18))
    return stored


def test_a_materialized_artifact_is_the_stores_by_its_links_or_its_bytes(store_entry: Path, tmp_path: Path) -> None:
    target = tmp_path / "ws" / ".assemble" / "artifacts" / "dep"
    assert not is_materialization(store_entry, target)  # nothing there
    materialize(store_entry, target)
    assert is_materialization(store_entry, target)  # hard links: the store's own files
    copied = tmp_path / "copied"
    shutil.copytree(store_entry, copied)  # what materialize does across filesystems: the same bytes
    assert is_materialization(store_entry, copied)


@pytest.mark.parametrize("forgery", ["extra file", "changed byte", "missing file", "file link", "directory link",
                                     "artifact link", "fifo"])
def test_anything_but_the_stores_files_is_not_its_artifact(store_entry: Path, tmp_path: Path, forgery: str) -> None:
    """A workspace copy with the store's artifact.json (so the right key) but anything else
    changed proves nothing: the build makes it again from the store."""
    target = tmp_path / "ws" / ".assemble" / "artifacts" / "dep"
    shutil.copytree(store_entry, target)
    so = target / "files" / "pkg" / "_C.abi3.so"
    if forgery == "extra file":
        (target / "files" / "pkg" / "_forged.abi3.so").write_bytes(b"\x7fELF")
    elif forgery == "changed byte":
        data = bytearray(so.read_bytes())
        data[-1] ^= 1
        so.write_bytes(bytes(data))
    elif forgery == "missing file":
        so.unlink()
    elif forgery == "file link":  # even to the store's own file: the workspace must hold it, not point at it
        so.unlink()
        so.symlink_to(store_entry / "files" / "pkg" / "_C.abi3.so")
    elif forgery == "directory link":
        shutil.rmtree(target / "files" / "pkg")
        (target / "files" / "pkg").symlink_to(store_entry / "files" / "pkg")
    elif forgery == "artifact link":
        shutil.rmtree(target)
        target.symlink_to(store_entry)
    else:
        so.unlink()
        os.mkfifo(so)
    assert not is_materialization(store_entry, target)


def test_the_generated_project_is_never_written_through_a_link(tmp_path: Path, outside: Path) -> None:
    """`.assemble/build/<dep>/project` committed as a link to a directory of the user: the
    pyproject.toml and CMakeLists.txt the build generates would land there."""
    tree = tmp_path / "ws" / ".assemble" / "build" / "dep"
    tree.mkdir(parents=True)
    (tree / "project").symlink_to(outside / "dir")
    with pytest.raises(InputError, match=r"project is a symbolic link") as refused:
        Project("[project]\n", "project(x)\n").write(tree / "project")
    assert refused.value.hint == f"remove the link: rm {tree / 'project'}"
    assert list((outside / "dir").iterdir()) == []


def test_the_driver_stub_is_never_made_through_a_link(tmp_path: Path, outside: Path) -> None:
    """The CUDA driver stub of a toolkit without one (toolchain.driver), made in a build tree
    whose assemble-driver/ is a committed link: refused, nothing written where it points."""
    toolkit = tmp_path / "cuda"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include" / "cuda.h").write_text("typedef int CUresult;\nCUresult cuInit(unsigned int flags);\n")
    tree = tmp_path / "ws" / ".assemble" / "build" / "dep" / "setuptools-0123"
    tree.mkdir(parents=True)
    (tree / "assemble-driver").symlink_to(outside / "dir")
    with pytest.raises(InputError, match=r"assemble-driver is a symbolic link"):
        driver_stub(toolkit, tree / "assemble-driver", "c++")
    assert list((outside / "dir").iterdir()) == []
    (tree / "assemble-driver").unlink()
    stub = driver_stub(toolkit, tree / "assemble-driver", "c++")  # the control: without the link it is made
    assert stub == tree / "assemble-driver" / "libcuda.so" and stub.is_file()


@pytest.fixture
def workspace_root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "deps.toml").write_text(MANIFEST)
    return root


def test_a_finished_rebase_never_moves_its_journal_through_a_link(workspace_root: Path, outside: Path) -> None:
    """`.assemble/rebase/.undo/<dep>` (deeper than the state check looks) committed as a link:
    a rebase that finishes refuses it, naming it, and leaves what it points at alone."""
    workspace = open_workspace(workspace_root)
    (workspace.rebase_dir / "kern").mkdir(parents=True)
    (workspace.rebase_dir / "kern" / "journal.json").write_text("{}")
    (workspace.rebase_dir / ".undo").mkdir()
    (outside / "dir" / "journal.json").write_bytes(SECRET)
    link = workspace.rebase_dir / ".undo" / "kern"
    link.symlink_to(outside / "dir")
    before = snapshot(outside)
    with pytest.raises(InputError, match=r"\.undo/kern is a symbolic link"):
        jr.finish(workspace, "kern", keep=True)
    assert snapshot(outside) == before and link.is_symlink()
    assert (workspace.rebase_dir / "kern" / "journal.json").is_file()  # still pending: nothing half done


def test_an_aborted_rebase_puts_a_file_back_in_place_of_a_link(workspace_root: Path, outside: Path) -> None:
    """A checkout file the backup holds, replaced by a link to a file of the user with the very
    bytes of the backup: --abort puts a file back there, never touching the user's file (not
    even its time, which the restore sets)."""
    workspace = open_workspace(workspace_root)
    state = workspace_root / "forks" / "kern" / ".git" / "assemble-state.json"
    state.parent.mkdir(parents=True)
    state.write_bytes(SECRET)
    journal = jr.Journal(dep="kern", phase=jr.Phase.REPLAYING, branch=None, old_head=SHA, old_base=SHA, replay_base=SHA,
                         onto=SHA, onto_label="main", tip=SHA, url="https://example.invalid/kern.git", crossed=0,
                         manifest={}, planned=[], picks=[])
    jr.begin(workspace, journal, workspace_root / "patches" / "kern", {"state": state})
    state.unlink()
    state.symlink_to(outside / "bashrc")
    before = snapshot(outside)
    jr.Backup(workspace, "kern").restore_file("checkout/state", state)
    assert not state.is_symlink() and state.read_bytes() == SECRET
    assert snapshot(outside) == before
