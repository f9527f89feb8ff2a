"""The one way assemble runs git as a process: isolated environment, one error type, and
``--end-of-options`` (or ``--``) before every argument that comes from a manifest, a series or
the command line, so a ref, URL or path is never read as an option.

Three shapes, all on :data:`assembler.git.reproducible.GIT_ENV` (no global or system configuration,
no hooks, no prompts) with a fixed committer:

- :class:`GitView`: a repository by its git directory, optionally seeing other object stores;
  for reading objects and refs (status detection, resolving a ref in a mirror).
- :class:`WorkTree`: commands run inside a checkout (checkout, export, build provenance;
  :class:`assembler.git.sequencer.Sequencer`, rebase's replays, is one).
- :class:`assembler.git.scratch.Scratch`: a throwaway bare repository for trials that write.

This module is the layer's engine, and the only place a git process starts: the layer does
not use GitPython (issue 31 named it; the figures below decided against it).
"""

# Engine: plain git processes, not GitPython. benchmarks/git_layer.py, 3000 files, 30 commits,
# CPU time of a fresh interpreter that has imported assembler.git and does one operation
# (median of 15; wall times on the shared 2-CPU machine were too noisy to quote):
#   nothing more: 56 ms        `import git` (GitPython, which runs `git version`): 158 ms (+102 ms)
#   `git status` (deps):       GitPython 167 ms, WorkTree.out 74 ms
#   HEAD (no-op checkout):     GitPython repo.head.commit 176 ms, state.read_head 62 ms (no process)
#   dirty (patches --offline): GitPython repo.is_dirty 191 ms, WorkTree.dirty 82 ms
# GitPython's import alone is the whole 100 ms start-up budget of `deps`, `status` and a no-op
# `checkout` (tests/test_startup.py), and those share these functions with export and rebase.
# Warm, a command costs the same either way (`git status` 23.5 vs 25.6 ms, format-patch 15.4 vs
# 16.0 ms: GitPython's `repo.git.x()` is a subprocess too), and its Git.execute, interrupted,
# closes git's pipes without signalling git or waiting for it (run_git sends SIGTERM and waits).
from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from assembler.errors import EnvironmentFailure, InputError, ToolchainError, environment_failure
from assembler.git.reproducible import COMMITTER_ENV, END_OF_OPTIONS, GIT_ENV, git_error_line, is_full_sha

__all__ = ["DIFF_CONFIG", "END_OF_OPTIONS", "SOUND_REPO_HINT", "GitFailed", "GitView", "WorkTree", "isolated_env",
           "object_dir", "object_id", "run_git", "subcommand"]
# Trial commits are throwaway; a fixed identity keeps commit-tree working without user config.
IDENTITY_ENV = {
    "GIT_AUTHOR_NAME": "assemble", "GIT_AUTHOR_EMAIL": "assemble@localhost",
    "GIT_AUTHOR_DATE": "1000000000 +0000", "GIT_COMMITTER_DATE": "1000000000 +0000",
}
# Output formats that configuration could otherwise change under our parser (GIT_ENV leaves out
# the global and system files; these override a checkout's own config).
DIFF_CONFIG = ("-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false", "-c", "log.showSignature=false",
               "-c", "core.quotePath=false", "-c", "diff.relative=false")
INHERITED = ("GIT_DIR", "GIT_INDEX_FILE", "GIT_WORK_TREE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES")
SOUND_REPO_HINT = ("check that the repository is readable and not damaged (git fsck), and that no other git holds "
                   "its lock")

Result = subprocess.CompletedProcess[bytes] | subprocess.CompletedProcess[str]


def object_id(text: str, where: str) -> str:
    """``text`` when it is a full object name (runner.is_full_sha), the only shape a commit read
    from git's output may have before it goes back to git or into a todo list; otherwise an
    error naming ``where`` (a damaged repository, or a record forged by data)."""
    if not is_full_sha(text):
        raise InputError(f"{where}: git gave {text[:80]!r} where a commit name belongs", hint=SOUND_REPO_HINT)
    return text


class GitFailed(InputError):
    """A git command refused its input (an unknown revision, a damaged repository, a lock held
    by another git): exit code 2, with git's own first line. Conflicts are reported as such
    by the callers that expect them."""

    def __init__(self, where: str, args: Sequence[str], result: Result, hint: str | None = None) -> None:
        stderr = result.stderr or ""
        reason = git_error_line(stderr, result.returncode) if stderr.strip() else f"exit status {result.returncode}"
        if result.returncode < 0:  # killed by a signal: what it said before is not the reason
            reason = f"killed by {signal_name(-result.returncode)}"
        super().__init__(f"{where}: git {subcommand(args)} failed: {reason}", hint=hint or SOUND_REPO_HINT)
        self.result = result
        refused = refusal(self.message, stderr if isinstance(stderr, str) else stderr.decode(errors="replace"),
                          result.returncode)
        if refused is not None:  # a full disk or a read-only file system, not a bad input
            self.exit_code = refused.exit_code
            self.hint = refused.hint


def signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# What git says (or how it ends) when a file outgrew `ulimit -f`: EFBIG, or SIGXFSZ when not ignored.
FILE_SIZE_LIMIT_HINT = "raise the file size limit (ulimit -f), then run the command again"


def refusal(message: str, output: str, returncode: int) -> EnvironmentFailure | None:
    """``message`` as an EnvironmentFailure when git's ``output`` or its end says the machine
    refused (a full disk, a quota, a read-only file system, a file size limit), else None."""
    import signal

    refused = environment_failure(message, output)
    if refused is None and (returncode == -signal.SIGXFSZ or "File too large" in output
                            or f"died of signal {int(signal.SIGXFSZ)}" in output):  # one of git's own children
        refused = EnvironmentFailure(message, hint=FILE_SIZE_LIMIT_HINT)
    return refused


def subcommand(args: Sequence[str]) -> str:
    """The git command in ``args``, past ``-c key=value`` and other options."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] == "-c" else rest[1:]
    return rest[0] if rest else ""


def isolated_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with git isolated: GIT_ENV, the fixed committer, C locale,
    and none of the caller's GIT_DIR / GIT_INDEX_FILE / ... (a hook or an outer git must not
    redirect ours)."""
    env = {key: value for key, value in os.environ.items() if key not in INHERITED}
    env.update(GIT_ENV, **COMMITTER_ENV, LC_ALL="C")
    env.update(extra or {})
    return env


def _spawn_failed(error: OSError) -> ToolchainError:
    return ToolchainError(f"cannot run git: {error.strerror or error}", hint="install git")


