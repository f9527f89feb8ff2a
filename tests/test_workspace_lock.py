"""The workspace lock, taken by the library entry points that write: re-entrant within one
Workspace, and telling its on_lock_wait callback (once) while another process holds it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from assembler.errors import ExitCode, LockedError
from assembler.git.sync import sync_checkouts
from assembler.workspace import locked, open_workspace
from tests.conftest import GitWorkspace

HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def test_a_held_lock_is_waited_for_then_refused(git_workspace: GitWorkspace, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = git_workspace
    (ws.root / ".assemble").mkdir(exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(ws.root / ".assemble" / "lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        waited: list[Path] = []
        workspace = open_workspace(ws.root, on_lock_wait=waited.append)
        monkeypatch.setenv("ASSEMBLE_LOCK_TIMEOUT", "0.3")
        monkeypatch.setenv("ASSEMBLE_CACHE", str(ws.cache))
        with pytest.raises(LockedError) as refused:
            sync_checkouts(workspace, list(workspace.manifest.deps.values()))  # a library entry point: it locks
        assert refused.value.exit_code == ExitCode.LOCKED
        assert waited == [ws.root]
        assert not ws.fork.exists()
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_is_reentrant(git_workspace: GitWorkspace) -> None:
    workspace = open_workspace(git_workspace.root, on_lock_wait=lambda root: pytest.fail(f"waited on {root}"))
    calls: list[int] = []

    @locked
    def inner(ws: object, depth: int) -> None:
        calls.append(depth)

    with workspace.lock():
        inner(workspace, 1)
        with workspace.lock():
            inner(workspace, 2)
    assert calls == [1, 2]


def test_the_lock_timeout_names_the_holder_and_how_long_it_waited(git_workspace: GitWorkspace,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A real assemble process holds the lock (its workspace's lock file says who); another
    gives up after ASSEMBLE_LOCK_TIMEOUT naming how long it waited and which command holds it."""
    ws = git_workspace
    holding = ("import sys, time, pathlib\nfrom assembler.workspace import open_workspace\n"
               "sys.argv = ['assemble', 'build', '--cuda', '13.2']\n"
               f"with open_workspace(pathlib.Path({str(ws.root)!r})).lock():\n    print('held', flush=True)\n    "
               "time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", holding], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("ASSEMBLE_LOCK_TIMEOUT", "0.5")
        result = ws.assemble("checkout")
        assert result.returncode == ExitCode.LOCKED, result.stderr
        assert f"held by pid {holder.pid} (`assemble build --cuda 13.2`, since " in result.stderr, result.stderr
        assert "waiting for the workspace lock of" in result.stderr and f"pid {holder.pid}" in result.stderr
        float(result.stderr.split(": waited ", 1)[1].split(" s for the workspace lock", 1)[0])  # how long, in seconds
        assert "ASSEMBLE_LOCK_TIMEOUT (now 0.5 s)" in result.stderr
    finally:
        holder.kill()
        holder.wait()
