"""Issue 29, item 8: a checkout stopped anywhere (SIGKILL, SIGTERM) is finished by a re-run.

The real CLI runs as its own process with a ``git`` first on PATH that runs the real git and
then, at its Nth run, stops until it is killed: the test kills assemble right there, at every
git process a fresh checkout starts (mirror, clone, remotes, series), with SIGKILL to the whole
process group (what a cancelled CI job does) and with SIGTERM to assemble alone (``kill PID``).
The re-run must finish with the very commits an uninterrupted checkout makes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import GitWorkspace, make_git_workspace
from tests.gitrepo import git

REAL_GIT = shutil.which("git")
# git, except that its run number $STOP_AT (or its first `git $STOP_ON`) stops after doing its work
# (its pid in $STOPPED) until killed.
WRAPPER = """#!/bin/sh
echo "$*" >> "$GIT_RUNS"
n=$(wc -l < "$GIT_RUNS")
"{real}" "$@"
code=$?
if [ "$n" -eq "${{STOP_AT:-0}}" ] || {{ [ "$1" = "${{STOP_ON:-}}" ] && [ ! -e "$STOPPED" ]; }}; then
    echo $$ > "$STOPPED.tmp" && mv "$STOPPED.tmp" "$STOPPED"
    exec sleep 600
fi
exit $code
"""


@pytest.fixture
def stopping_git(tmp_path: Path) -> Iterator[Path]:
    """A directory holding the stopping ``git``; every process it left asleep is killed after."""
    assert REAL_GIT is not None
    directory = tmp_path / "bin"
    directory.mkdir()
    script = directory / "git"
    script.write_text(WRAPPER.format(real=REAL_GIT))
    script.chmod(0o755)
    yield directory
    for stopped in tmp_path.glob("stopped-*"):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(stopped.read_text()), signal.SIGKILL)


def _start(ws: GitWorkspace, bin_dir: Path, runs: Path, stop_at: int | str, stopped: Path) -> subprocess.Popen[str]:
    """`assemble checkout` in a session of its own, stopping at git run ``stop_at`` (a number)
    or at the first ``git stop_at`` (a subcommand)."""
    env = {**os.environ, "ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "200", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "GIT_RUNS": str(runs), "STOPPED": str(stopped),
           **({"STOP_AT": str(stop_at)} if isinstance(stop_at, int) else {"STOP_ON": stop_at})}
    return subprocess.Popen([sys.executable, "-m", "assembler", "-C", str(ws.root), "checkout"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _wait_for(path: Path, process: subprocess.Popen[str]) -> bool:
    """Until ``path`` appears (True) or ``process`` ends without it (False); bounded, not timed."""
    deadline = time.monotonic() + 120
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return path.exists()


def _workspace(path: Path, fork: bool) -> GitWorkspace:
    """The test workspace; with ``fork``, its dependency comes from a fork of the upstream
    (``source``), so a checkout also sets up the ``upstream`` remote and fetches its mirror."""
    ws = make_git_workspace(path)
    if fork:
        from tests.gitrepo import Repo

        Repo(ws.root / "remotes" / "kern-fork").git("pull", "-q", str(ws.upstream.path), "main")
        ws.manifest.write_text(ws.manifest.read_text().replace('commit = "', 'source = "https://git.invalid/kern-fork"\ncommit = "', 1))
    return ws


def _reference(tmp_path: Path, bin_dir: Path, fork: bool = False) -> tuple[str, int]:
    """The fork HEAD of an uninterrupted checkout and how many git processes it runs."""
    ws = _workspace(tmp_path / "reference", fork)
    runs = tmp_path / "reference-runs"
    process = _start(ws, bin_dir, runs, 0, tmp_path / "never")
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    return git(ws.fork, "rev-parse", "HEAD"), len(runs.read_text().splitlines())


def _check_recovered(ws: GitWorkspace, head: str) -> None:
    again = ws.assemble("checkout")
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert git(ws.fork, "rev-parse", "HEAD") == head
    assert git(ws.fork, "status", "--porcelain") == ""
    assert "ready" in ws.assemble("deps").stdout
    assert not (ws.fork / ".git" / "objects" / "info" / "alternates").exists()  # owns its objects
    leftovers = [p.name for p in (ws.root / "forks").iterdir() if p.name not in ("kern", ".gitignore", ".kern.running")]
    assert leftovers == []


@pytest.mark.parametrize("how", ["SIGKILL to the process group", "SIGTERM to assemble"])
@pytest.mark.parametrize("kind", ["upstream", "fork"])
def test_a_checkout_killed_at_any_git_process_is_finished_by_a_re_run(tmp_path: Path, stopping_git: Path, how: str,
                                                                       kind: str) -> None:
    head, count = _reference(tmp_path, stopping_git, fork=kind == "fork")
    assert count >= 8, count  # mirror, clone, remotes, branch, series: the test covers each
    for stop_at in range(1, count + 1):
        ws = _workspace(tmp_path / f"at-{stop_at}", fork=kind == "fork")
        stopped = tmp_path / f"stopped-{stop_at}"
        runs = tmp_path / f"runs-{stop_at}"
        process = _start(ws, stopping_git, runs, stop_at, stopped)
        if not _wait_for(stopped, process):  # this run needed fewer git processes than the reference
            assert process.wait(timeout=120) == 0, process.communicate()
            continue
        command = runs.read_text().splitlines()[stop_at - 1]
        if how.startswith("SIGKILL"):
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate(timeout=120)
            assert process.returncode == -signal.SIGKILL
        else:
            os.kill(process.pid, signal.SIGTERM)
            _, stderr = process.communicate(timeout=120)
            assert process.returncode == 143, (command, stderr)  # git was stopped and waited for: the run ended itself
            assert "terminated; re-run the same command" in stderr and "Traceback" not in stderr, stderr
            with pytest.raises(ProcessLookupError):
                os.kill(int(stopped.read_text()), 0)  # no git of that run lives on
        try:
            _check_recovered(ws, head)
        except AssertionError as error:
            raise AssertionError(f"stopped at git run {stop_at}: git {command}: {error}") from None


def test_a_re_run_waits_for_the_git_of_a_killed_checkout(git_workspace: GitWorkspace, tmp_path: Path,
                                                          stopping_git: Path) -> None:
    """SIGKILL to assemble alone, while its `git clone` still runs: that git outlives it. The
    re-run waits for it (the flock its git processes hold), rather than racing it, and
    finishes once it has ended."""
    ws = git_workspace
    reference, _ = _reference(tmp_path, stopping_git)
    stopped = tmp_path / "stopped-clone"
    process = _start(ws, stopping_git, tmp_path / "runs", "clone", stopped)
    assert _wait_for(stopped, process), process.communicate()
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=120)
    orphan = int(stopped.read_text())
    os.kill(orphan, 0)  # the clone's git is still there

    env = {**os.environ, "ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "200"}
    log = tmp_path / "re-run.err"
    with log.open("w") as errors:
        again = subprocess.Popen([sys.executable, "-m", "assembler", "-C", str(ws.root), "checkout"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=errors, text=True)
        deadline = time.monotonic() + 120
        while "wait for the git processes of an interrupted run" not in log.read_text() and again.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        assert again.poll() is None, log.read_text()  # waiting, not racing the clone
        os.kill(orphan, signal.SIGKILL)
        assert again.wait(timeout=300) == 0, log.read_text()
    assert git(ws.fork, "rev-parse", "HEAD") == reference
