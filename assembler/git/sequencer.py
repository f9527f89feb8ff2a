"""git's sequencer in a checkout, as `assemble rebase` drives it: a ``git rebase -i`` of a todo
list we write, what git's session files say about where it stopped, and putting a checkout
back after a killed git. What git prints is read here, so the rebase itself never parses it."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from assembler.git.process import END_OF_OPTIONS, GitFailed, WorkTree
from assembler.git.reproducible import operation_in

# The replay must not depend on the user's git configuration or hooks: GIT_ENV leaves out the
# global and system files and hooks; these override what the checkout's own config could set.
SEQUENCER_CONFIG = (
    "-c", "rebase.missingCommitsCheck=ignore", "-c", "rebase.autoStash=false", "-c", "rebase.updateRefs=false",
    "-c", "rebase.autoSquash=false", "-c", "commit.gpgSign=false", "-c", "rerere.enabled=false",
    "-c", "rebase.abbreviateCommands=false",
)
# "dropping <sha> <subject> -- patch contents already upstream": git's note for --empty=drop
# (after a newline, or after the "\r" of a progress line)
DROPPING = re.compile(r"(?:^|\r)dropping ([0-9a-f]{40}) .* -- patch contents already upstream$", re.MULTILINE)


class Sequencer(WorkTree):
    """A checkout whose commits are replayed by ``git rebase -i`` (children hold ``fd``, the
    caller's running lock; ``hint`` says how to recover when git fails)."""

    def stopped(self) -> bool:
        """git is in the middle of a rebase (or another operation) here."""
        return operation_in(self.git_dir) is not None

    def clean_stop(self) -> bool:
        """The sequencer stopped on its own at a patch (as opposed to being killed mid-step)."""
        return (self.git_dir / "rebase-merge" / "stopped-sha").exists() and self.rev("REBASE_HEAD") is not None

    def replay(self, todo: Path, onto: str, base: str) -> set[str] | None:
        """``git rebase -i --onto ONTO BASE`` with ``todo`` as its todo list (full object names
        only: the caller's check). When it completed, the commits git dropped as empty (already
        upstream); None when it stopped cleanly at a patch (a conflict); GitFailed otherwise."""
        result = self.run(
            *SEQUENCER_CONFIG, "rebase", "--interactive", "--empty=drop", "--reapply-cherry-picks",
            "--committer-date-is-author-date", "--no-autosquash", "--onto", onto, END_OF_OPTIONS, base,
            check=False, env={"GIT_SEQUENCE_EDITOR": f"cp {shlex.quote(str(todo))}"},
        )
        if result.returncode == 0 and not self.stopped():
            return set(DROPPING.findall(result.stderr))
        if not self.clean_stop():
            raise GitFailed(str(self.path), ["rebase"], result, hint=self.hint)
        return None

    def reset_to(self, branch: str | None, head: str) -> None:
        """Drop any sequencer state and stale locks a killed git left, then put the branch,
        HEAD, index and tracked files back at ``head`` (untracked files are left alone)."""
        if self.stopped():
            self.run("rebase", "--quit", check=False)
            for name in ("rebase-merge", "rebase-apply"):
                shutil.rmtree(self.git_dir / name, ignore_errors=True)
        (self.git_dir / "REBASE_HEAD").unlink(missing_ok=True)  # `rebase --quit` leaves it
        for lock in [*self.git_dir.glob("*.lock"), *self.git_dir.glob("refs/**/*.lock")]:
            lock.unlink(missing_ok=True)
        if branch:
            self.run("checkout", "--quiet", "--force", "-B", branch, head, "--")
        else:
            self.run("checkout", "--quiet", "--force", "--detach", head, "--")
