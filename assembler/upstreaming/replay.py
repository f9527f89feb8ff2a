"""Trial replay of a series onto a commit, in memory: what a rebase there would do to each
patch, without a worktree. Each patch is cherry-picked with ``git merge-tree`` (the ort merge
``git rebase`` uses, renames included), so a trial and the real rebase agree."""

from __future__ import annotations

from dataclasses import dataclass, field

from assembler.git.scratch import Scratch
from assembler.upstreaming.patchset import Patch, load_diffs

APPLIES = "applies"  # cherry-picks cleanly and changes the tree
EMPTY = "empty"  # cherry-picks cleanly to no change: the change is already there
REVERSE = "reverse"  # conflicts, but reverse-applies: the change is already there
CONFLICT = "conflict"
DROPPED = "dropped"  # not replayed: already known to be upstream
UNTRIED = "untried"  # no commit to replay (an earlier patch did not apply on its own base)


@dataclass
class Trial:
    onto: str
    outcomes: list[str]
    conflicts: dict[int, list[str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return CONFLICT not in self.outcomes

    def conflicting(self) -> list[int]:
        return [i for i, outcome in enumerate(self.outcomes) if outcome == CONFLICT]


def trial(scratch: Scratch, patches: list[Patch], onto: str, dropped: set[int] | frozenset[int] = frozenset(),
          upto: int | None = None) -> Trial:
    """Replay ``patches`` (those in ``dropped`` skipped, stopping after index ``upto``) onto
    ``onto``. A conflicting patch is left out, as ``git rebase --skip`` would, and the rest go
    on; conflicts are then checked for "reverse-applies" on ``onto`` (a squash merge), newest
    patch first and cumulatively, so two patches squashed into one upstream commit are found."""
    last = len(patches) - 1 if upto is None else upto
    tree = scratch.tree_of(onto)
    outcomes: list[str] = []
    conflicts: dict[int, list[str]] = {}
    for i, patch in enumerate(patches[: last + 1]):
        if i in dropped:
            outcomes.append(DROPPED)
        elif patch.commit is None or patch.parent is None:
            outcomes.append(UNTRIED)
        else:
            result, files = scratch.pick(tree, patch.commit, patch.parent)
            if result is None:
                outcomes.append(CONFLICT)
                conflicts[i] = files
            elif result == tree:
                outcomes.append(EMPTY)
            else:
                outcomes.append(APPLIES)
                tree = result
    found = Trial(onto, outcomes, conflicts)
    if not found.clean:
        for i in reverse_applies(scratch, patches[: last + 1], onto,
                                 skip={i for i, o in enumerate(outcomes) if o == APPLIES}):
            if outcomes[i] == CONFLICT:
                outcomes[i] = REVERSE
                del conflicts[i]
    return found


def reverse_applies(scratch: Scratch, patches: list[Patch], onto: str,
                    skip: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """Indexes of the patches whose change ``onto`` already holds: each is reverse-applied
    (``git apply -R --cached``, exact context) onto ``onto``'s tree with every later one
    that reverse-applied already taken out."""
    load_diffs(scratch, patches)
    index = scratch.index_of(onto, "reverse")
    present = []
    for i in range(len(patches) - 1, -1, -1):
        if i not in skip and patches[i].diff and scratch.apply(patches[i].patch_file(scratch), index, "-R"):
            present.append(i)
    return sorted(present)
