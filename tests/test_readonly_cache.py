"""A read-only assembler cache (a CI image, a shared volume) serves what its mirrors hold; what
they lack is said to be the cache's doing: exit 9 (EnvironmentFailure) naming the read-only
directory and the fix, never a hint to edit deps.toml (#29 item 21). The cache is made
read-only for real, by a read-only bind mount in a mount namespace of the command's own
(``unshare``): running as root, permissions alone would not stop a write."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, GitWorkspace

READ_ONLY = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


def read_only_mounts(probe: Path) -> str | None:
    """Why a read-only bind mount cannot be made here, or None when it can."""
    probe.mkdir()
    try:
        made = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY, str(probe),
                               "sh", "-c", 'touch "$0/written"', str(probe)],
                              capture_output=True, text=True, check=False)
    except OSError as error:
        return f"unshare: {error}"
    if (probe / "written").exists():
        return "the bind mount stayed writable"
    if made.returncode == 0 or "Read-only file system" not in made.stderr:
        return f"no read-only bind mount in a mount namespace: {made.stderr.strip()[:200]}"
    return None


def assemble_read_only(ws: GitWorkspace, *args: str) -> subprocess.CompletedProcess[str]:
    """``assemble ARGS`` in the workspace with its cache mounted read-only (for this process only)."""
    env = {**os.environ, "ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "200"}
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY, str(ws.cache),
                           sys.executable, "-m", "assembler", "-C", str(ws.root), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)


def assert_read_only_failure(result: subprocess.CompletedProcess[str], ws: GitWorkspace, lacking: str) -> None:
    assert result.returncode == 9, result.stderr
    error = result.stderr[result.stderr.index("error: "):]
    assert lacking in error and f"{ws.cache / 'git'} is read-only" in error, error
    assert "ASSEMBLE_CACHE" in error and "writable" in error, error
    assert "deps.toml" not in error, error  # nothing there is wrong


def test_what_a_read_only_cache_lacks_is_the_cache_s_doing(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    why = read_only_mounts(tmp_path / "probe")
    if why is not None:
        pytest.skip(why)
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0  # the cache now holds the mirror, as fetched
    served = assemble_read_only(ws, "patches", "--format", "json")
    assert served.returncode == 0, served.stderr
    assert "read-only: not fetching" in served.stderr  # what it holds is used, and said to be as fetched

    ws.upstream.git("checkout", "-q", "-b", "next")
    ahead = ws.upstream.commit("Next release", {"README.md": "kern next\n"})
    ws.upstream.git("checkout", "-q", "main")
    original = ws.manifest.read_text()

    ws.manifest.write_text(original.replace('track = "main"', 'track = "next"'))  # a branch the mirror never fetched
    for args in (("patches",), ("patches", "--offline")):
        assert_read_only_failure(assemble_read_only(ws, *args), ws, "has no next")

    ws.manifest.write_text(original.replace(ws.base, ahead))  # a pin the mirror never fetched
    for args in (("patches",), ("patches", "--offline")):
        assert_read_only_failure(assemble_read_only(ws, *args), ws, f"has no commit {ahead[:12]}")

    # writable, the same pin is fetched: the read-only verdict came from the mount, not the input
    fetched = ws.assemble("patches", "--format", "json")
    assert fetched.returncode == 0, fetched.stderr
