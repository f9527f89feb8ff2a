"""A throwaway bare repository that borrows the objects of mirrors and checkouts.

Status detection, dry runs and horizon bisection need trial merges and applies. Doing them
here (through ``objects/info/alternates``) means they write only into a temporary directory:
neither the user's checkout nor the shared mirrors change, whatever the trial finds.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from assembler.errors import InputError
from assembler.git.runner import COMMITTER_ENV, GIT_ENV, git_error_line

# Trial commits are throwaway; a fixed identity keeps commit-tree working without user config.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "assemble", "GIT_AUTHOR_EMAIL": "assemble@localhost",
    "GIT_AUTHOR_DATE": "1000000000 +0000", "GIT_COMMITTER_DATE": "1000000000 +0000",
}
# Output formats that configuration could otherwise change under our parser (GIT_ENV leaves out
# the global and system files; these override a checkout's own config).
DIFF_CONFIG = ("-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false", "-c", "log.showSignature=false",
               "-c", "core.quotePath=false", "-c", "diff.relative=false")


def object_dir(repo_path: Path) -> Path:
    """The object store of a bare repository or of a checkout."""
    dot_git = repo_path / ".git"
    return (dot_git if dot_git.is_dir() else repo_path) / "objects"


class GitFailed(InputError):
    """A git command refused its input (an unknown revision, a damaged repository, a lock held
    by another git): exit code 2, with git's own first line. Conflicts are reported as such
    by the callers that expect them."""

    def __init__(self, where: str, args: Sequence[str], result: subprocess.CompletedProcess[bytes] | subprocess.CompletedProcess[str],
                 hint: str | None = None) -> None:
        reason = git_error_line(result.stderr, result.returncode) if result.stderr.strip() else f"exit status {result.returncode}"
        super().__init__(f"{where}: git {_subcommand(args)} failed: {reason}",
                         hint=hint or "check that the repository is readable and not damaged (git fsck), and that no other git holds its lock")
        self.result = result


def _subcommand(args: Sequence[str]) -> str:
    """The git command in ``args``, past ``-c key=value`` and other options."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] == "-c" else rest[1:]
    return rest[0] if rest else ""


class GitView:
    """git commands against one repository that also sees other object stores (through
    GIT_ALTERNATE_OBJECT_DIRECTORIES, so nothing is written to make them visible)."""

    def __init__(self, git_dir: Path, borrow: Sequence[Path] = ()) -> None:
        self.path = git_dir
        self.where = str(git_dir)  # for messages
        self.env = {**os.environ, **GIT_ENV, **COMMITTER_ENV, **_IDENTITY, "GIT_DIR": str(git_dir), "LC_ALL": "C"}
        for variable in ("GIT_INDEX_FILE", "GIT_WORK_TREE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES"):
            self.env.pop(variable, None)
        if borrow:
            stores = dict.fromkeys(str(object_dir(r).resolve()) for r in borrow)
            self.env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = os.pathsep.join(stores)

    def run(self, *args: str, input: bytes | None = None, index: Path | None = None,
            check: bool = True) -> subprocess.CompletedProcess[bytes]:
        env = self.env if index is None else {**self.env, "GIT_INDEX_FILE": str(index)}
        result = subprocess.run(["git", *args], input=input, env=env, capture_output=True, check=False)
        if check and result.returncode != 0:
            raise GitFailed(self.where, args, result)
        return result

    def out(self, *args: str, input: bytes | None = None, index: Path | None = None) -> str:
        return self.run(*args, input=input, index=index).stdout.decode(errors="replace").strip()

    def ok(self, *args: str, index: Path | None = None) -> bool:
        return self.run(*args, index=index, check=False).returncode == 0

    def pipe(self, producer: Sequence[str], consumer: Sequence[str]) -> str:
        """``git <producer> | git <consumer>`` through an OS pipe (no buffering in Python)."""
        with tempfile.TemporaryFile() as errors:
            first = subprocess.Popen(["git", *producer], env=self.env, stdout=subprocess.PIPE, stderr=errors)
            try:
                second = subprocess.run(["git", *consumer], env=self.env, stdin=first.stdout, capture_output=True, check=False)
            finally:
                assert first.stdout is not None
                first.stdout.close()
                first.wait()
            if first.returncode != 0:
                errors.seek(0)
                raise GitFailed(self.where, producer, subprocess.CompletedProcess(producer, first.returncode, b"", errors.read()))
        if second.returncode != 0:
            raise GitFailed(self.where, consumer, second)
        return second.stdout.decode(errors="replace")

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self.ok("merge-base", "--is-ancestor", ancestor, descendant)

    def tree_of(self, rev: str) -> str:
        return self.out("rev-parse", f"{rev}^{{tree}}")


class Scratch(GitView):
    """Context manager: a temporary bare repository whose alternates are ``repos``' object
    stores, for trials that write (commit-tree, merge-tree, apply into a temporary index)."""

    def __init__(self, repos: Sequence[Path]) -> None:
        self.repos = [Path(r) for r in repos]
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Scratch:
        self._tmp = tempfile.TemporaryDirectory(prefix="assemble-scratch-")
        path = Path(self._tmp.name) / "repo.git"
        for sub in ("objects/info", "refs/heads", "refs/tags"):
            (path / sub).mkdir(parents=True)
        (path / "HEAD").write_text("ref: refs/heads/main\n")
        (path / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = true\n[gc]\n\tauto = 0\n")
        stores = dict.fromkeys(str(object_dir(r).resolve()) for r in self.repos)
        (path / "objects" / "info" / "alternates").write_text("".join(f"{s}\n" for s in stores))
        super().__init__(path)
        self.where = f"trial repository over {', '.join(str(r) for r in self.repos)}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()

    @property
    def tmp(self) -> Path:
        return self.path.parent

    # -- trial operations ---------------------------------------------------------------

    def pick(self, tree: str, commit: str, parent: str) -> tuple[str | None, list[str]]:
        """Cherry-pick ``commit`` (whose parent is ``parent``) onto ``tree`` in memory, with the
        same ort merge (renames included) a real rebase uses: a stand-in commit for ``tree``
        whose parent is ``parent`` makes ``parent`` the merge base. Returns (result tree or
        None on conflict, conflicted paths)."""
        ours = self.out("commit-tree", tree, "-p", parent, "-m", "trial")
        result = self.run("merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", ours, commit, check=False)
        if result.returncode > 1:
            raise GitFailed(self.where, ["merge-tree", ours, commit], result)
        fields = [f.decode(errors="replace") for f in result.stdout.split(b"\0") if f]
        if result.returncode == 0:
            return fields[0], []
        return None, sorted(set(fields[1:]))

    def index_of(self, rev: str, name: str) -> Path:
        """A temporary index holding ``rev``'s tree, for ``git apply --cached`` trials."""
        index = self.tmp / f"{name}.index"
        index.unlink(missing_ok=True)
        self.run("read-tree", rev, index=index)
        return index

    def apply(self, patch: Path, index: Path, *args: str) -> bool:
        """``git apply --cached`` (atomic: on failure the index is unchanged)."""
        return self.run("apply", "--cached", *args, str(patch), index=index, check=False).returncode == 0

