"""How far can the series move along upstream right now, and which upstream commit breaks
each patch? Both are answered by bisection over the tracked branch's first-parent history
(one commit per merged pull request), each probe a trial replay: about log2(N) probes.

Bisection assumes a patch, once broken (or landed) upstream, stays so, which holds for the
usual history; where it does not, the answer is still a transition point, found quickly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from assembler.git.history import first_parent_line
from assembler.git.scratch import Scratch
from assembler.upstreaming.patchset import Patch
from assembler.upstreaming.replay import CONFLICT, Trial, trial
from assembler.upstreaming.verdicts import Commit


@dataclass
class Break:
    patch: str
    commit: Commit
    files: list[str]


@dataclass
class Horizon:
    commit: Commit  # newest first-parent commit onto which the whole series applies
    position: int  # first-parent commits after the base (0: cannot move at all)
    total: int  # first-parent commits between the base and the target
    breaks: list[Break]

    def to_json(self) -> dict[str, object]:
        return {
            "commit": self.commit.sha, "subject": self.commit.subject, "position": self.position, "total": self.total,
            "breaks": [{"patch": b.patch, "commit": b.commit.sha, "subject": b.commit.subject, "files": b.files}
                       for b in self.breaks],
        }


def first_parent_chain(scratch: Scratch, since: str, tip: str) -> list[Commit]:
    """``tip``'s first-parent history after ``since``, oldest first."""
    return [Commit(sha, subject) for sha, subject in first_parent_line(scratch, since, tip)]


def first_true(count: int, predicate: Callable[[int], bool]) -> int:
    """Smallest i in [0, count) with predicate(i), given predicate(count - 1) is true and the
    predicate flips once from false to true."""
    lo, hi = -1, count - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if predicate(mid):
            hi = mid
        else:
            lo = mid
    return hi


class ChainProbe:
    """Trial replays at positions of one first-parent chain, with patches already known to be
    upstream (Applied-Upstream, patch-id) dropped only where their upstream commit has landed."""

    def __init__(self, scratch: Scratch, patches: list[Patch], base: Commit, chain: list[Commit],
                 landed_by: dict[int, str]) -> None:
        self.scratch = scratch
        self.patches = patches
        self.base = base
        self.chain = chain
        self.landed = {i: self._position_of(sha) for i, sha in landed_by.items()}
        self._trials: dict[tuple[int, int | None], Trial] = {}

    def _position_of(self, sha: str) -> int:
        """First chain position whose commit contains ``sha``."""
        for position, commit in enumerate(self.chain):
            if commit.sha == sha:
                return position
        if not self.chain or not self.scratch.is_ancestor(sha, self.chain[-1].sha):
            return len(self.chain)
        return first_true(len(self.chain), lambda m: self.scratch.is_ancestor(sha, self.chain[m].sha))

    def at(self, position: int, upto: int | None = None) -> Trial:
        if (position, upto) not in self._trials:
            commit = self.base if position < 0 else self.chain[position]
            dropped = {i for i, landed in self.landed.items() if landed <= position}
            self._trials[position, upto] = trial(self.scratch, self.patches, commit.sha, dropped, upto)
        return self._trials[position, upto]

    def horizon(self, at_tip: Trial) -> Horizon:
        """The horizon, given the trial at the chain's last commit (``at_tip``)."""
        total = len(self.chain)
        if at_tip.clean:
            return Horizon(self.chain[-1] if total else self.base, total, total, [])
        clean_until = first_true(total, lambda m: not self.at(m).clean) - 1
        horizon_commit = self.base if clean_until < 0 else self.chain[clean_until]
        breaks = []
        for k in at_tip.conflicting():
            first = first_true(total, functools.partial(self._broken_at, clean_until, k))
            files = self.at(first, upto=k).conflicts.get(k, at_tip.conflicts.get(k, []))
            breaks.append(Break(self.patches[k].name, self.chain[first], files))
        return Horizon(horizon_commit, clean_until + 1, total, breaks)

    def _broken_at(self, clean_until: int, k: int, m: int) -> bool:
        """Patch ``k`` conflicts at chain position ``m`` (past the last clean position)."""
        return m > clean_until and self.at(m, upto=k).outcomes[k] == CONFLICT

    def introduced(self, present: Callable[[int], bool]) -> Commit | None:
        """The first chain commit at which ``present(position)`` holds: the upstream commit
        that carries a change found by "applies empty" or "reverse-applies"."""
        if not self.chain or not present(len(self.chain) - 1):
            return None
        return self.chain[first_true(len(self.chain), present)]
