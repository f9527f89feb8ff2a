"""Issue 29, item 9: a checkout that runs out of room is never taken for a conflict.

forks/ lies on a real file system of its own, too small for the series (a tmpfs of a few
hundred kB, mounted for the test: skipped where mounting is not allowed), or assemble runs
under a file size limit (``ulimit -f``, RLIMIT_FSIZE). The checkout fails as the machine's
doing (exit 9, naming the fix), never as a conflict; once there is room, the re-run finishes
with the commits an unhindered checkout makes. The sizes sweep the point where space runs out
across the clone, the branch, git am's setup and the series.
"""

from __future__ import annotations

import base64
import os
import random
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import GitWorkspace, make_git_workspace
from tests.gitrepo import git

PATCHES = 6
FILE_BYTES = 48_000  # per patch: base64 of random bytes, which zlib cannot shrink much


def _big_series(ws: GitWorkspace) -> None:
    """Replace the series by PATCHES patches, each adding a file of FILE_BYTES (one fast-import)."""
    lines = [f"reset refs/heads/big\nfrom {ws.base}\n"]
    for n in range(PATCHES):
        data = base64.encodebytes(random.Random(n).randbytes(FILE_BYTES * 3 // 4)).decode()
        message = f"Add blob {n}\n"
        lines.append(f"commit refs/heads/big\ncommitter Dev <dev@x> {1_700_000_000 + n} +0000\n"
                     f"data {len(message)}\n{message}M 100644 inline blobs/{n}.txt\ndata {len(data)}\n{data}\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=ws.upstream.path, input="".join(lines).encode(), check=True)
    for old in ws.patches.iterdir():
        old.unlink()
    git(ws.upstream.path, "format-patch", "--no-signature", "--zero-commit", "--no-numbered", "--full-index", "-q",
        "-o", str(ws.patches), f"{ws.base}..big")
    (ws.patches / "series").write_text("\n".join(sorted(p.name for p in ws.patches.iterdir())) + "\n")
    git(ws.upstream.path, "branch", "-q", "-D", "big")


def _workspace(path: Path) -> GitWorkspace:
    ws = make_git_workspace(path)
    _big_series(ws)
    return ws


def _checkout(ws: GitWorkspace, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    """`assemble checkout` as a process of its own, under a file size limit of ``fsize`` bytes."""
    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = {**os.environ, "ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws.root), "checkout"], env=env, text=True,
                          capture_output=True, preexec_fn=limit, timeout=600)


def _refused_as_the_machines(result: subprocess.CompletedProcess[str], where: str) -> None:
    """Exit 9 with its hint, never a conflict (5), a refusal to lose work (4) or a traceback."""
    assert result.returncode == 9, (where, result.stdout, result.stderr)
    assert "does not apply" not in result.stderr and "Traceback" not in result.stderr, (where, result.stderr)
    assert "\nhint: " in result.stderr and "run the command again" in result.stderr, (where, result.stderr)


def _finished(ws: GitWorkspace, head: str, where: str) -> None:
    again = ws.assemble("checkout")
    assert again.returncode == 0, (where, again.stdout, again.stderr)
    assert git(ws.fork, "rev-parse", "HEAD") == head, where
    assert git(ws.fork, "status", "--porcelain") == "", where
    assert "ready" in ws.assemble("deps").stdout, where


@pytest.fixture
def reference(tmp_path: Path) -> str:
    """The fork HEAD of a checkout with all the room it needs."""
    ws = _workspace(tmp_path / "reference")
    assert ws.assemble("checkout").returncode == 0
    return git(ws.fork, "rev-parse", "HEAD")


@pytest.fixture
def small_forks(tmp_path: Path) -> Iterator[list[Path]]:
    """Mount points made by the test (unmounted after it); skipped where mounting is refused."""
    mounted: list[Path] = []
    probe = tmp_path / "probe"
    probe.mkdir()
    if shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                                                         capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not allowed here (needs root or CAP_SYS_ADMIN)")
    mounted.append(probe)
    yield mounted
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


@pytest.mark.integration
def test_a_full_file_system_is_never_a_conflict_and_a_re_run_finishes(tmp_path: Path, reference: str,
                                                                        small_forks: list[Path]) -> None:
    finished = 0
    sizes = (64, 112, 160, 544, 700, 800, 900, 1000, 1100, 1600)  # the clone, git am's setup, the series; all fits
    for size_kb in sizes:
        ws = _workspace(tmp_path / f"size-{size_kb}")
        forks = ws.root / "forks"
        forks.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(forks)], check=True)
        small_forks.append(forks)
        where = f"forks/ on a tmpfs of {size_kb} kB"
        first = _checkout(ws)
        if first.returncode == 0:
            finished += 1
            assert git(ws.fork, "rev-parse", "HEAD") == reference, where
            continue
        _refused_as_the_machines(first, where)
        assert "stopped" not in ws.assemble("deps").stdout, where
        again = _checkout(ws)  # still full: the same answer, never a conflict on the re-run
        _refused_as_the_machines(again, where + ", re-run")
        subprocess.run(["mount", "-o", "remount,size=64m", str(forks)], check=True)  # room is made
        _finished(ws, reference, where)
    assert 0 < finished < len(sizes), "the sizes must reach from too small to enough"


@pytest.mark.parametrize("fsize", [4_096, 16_384, 40_000])
def test_a_file_size_limit_is_never_a_conflict_and_a_re_run_finishes(tmp_path: Path, reference: str,
                                                                     fsize: int) -> None:
    ws = _workspace(tmp_path / "ws")
    where = f"ulimit -f {fsize} bytes"
    first = _checkout(ws, fsize)
    _refused_as_the_machines(first, where)
    again = _checkout(ws, fsize)
    _refused_as_the_machines(again, where + ", re-run")
    _finished(ws, reference, where)
