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
# (its pid in $STOPPED) until it is killed or the file $STOPPED.resume appears.
WRAPPER = """#!/bin/sh
echo "$*" >> "$GIT_RUNS"
n=$(wc -l < "$GIT_RUNS")
"{real}" "$@"
code=$?
if [ "$n" -eq "${{STOP_AT:-0}}" ] || {{ [ "$1" = "${{STOP_ON:-}}" ] && [ ! -e "$STOPPED" ]; }}; then
    echo $$ > "$STOPPED.tmp" && mv "$STOPPED.tmp" "$STOPPED"
    while [ ! -e "$STOPPED.resume" ]; do sleep 0.02; done
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
    env = {**os.environ, "ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "200",
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GIT_RUNS": str(runs), "STOPPED": str(stopped),
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
        ws.manifest.write_text(
            ws.manifest.read_text().replace('commit = "', 'source = "https://git.invalid/kern-fork"\ncommit = "', 1))
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
@pytest.mark.integration
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


# -- item 10: a repository in the workspace reads only its own objects --------------------------------

@pytest.mark.parametrize("trick",
                         ["alternates (absolute)", "alternates (relative)", "objects is a link", "a pack is a link",
                                   "a loose object is a link", "commondir"])
def test_a_repository_reading_objects_outside_itself_is_never_fetched(git_workspace: GitWorkspace, tmp_path: Path,
                                                                       trick: str) -> None:
    """[mirrors] maps the upstream to remotes/kern, a bare repository carried in the workspace,
    which reaches into a private repository of the machine; the pin is a commit only that one
    has. assemble refuses to fetch from it, names what it found, and nothing of the private
    repository reaches the cache or the checkout."""
    from tests.gitrepo import Repo

    ws = git_workspace
    private = Repo(tmp_path / "private")
    secret = private.commit("Private work", {"secret.txt": "the secret\n"})
    git(private.path, "repack", "-q", "-a", "-d")
    private_objects = private.path / ".git" / "objects"
    loose = private.commit("More private work", {"more.txt": "more\n"})  # left loose
    bare = ws.root / "remotes" / "kern"
    (ws.root / "remotes" / "kern").rename(ws.root / "remotes" / "kern-src")
    git(ws.root / "remotes", "clone", "-q", "--bare", "kern-src", str(bare))
    pin = secret
    if trick.startswith("alternates"):
        line = str(private_objects) if "absolute" in trick else os.path.relpath(private_objects, bare / "objects")
        (bare / "objects" / "info" / "alternates").write_text(line + "\n")
        needle = f"{bare}/objects/info/alternates makes it read the objects of other repositories"
    elif trick == "objects is a link":
        shutil.rmtree(bare / "objects")
        (bare / "objects").symlink_to(private_objects)
        needle = f"{bare}/objects is a symbolic link (to {private_objects})"
    elif trick == "a pack is a link":
        for pack in (private_objects / "pack").iterdir():
            (bare / "objects" / "pack" / pack.name).symlink_to(pack)
        needle = f"{bare}/objects/pack/pack-"
    elif trick == "a loose object is a link":
        pin = loose
        for name in ("loose", "tree", "blob"):  # the commit, its tree and its new blob, each by its own name
            sha = {"loose": loose, "tree": git(private.path, "rev-parse", f"{loose}^{{tree}}"),
                   "blob": git(private.path, "rev-parse", f"{loose}:more.txt")}[name]
            target = bare / "objects" / sha[:2] / sha[2:]
            target.parent.mkdir(exist_ok=True)
            target.symlink_to(private_objects / sha[:2] / sha[2:])
        needle = " is a symbolic link (to "
    else:
        (bare / "commondir").write_text(str(private.path / ".git") + "\n")
        needle = f"{bare}/commondir makes it read another repository's objects"
    ws.manifest.write_text(ws.manifest.read_text().replace(ws.base, pin))
    result = ws.assemble("checkout")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert (needle in result.stderr
            and "assemble fetches only from a repository whose objects are its own" in result.stderr)
    assert "hint: make it self-contained" in result.stderr and "Traceback" not in result.stderr
    for repository in [*ws.cache.glob("git/*.git"), *([ws.fork] if ws.fork.exists() else [])]:
        for sha in (secret, loose):
            assert (subprocess.run(["git", "-C", str(repository), "cat-file", "-e", sha],
                                   capture_output=True).returncode != 0)


# -- item 12: a checkout does not depend on the cache staying where it was -------------------------------

def _commit_in_fork(ws: GitWorkspace, subject: str) -> str:
    (ws.fork / "NOTES.md").write_text(f"{subject}\n")
    git(ws.fork, "add", "NOTES.md")
    git(ws.fork, "commit", "-q", "-m", subject)
    return git(ws.fork, "rev-parse", "HEAD")


def _unexported(ws: GitWorkspace) -> list[str]:
    result = ws.assemble("status", "--json")
    assert result.returncode == 0, result.stderr
    import json

    return [commit["subject"] for commit in json.loads(result.stdout)["deps"][0]["unexported"]]


def _whole(repository: Path) -> None:
    """Every object its refs need is its own: no alternates, and git's connectivity check passes."""
    assert not (repository / ".git" / "objects" / "info" / "alternates").exists()
    fsck = subprocess.run(["git", "-C", str(repository), "fsck", "--connectivity-only", "--no-dangling"],
                          capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


def _copy_of(ws: GitWorkspace, root: Path) -> GitWorkspace:
    """``cp -a`` of the workspace (its checkout and its remotes/ included), on the same cache."""
    from tests.gitrepo import Repo

    root.parent.mkdir(parents=True)
    subprocess.run(["cp", "-a", str(ws.root), str(root)], check=True)
    upstream = Repo.__new__(Repo)
    upstream.path, upstream.clock = root / "remotes" / "kern", ws.upstream.clock
    return GitWorkspace(root=root, upstream=upstream, base=ws.base, cache=ws.cache)


def test_a_copied_workspace_checks_out_a_new_pin(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    """`cp -a` a workspace, bump the pin in the copy: its checkout needs nothing of the
    original (whose relative [mirrors] path makes another mirror), and the copy's checkout
    owns its objects."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    copy = _copy_of(ws, tmp_path / "copy" / "ws")
    new_pin = copy.upstream.commit("Upstream moves on", {"docs/more.md": "more\n"})
    copy.manifest.write_text(copy.manifest.read_text().replace(ws.base, new_pin))
    result = copy.assemble("checkout")
    assert result.returncode == 0, result.stderr
    assert git(copy.fork, "rev-parse", "HEAD~2") == new_pin
    _whole(copy.fork)
    shutil.rmtree(ws.root)
    assert copy.assemble("checkout").returncode == 0
    _whole(copy.fork)


@pytest.mark.parametrize("how", ["clean", "prune --older-than 0"])
def test_cache_clean_and_prune_leave_checkouts_whole(git_workspace: GitWorkspace, how: str) -> None:
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    _commit_in_fork(ws, "My work")
    from tests.conftest import run_assemble

    # from outside the workspace: a prune inside it keeps what it uses
    cleaned = run_assemble("cache", *how.split(), "--json", cwd=ws.root.parent, env={"ASSEMBLE_CACHE": str(ws.cache)})
    assert cleaned.returncode == 0, cleaned.stderr
    assert not list(ws.cache.glob("git/*.git"))
    _whole(ws.fork)
    assert _unexported(ws) == ["My work"]
    assert ws.assemble("export", "kern").returncode == 0
    new_pin = ws.upstream.commit("Upstream moves on", {"docs/more.md": "more\n"})
    ws.manifest.write_text(ws.manifest.read_text().replace(ws.base, new_pin))
    result = ws.assemble("checkout")
    assert result.returncode == 0, result.stderr
    assert git(ws.fork, "rev-parse", "HEAD~3") == new_pin


def _borrowing(ws: GitWorkspace) -> None:
    """Make the checkout what an older assemble made (`git clone --shared`): it keeps only the
    objects the mirror lacks and reads the rest through objects/info/alternates."""
    mirror = next(ws.cache.glob("git/*.git"))
    (ws.fork / ".git" / "objects" / "info" / "alternates").write_text(f"{mirror / 'objects'}\n")
    git(ws.fork, "repack", "-q", "-a", "-d", "-l")
    git(ws.fork, "prune-packed")
    objects = ws.fork / ".git" / "objects"
    for loose in objects.glob("[0-9a-f][0-9a-f]/*"):
        if (mirror / "objects" / loose.relative_to(objects)).exists():
            loose.unlink()  # the mirror's: borrowed
    count = subprocess.run(["git", "-C", str(ws.fork), "count-objects", "-v"], capture_output=True, text=True).stdout
    assert "in-pack: 0" not in count  # its own commits are its own ...
    (ws.fork / ".git" / "objects" / "info" / "alternates").rename(ws.fork / ".git" / "alternates.saved")
    assert (subprocess.run(["git", "-C", str(ws.fork), "fsck", "--connectivity-only"], capture_output=True).returncode
            != 0)
    # ... the rest not
    (ws.fork / ".git" / "alternates.saved").rename(ws.fork / ".git" / "objects" / "info" / "alternates")


def test_a_checkout_that_borrows_objects_stops_borrowing(git_workspace: GitWorkspace) -> None:
    """A checkout made by an older assemble: the next checkout (a no-op otherwise) makes it
    own its objects, so that `cache clean` cannot break it afterwards."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    head = _commit_in_fork(ws, "My work")
    _borrowing(ws)
    result = ws.assemble("checkout", "--json")
    assert result.returncode == 0, result.stderr
    import json

    assert json.loads(result.stdout)["deps"][0]["action"] == "up-to-date"
    _whole(ws.fork)
    assert ws.assemble("cache", "clean").returncode == 0
    _whole(ws.fork)
    assert git(ws.fork, "rev-parse", "HEAD") == head and _unexported(ws) == ["My work"]


def test_a_checkout_whose_borrowed_objects_are_gone_is_said_so_and_repaired(git_workspace: GitWorkspace) -> None:
    """The same checkout after `cache clean` removed the mirror it borrows from: `status` and
    `deps` say so (never an empty list of unexported commits), and `checkout` fetches the
    mirror again and copies what the checkout lacks, keeping the user's commit."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    head = _commit_in_fork(ws, "My work")
    _borrowing(ws)
    assert ws.assemble("cache", "clean").returncode == 0
    for words in (["status"], ["deps"]):
        told = ws.assemble(*words)
        assert told.returncode == 2, (words, told.stdout, told.stderr)
        assert "borrows objects from" in told.stderr and "which is gone" in told.stderr, told.stderr
        assert "hint: run `assemble checkout kern`" in told.stderr
    repaired = ws.assemble("checkout")
    assert repaired.returncode == 0, repaired.stderr
    _whole(ws.fork)
    assert git(ws.fork, "rev-parse", "HEAD") == head and _unexported(ws) == ["My work"]


def test_prune_keeps_the_mirror_a_running_checkout_copies_from(git_workspace: GitWorkspace, tmp_path: Path,
                                                               stopping_git: Path) -> None:
    """`assemble cache clean` while a checkout clones: the mirror is in use, kept and listed
    so; the checkout then finishes, and owes the mirror nothing afterwards."""
    import json

    ws = git_workspace
    stopped = tmp_path / "stopped-clone"
    process = _start(ws, stopping_git, tmp_path / "runs", "clone", stopped)
    assert _wait_for(stopped, process), process.communicate()
    cleaned = ws.assemble("cache", "clean", "--json")
    assert cleaned.returncode == 0, cleaned.stderr
    assert [entry["kind"] for entry in json.loads(cleaned.stdout)["in_use"]] == ["mirrors"]
    assert list(ws.cache.glob("git/*.git"))
    Path(f"{stopped}.resume").touch()
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    _whole(ws.fork)
    assert ws.assemble("cache", "clean").returncode == 0 and not list(ws.cache.glob("git/*.git"))
    _whole(ws.fork)


# -- item 18: no git on PATH is exit 7 everywhere ------------------------------------------------------

def test_a_missing_git_is_a_toolchain_error_on_every_command(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    """Without git on PATH, every command that needs it says so with exit 7 (GitPython's "Bad
    git executable" at import was exit 70 in checkout, export and patches)."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    ws.manifest.write_text(ws.manifest.read_text().replace(ws.base, git(ws.upstream.path, "rev-parse", "HEAD~1")))
    empty = tmp_path / "no-git"
    empty.mkdir()
    env = {**os.environ, "ASSEMBLE_CACHE": str(ws.cache), "PATH": str(empty)}
    for words in (["checkout"], ["export", "kern"], ["patches", "--offline"], ["deps"], ["status"], ["rebase", "kern"],
                  ["rebase", "kern", "--dry-run"]):
        result = subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws.root), *words], env=env,
                                capture_output=True, text=True)
        assert result.returncode == 7, (words, result.stdout, result.stderr)
        assert "cannot run git" in result.stderr and "hint: install git" in result.stderr, (words, result.stderr)
