"""Symbolic links (and FIFOs) committed where assemble keeps workspace state: `.assemble`,
`forks`, their entries, the lock, a build log. Each is refused with exit 2, naming the link
and `rm LINK`, and what it points at outside the workspace stays byte for byte as it was;
the one legitimate link, `.assemble/roots/cache` (toolchain/sccache.path_roots), is not."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from assembler.builder.builder import _run_logged, build_log
from assembler.builder.shards import record_unit_times
from assembler.errors import ExitCode, InputError
from assembler.workspace import open_workspace
from tests.conftest import GitWorkspace

SECRET = b"export TOKEN=do-not-touch\n"


def snapshot(path: Path) -> dict[str, bytes | None]:
    """Every file below ``path`` (or ``path`` itself) with its bytes; directories as None."""
    if path.is_file():
        return {".": path.read_bytes()}
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None) for p in sorted(path.rglob("*"))}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """The user's files outside the workspace: a file (a stand-in for ~/.bashrc) and a
    directory holding files named like state, the targets of the links below."""
    home = tmp_path / "home"
    (home / "dir" / "logs").mkdir(parents=True)
    (home / "bashrc").write_bytes(SECRET)
    for name in ("lock", "logs/kern.log", ".gitignore", "kern"):
        (home / "dir" / name).write_bytes(SECRET)
    return home


@contextlib.contextmanager
def bounded(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the body blocks, e.g. opening a FIFO."""
    def expire(signum: int, frame: FrameType | None) -> None:
        raise AssertionError(f"blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def plant_link(root: Path, link: str, target: Path) -> Path:
    path = root / link
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def assert_refused(result: object, link: Path) -> None:
    import subprocess

    assert isinstance(result, subprocess.CompletedProcess)
    assert result.returncode == ExitCode.BAD_INPUT, (result.returncode, result.stdout, result.stderr)
    assert f"error: {link} is a symbolic link" in result.stderr, result.stderr
    assert f"hint: remove the link: rm {link}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


# (where the link is committed, what it points at: "file" or "dir" of the user)
LINKS = [
    (".assemble", "dir"),
    (".assemble/lock", "file"),
    (".assemble/logs/kern.log", "file"),
    (".assemble/logs", "dir"),
    (".assemble/.gitignore", "file"),
    (".assemble/check", "dir"),
    (".assemble/build/kern", "dir"),
    (".assemble/roots", "dir"),
    ("forks", "dir"),
    ("forks/kern", "dir"),
    ("forks/.gitignore", "file"),
]


@pytest.mark.parametrize("command", ["check", "checkout", "status", "build"])
@pytest.mark.parametrize(("link", "kind"), LINKS, ids=[link for link, _ in LINKS])
def test_a_link_in_the_state_is_refused_and_its_target_untouched(git_workspace: GitWorkspace, outside: Path, link: str,
                                                                 kind: str, command: str) -> None:
    target = outside / "bashrc" if kind == "file" else outside / "dir"
    before = snapshot(outside)
    planted = plant_link(git_workspace.root, link, target)
    args = ["build", "--cuda", "13.2"] if command == "build" else [command]
    assert_refused(git_workspace.assemble(*args), planted)
    assert snapshot(outside) == before
    assert planted.is_symlink()  # refused, not replaced behind the user's back


def test_check_writes_the_lock_record_only_when_the_lock_is_a_file(git_workspace: GitWorkspace) -> None:
    """The control for the test above: without the link, `check` does take the lock (its
    record lands in .assemble/lock), so the refusal above is what kept the target intact."""
    git_workspace.assemble("check")
    record = (git_workspace.root / ".assemble" / "lock").read_text()
    assert record.split("\n")[2].endswith(" check"), record


def test_a_fifo_at_the_lock_is_refused_not_waited_on(git_workspace: GitWorkspace) -> None:
    state = git_workspace.root / ".assemble"
    state.mkdir()
    os.mkfifo(state / "lock")
    with bounded(60):
        result = git_workspace.assemble("check")
    assert result.returncode == ExitCode.BAD_INPUT, result.stderr
    assert f"error: {state / 'lock'} is a FIFO" in result.stderr, result.stderr
    assert f"hint: remove it: rm {state / 'lock'}" in result.stderr


def test_a_state_dir_that_is_a_file_is_refused(git_workspace: GitWorkspace) -> None:
    (git_workspace.root / ".assemble").write_bytes(SECRET)
    result = git_workspace.assemble("checkout")
    assert result.returncode == ExitCode.BAD_INPUT, result.stderr
    assert f"{git_workspace.root / '.assemble'} is not a directory" in result.stderr
    assert (git_workspace.root / ".assemble").read_bytes() == SECRET


def test_the_cache_link_assemble_makes_is_not_refused(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    """`.assemble/roots/cache` is assemble's own link (it names the cache): it and anything
    else in `.assemble/roots/` stay allowed, and a run replaces it rather than writing into it."""
    (tmp_path / "elsewhere").mkdir()
    plant_link(git_workspace.root, ".assemble/roots/cache", tmp_path / "elsewhere")
    assert git_workspace.assemble("checkout").returncode == ExitCode.OK
    result = git_workspace.assemble("status")
    assert result.returncode == ExitCode.OK, result.stderr
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_link_made_after_the_workspace_was_checked_is_still_not_followed(git_workspace: GitWorkspace,
                                                                            outside: Path) -> None:
    """The writers open their files without following links, whatever the check at first use
    saw: the lock, the build log, the unit times (a directory on the way)."""
    workspace = open_workspace(git_workspace.root)
    state = workspace.state_dir  # checked now: nothing there yet
    before = snapshot(outside)

    lock = plant_link(git_workspace.root, ".assemble/lock", outside / "bashrc")
    with pytest.raises(InputError, match="is a symbolic link") as refused, workspace.lock():
        pass
    assert refused.value.hint == f"remove the link: rm {lock}"
    lock.unlink()

    log = build_log(state, "kern")
    plant_link(git_workspace.root, ".assemble/logs/kern.log", outside / "bashrc")
    with pytest.raises(InputError, match="is a symbolic link"):
        _run_logged([sys.executable, "-c", "print('compiler output')"], git_workspace.root, dict(os.environ), log,
                    lambda _: None)

    plant_link(git_workspace.root, ".assemble/unit-times", outside / "dir")
    raw = git_workspace.root / "times.jsonl"
    raw.write_text('{"unit": "csrc/kern.cpp", "seconds": 1.5}\n')
    with pytest.raises(InputError, match="unit-times is a symbolic link"):
        record_unit_times(state, "kern", raw)
    assert snapshot(outside) == before


def test_the_ci_log_group_never_prints_a_linked_log(git_workspace: GitWorkspace, outside: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Under CI each finished dependency's log is printed; a log committed as a link to a file
    of the machine (a secret) prints nothing, while a log that is a file prints."""
    from assembler.cli.build import _Progress

    state = git_workspace.root / ".assemble"
    plant_link(git_workspace.root, ".assemble/logs/kern.log", outside / "bashrc")
    _Progress(logs=state)._group("kern")
    assert SECRET.decode().strip() not in capsys.readouterr().err
    (state / "logs" / "kern.log").unlink()
    (state / "logs" / "kern.log").write_text("compiler output\n")
    _Progress(logs=state)._group("kern")
    assert "compiler output" in capsys.readouterr().err


def test_a_generated_file_committed_as_a_link_is_replaced_not_trusted(git_workspace: GitWorkspace,
                                                                      outside: Path) -> None:
    """A generated file (the build tree's pyproject.toml) committed as a link to a file with the
    very bytes assemble would write: the link is replaced by a file, the target left alone."""
    from assembler.fsutil import atomic_write_if_changed

    before = snapshot(outside)
    link = plant_link(git_workspace.root, ".assemble/build/kern/pyproject.toml", outside / "bashrc")
    assert atomic_write_if_changed(link, SECRET, inside=git_workspace.root)
    assert not link.is_symlink() and link.read_bytes() == SECRET
    assert snapshot(outside) == before
    with pytest.raises(InputError, match="kern is a symbolic link"):
        atomic_write_if_changed(plant_link(git_workspace.root, ".assemble/compdb/kern", outside / "dir") / "x.json",
                                SECRET, inside=git_workspace.root)
    assert snapshot(outside) == before
