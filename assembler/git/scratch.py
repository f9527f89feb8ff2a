"""A throwaway bare repository that borrows the objects of mirrors and checkouts.

Status detection, dry runs and horizon bisection need trial merges and applies. Doing them
here (through ``objects/info/alternates``) means they write only into a temporary directory:
neither the user's checkout nor the shared mirrors change, whatever the trial finds.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from assembler.git.process import END_OF_OPTIONS, GitFailed, GitView, object_dir

# The latest committer date git accepts (2099-12-31T23:59:59Z). Every commit a scratch makes
# (a trial pick's stand-in, a series patch) carries it: git's merge-base walk goes newest commit
# first, so a stand-in dated before the commits it is merged with (IDENTITY_ENV's 2001) is reached
# only after every newer commit below them, the series so far and the whole upstream history:
# one walk per patch made `patches` quadratic (#29 item 14). Dated last, it meets its parent at once.
# No scratch commit ever leaves the scratch, so the date is never seen.
LATEST_DATE = "4102444799 +0000"


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
        self.env["GIT_COMMITTER_DATE"] = LATEST_DATE  # see LATEST_DATE: one step of merge-base per trial pick
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
        result = self.run("merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", END_OF_OPTIONS, ours,
                          commit,
                          check=False)
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
        self.run("read-tree", END_OF_OPTIONS, rev, index=index)
        return index

    def apply(self, patch: Path, index: Path, *args: str) -> bool:
        """``git apply --cached`` (atomic: on failure the index is unchanged)."""
        return self.run("apply", "--cached", *args, "--", str(patch), index=index, check=False).returncode == 0

    def commit_index(self, index: Path, parent: str, message: str) -> str:
        """A commit of what ``index`` holds on ``parent`` (a series patch given a commit)."""
        tree = self.out("write-tree", index=index)
        return self.out("commit-tree", tree, "-p", parent, "-m", message)
