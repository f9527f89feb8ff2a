"""git's sequencer in a checkout, as `assemble rebase` drives it: a ``git rebase -i`` of a todo
list we write, what git's session files say about where it stopped, and putting a checkout
back after a killed git. What git prints is read here, so the rebase itself never parses it."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from typing import NamedTuple

from assembler.git.process import DIFF_CONFIG, END_OF_OPTIONS, GitFailed, WorkTree
from assembler.git.reproducible import is_full_sha, operation_in

# The replay must not depend on the user's git configuration or hooks: GIT_ENV leaves out the
# global and system files and hooks; these override what the checkout's own config could set.
SEQUENCER_CONFIG = (
    "-c", "rebase.missingCommitsCheck=ignore", "-c", "rebase.autoStash=false", "-c", "rebase.updateRefs=false",
    "-c", "rebase.autoSquash=false", "-c", "commit.gpgSign=false", "-c", "rerere.enabled=false",
    "-c", "rebase.abbreviateCommands=false",
)
# "dropping <sha> <subject> -- patch contents already upstream": git's note for --empty=drop
# (after a newline, or after the "\r" of a progress line)
# "1:  0123abc = 1:  4567def Subject", "-:  ------- > 2:  89abcde Subject"
_RANGE_LINE = re.compile(r"^\s*(\d+|-):\s+([0-9a-f]+|-+) ([=!<>]) \s*(\d+|-):\s+([0-9a-f]+|-+) (.*)$")
DROPPING = re.compile(r"(?:^|\r)dropping ([0-9a-f]{40}) .* -- patch contents already upstream$", re.MULTILINE)


class RangeLine(NamedTuple):
    """One line of ``git range-diff``'s summary: ``=`` same patch, ``!`` changed (``hunks``
    hunks of the diff between the two patches), ``<`` dropped, ``>`` added."""

    mark: str
    old: str | None  # abbreviated SHA before; None for an added commit
    new: str | None  # abbreviated SHA after; None for a dropped one
    subject: str
    hunks: int


def range_diff_lines(text: str) -> list[RangeLine]:
    """The summary lines of ``git range-diff`` output (Sequencer.range_diff), each with the
    number of hunks git shows for a changed patch."""
    lines: list[RangeLine] = []
    for line in text.splitlines():
        match = _RANGE_LINE.match(line)
        if match:
            _, old, mark, _, new, subject = match.groups()
            lines.append(RangeLine(mark, None if old.startswith("-") else old, None if new.startswith("-") else new,
                                   subject, 0))
        elif lines and lines[-1].mark == "!" and line.lstrip().startswith("@@"):
            lines[-1] = lines[-1]._replace(hunks=lines[-1].hunks + 1)
    return lines


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

    def unstaged(self) -> list[str]:
        """Paths with changes not added to the index (a resolution the user has not staged)."""
        return [name for name in self.out("diff", "--name-only").splitlines() if name]

    def resolved_tree(self) -> str | None:
        """The tree the index holds when it differs from HEAD's (what the user resolved at a
        stop), else None (the stop's change resolved to nothing)."""
        tree = self.out("write-tree")
        return None if tree == self.out("rev-parse", "HEAD^{tree}") else tree

    def range_diff(self, old_base: str, old_head: str, new_base: str, new_head: str) -> str:
        """``git range-diff`` of a series before (old_base..old_head) and after (new_base..new_head);
        empty when git cannot compare them. Full SHAs only (never read as options)."""
        assert all(is_full_sha(rev) for rev in (old_base, old_head, new_base, new_head))
        result = self.run(*DIFF_CONFIG, "range-diff", "--no-color", "--creation-factor=100", f"{old_base}..{old_head}",
                          f"{new_base}..{new_head}", check=False)
        return result.stdout if result.returncode == 0 else ""