def run_git(args: Sequence[str], env: Mapping[str, str], *, cwd: Path | None = None, input: str | bytes | None = None,
            text: bool = False, pass_fds: Sequence[int] = ()) -> subprocess.CompletedProcess[Any]:
    """``git ARGS``, its output captured, the way every git process of assemble is run.

    Unlike ``subprocess.run``, an interrupt never leaves git killed with SIGKILL (which keeps
    its ``index.lock`` and half-written state) nor running on after assemble: on Ctrl-C (git got
    the SIGINT too: one process group) or SIGTERM (the CLI raises it as an interrupt) git is
    sent SIGTERM, on which it removes its lock files, and waited for before the interrupt goes
    on. A descriptor in ``pass_fds`` (an flock) is held by git and its children until they end,
    so a run that starts after assemble was killed can wait for them."""
    try:
        process = subprocess.Popen(["git", *args], cwd=cwd, env=dict(env), text=text, pass_fds=tuple(pass_fds),
                                   stdin=subprocess.PIPE if input is not None else None,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as error:
        raise _spawn_failed(error) from None
    with process:
        try:
            stdout, stderr = process.communicate(input)
        except BaseException:
            _stop(process)
            raise
    return subprocess.CompletedProcess(["git", *args], process.returncode, stdout, stderr)


def _stop(process: subprocess.Popen[Any]) -> None:
    """End ``process`` the way git cleans up after itself (SIGTERM), and wait for it."""
    import signal

    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    process.wait()


def object_dir(repo_path: Path) -> Path:
    """The object store of a bare repository or of a checkout."""
    dot_git = repo_path / ".git"
    return (dot_git if dot_git.is_dir() else repo_path) / "objects"


class GitView:
    """git commands against one repository by its git directory, optionally seeing other
    object stores (through GIT_ALTERNATE_OBJECT_DIRECTORIES, so nothing is written to make them
    visible). Output is bytes; :meth:`out` decodes."""

    def __init__(self, git_dir: Path, borrow: Sequence[Path] = ()) -> None:
        self.path = git_dir
        self.where = str(git_dir)  # for messages
        self.env = isolated_env({**IDENTITY_ENV, "GIT_DIR": str(git_dir)})
        if borrow:
            stores = dict.fromkeys(str(object_dir(r).resolve()) for r in borrow)
            self.env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = os.pathsep.join(stores)

    def run(self, *args: str, input: bytes | None = None, index: Path | None = None,
            check: bool = True) -> subprocess.CompletedProcess[bytes]:
        env = self.env if index is None else {**self.env, "GIT_INDEX_FILE": str(index)}
        result = run_git(args, env, input=input)
        if check and result.returncode != 0:
            raise GitFailed(self.where, args, result)
        return result

    def out(self, *args: str, input: bytes | None = None, index: Path | None = None) -> str:
        return self.run(*args, input=input, index=index).stdout.decode(errors="replace").strip()

    def ok(self, *args: str, index: Path | None = None) -> bool:
        return self.run(*args, index=index, check=False).returncode == 0

    def pipe(self, producer: Sequence[str], consumer: Sequence[str]) -> str:
        """``git <producer> | git <consumer>`` through an OS pipe (no buffering in Python)."""
        import tempfile  # here: ~4 ms of start-up for `assemble deps`, which never pipes

        with tempfile.TemporaryFile() as errors:
            try:
                first = subprocess.Popen(["git", *producer], env=self.env, stdout=subprocess.PIPE, stderr=errors)
            except OSError as error:
                raise _spawn_failed(error) from None
            try:
                second = subprocess.run(["git", *consumer], env=self.env, stdin=first.stdout, capture_output=True,
                                        check=False)
            except BaseException:
                _stop(first)
                raise
            finally:
                assert first.stdout is not None
                first.stdout.close()
                first.wait()
            if first.returncode != 0:
                errors.seek(0)
                raise GitFailed(self.where, producer,
                                subprocess.CompletedProcess(producer, first.returncode, b"", errors.read()))
        if second.returncode != 0:
            raise GitFailed(self.where, consumer, second)
        return second.stdout.decode(errors="replace")

    # -- reads whose arguments are data ------------------------------------------------

    def rev(self, rev: str) -> str | None:
        """The commit ``rev`` names, or None when there is none."""
        result = self.run("rev-parse", "--verify", "--quiet", END_OF_OPTIONS, f"{rev}^{{commit}}", check=False)
        return result.stdout.decode().strip() or None if result.returncode == 0 else None

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self.ok("merge-base", "--is-ancestor", END_OF_OPTIONS, ancestor, descendant)

    def merge_base(self, *revs: str) -> str | None:
        result = self.run("merge-base", END_OF_OPTIONS, *revs, check=False)
        return result.stdout.decode().strip() or None if result.returncode == 0 else None

    def tree_of(self, rev: str) -> str:
        return self.out("rev-parse", "--verify", END_OF_OPTIONS, f"{rev}^{{tree}}")

    def commit_date(self, rev: str) -> str:
        """Committer date, strict ISO 8601."""
        return self.out("log", "-1", "--format=%cI", END_OF_OPTIONS, rev)


class WorkTree:
    """git commands inside a checkout (text output). ``fd``: a descriptor the children inherit
    (the rebase's running lock); ``hint``: what to tell the user when a command fails."""

    def __init__(self, path: Path, fd: int | None = None, hint: str | None = None) -> None:
        self.path = path
        self.git_dir = path / ".git"
        self.fd = fd
        self.hint = hint
        self.env = isolated_env()

    def run(self, *args: str, check: bool = True, env: Mapping[str, str] | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        result = run_git(args, {**self.env, **(env or {})}, cwd=self.path, input=input, text=True,
                         pass_fds=(self.fd,) if self.fd is not None else ())
        if check and result.returncode != 0:
            raise GitFailed(str(self.path), args, result, hint=self.hint)
        return result

    def out(self, *args: str) -> str:
        return self.run(*args).stdout.strip()

    def rev(self, rev: str) -> str | None:
        """The commit ``rev`` names, or None when there is none."""
        result = self.run("rev-parse", "--verify", "--quiet", END_OF_OPTIONS, f"{rev}^{{commit}}", check=False)
        return result.stdout.strip() or None if result.returncode == 0 else None

    def head(self) -> str:
        """The commit HEAD names (GitFailed when there is none)."""
        return self.out("rev-parse", "HEAD")

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self.run("merge-base", "--is-ancestor", END_OF_OPTIONS, ancestor, descendant,
                        check=False).returncode == 0

    def submodule_paths(self) -> list[str]:
        """The paths of the submodules HEAD's index records (gitlinks), initialised or not:
        what lies below them is another repository's."""
        listed = self.run("ls-files", "--stage", "-z").stdout
        return [entry.split("\t", 1)[1] for entry in listed.split("\0") if entry.startswith("160000 ")
                and "\t" in entry]

    def dirty(self) -> list[str]:
        """Paths with uncommitted edits, untracked files included (ignored files are not work)."""
        status = self.run("status", "--porcelain", "--untracked-files=normal").stdout
        return [line[3:] for line in status.splitlines() if line.strip()]

    def conflicted_files(self) -> list[str]:
        """The paths git left unmerged (a stopped ``am``, ``rebase`` or ``merge``); for messages,
        so a git that cannot tell gives none rather than an error over the error being said."""
        output = self.run("diff", "--name-only", "--diff-filter=U", check=False).stdout
        return [line for line in output.splitlines() if line]
