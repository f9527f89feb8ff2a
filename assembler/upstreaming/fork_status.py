"""`assemble status`: per dependency, what `git status` and `quilt applied` would say of its
fork, and what evidence stands for it: the pin, the branch and its condition, uncommitted edits
(``M file``), commits not exported yet, patches already in the pin, a rebase in progress, and
the last check and build of this pin and series. Offline: reads the workspace, the checkouts and
the evidence records; it fetches nothing and classifies nothing (that is `assemble patches`).

While a ``git am`` or ``git rebase`` is stopped in the checkout (a checkout's conflict, an
`assemble rebase` at a conflict, the user's own ``git rebase -i``), the state file describes the
last checkout, not the branch: what was applied, where it stopped and what is left are read
from git's own session (``Stop``), so status never says "3 of 3 applied" at patch 0001."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from assembler.builder.evidence import BuildEvidence, build_evidence
from assembler.check.evidence import CheckEvidence, check_evidence
from assembler.git.condition import inspect
from assembler.git.history import commits_between, count_since
from assembler.git.process import WorkTree
from assembler.git.reproducible import is_full_sha
from assembler.git.state import CheckoutCondition, CheckoutState, CheckoutStatus, already_applied
from assembler.git.status import branch_and_head
from assembler.git.status import edits as working_edits
from assembler.manifest import Dependency
from assembler.upstreaming import journal as jr
from assembler.upstreaming.verdicts import Migration, migration_on_fork
from assembler.workspace import Workspace

# Conditions in which the checkout is assemble's and its branch can be read.
_READABLE = {CheckoutCondition.READY, CheckoutCondition.STALE, CheckoutCondition.DIRTY, CheckoutCondition.UNEXPORTED,
             CheckoutCondition.STOPPED, CheckoutCondition.ABORTED, CheckoutCondition.REBASING}


class Edit(NamedTuple):
    code: str  # git status --short's two letters, trimmed: "M", "A", "D", "??", "MM", "UU", ...
    path: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "path": self.path}


class Commit(NamedTuple):
    sha: str
    subject: str

    def to_json(self) -> dict[str, str]:
        return {"commit": self.sha, "subject": self.subject}


class Rebase(NamedTuple):
    phase: str  # upstreaming.journal.Phase
    onto: str
    onto_label: str
    stopped_at: str | None  # the patch that conflicted, when stopped
    conflicts: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {"phase": self.phase, "onto": self.onto, "onto_label": self.onto_label, "stopped_at": self.stopped_at,
                "conflicts": list(self.conflicts)}


class Stop(NamedTuple):
    """Where a ``git am`` or ``git rebase`` in the checkout stopped, from git's session files."""

    operation: str  # "am" or "rebase"
    onto: str | None  # the commit it applies onto (None where git does not say)
    applied: int  # commits it has made on ``onto`` so far: what is applied now
    step: int  # the patch (a rebase: the todo step) it stopped at, counted from 1, as git counts
    total: int  # patches (steps) the operation applies in all
    patch: str | None  # that patch's file in patches/<dep>/, where known
    commit: str | None  # the commit a rebase was replaying there, where git says
    subject: str

    @property
    def label(self) -> str:
        """The patch file, else the commit and its subject, else the subject."""
        if self.patch:
            return self.patch
        return " ".join(part for part in ((self.commit or "")[:12], self.subject) if part) or f"step {self.step}"

    def to_json(self) -> dict[str, object]:
        return {"operation": self.operation, "onto": self.onto, "applied": self.applied, "step": self.step,
                "total": self.total, "patch": self.patch, "commit": self.commit, "subject": self.subject}


class DepOverview(NamedTuple):
    name: str
    kind: str  # manifest.Dependency.kind: upstream, fork or fork-only
    pin: str
    track: str
    series: int  # patches in the series
    condition: CheckoutCondition
    branch: str | None  # checked out (None: detached HEAD or no checkout)
    head: str | None
    applied: int  # patches applied as commits now (while stopped: by the operation so far, Stop.applied)
    already_applied: tuple[str, ...]  # patches that made no commit: already in the pin
    edits: tuple[Edit, ...]
    unexported: tuple[Commit, ...]  # commits on the branch that are not in patches/ yet
    operation: str | None  # a git operation the checkout is stopped in (am, rebase, merge, cherry-pick)
    rebase: Rebase | None  # an `assemble rebase` in progress
    check: CheckEvidence | None
    build: BuildEvidence | None  # the last gated build of this pin + series + recipe (any workspace)
    stop: Stop | None = None  # the git am or rebase the checkout is stopped in

    @property
    def migrated_on_fork(self) -> Migration:
        """The rule `assemble patches` uses (verdicts.migration_on_fork), on the same evidence."""
        return migration_on_fork(self.build, self.check, None)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name, "kind": self.kind, "pin": self.pin, "track": self.track, "series": self.series,
            "checkout": self.condition, "branch": self.branch, "head": self.head, "applied": self.applied,
            "already_applied": list(self.already_applied), "edits": [edit.to_json() for edit in self.edits],
            "unexported": [commit.to_json() for commit in self.unexported], "operation": self.operation,
            "rebase": self.rebase.to_json() if self.rebase is not None else None,
            "check": self.check.to_json() if self.check is not None else None,
            "build": self.build.to_json() if self.build is not None else None,
            "migrated_on_fork": self.migrated_on_fork,
            "stopped": self.stop.to_json() if self.stop is not None else None,
        }


def overview(workspace: Workspace, dep: Dependency) -> DepOverview:
    """The status of one dependency (see the module docstring)."""
    condition = inspect(workspace, dep)
    path = workspace.fork_path(dep)
    state = CheckoutState.load(path) if condition in _READABLE or condition == CheckoutCondition.INTERRUPTED else None
    journal = jr.load(workspace, dep.name)
    branch = head = operation = stop = None
    edits: tuple[Edit, ...] = ()
    unexported: tuple[Commit, ...] = ()
    if state is not None and condition in _READABLE:
        tree = WorkTree(path, hint="move it away and run `assemble checkout` again")
        from assembler.git.reproducible import operation_in

        operation = operation_in(tree.git_dir)
        branch, head = branch_and_head(tree)
        edits = tuple(Edit(code, name) for code, name in working_edits(tree))
        names = {**state.applied, **({pick.commit: pick.name for pick in journal.picks} if journal is not None else {})}
        stop = stopped_in(tree, operation, names, dep.series if state.status == CheckoutStatus.STOPPED else ())
        # mid-operation, the commits since the base are the operation's (replays, the series so
        # far, upstream's under a rebase): what export will write is known when it ends
        unexported = () if stop is not None or journal is not None else _unexported(tree, state, head)
    rebase = None
    if journal is not None:
        stopped = journal.stopped
        rebase = Rebase(str(journal.phase), journal.onto, journal.onto_label,
                        journal.picks[stopped.index].name if stopped is not None and stopped.index < len(journal.picks)
                        else None,
                        tuple(stopped.files) if stopped is not None else ())
    ready = state is not None and state.status == CheckoutStatus.READY and state.base == dep.commit
    return DepOverview(
        name=dep.name, kind=dep.kind, pin=dep.commit, track=dep.track, series=len(dep.series),
        condition=condition, branch=branch, head=head,
        applied=stop.applied if stop is not None else len(state.applied) if state is not None else 0,
        # a stopped `git am` has made no record of what it skipped: only a finished checkout says
        already_applied=already_applied(dep, state) if state is not None and ready and stop is None else (),
        edits=edits, unexported=unexported, operation=operation, rebase=rebase,
        check=check_evidence(workspace, dep), build=build_evidence(dep), stop=stop,
    )


def stopped_in(tree: WorkTree, operation: str | None, names: dict[str, str],
               series: tuple[str, ...] | list[str]) -> Stop | None:
    """Where the ``git am`` or ``git rebase`` in ``tree`` stopped (None when neither is in
    progress), read from git's session directory: its step counter, the commit it applies onto
    and the commit it was replaying. ``names`` maps commits to patch files (the checkout's and
    a rebase journal's picks); ``series`` is the series when a stopped checkout's own ``git am``
    applies it (its N-th patch is the series' N-th)."""
    git_dir = tree.git_dir
    if operation not in ("am", "rebase"):
        return None
    merge = git_dir / "rebase-merge"
    session = merge if operation == "rebase" and merge.is_dir() else git_dir / "rebase-apply"
    if session == merge:
        step, total = _number(session / "msgnum"), _number(session / "end")
        onto, commit = _sha(session / "onto"), _sha(session / "stopped-sha")
        subject = _first_line(session / "message")
    else:
        step, total = _number(session / "next"), _number(session / "last")
        onto = _sha(session / "onto") if operation == "rebase" else _sha(git_dir / "ORIG_HEAD")
        commit = _sha(session / "original-commit")
        info = _lines(session / "info")  # the patch am is at, as mailinfo parsed it
        subject = next((line.removeprefix("Subject: ") for line in info if line.startswith("Subject: ")), "")
    if step is None or total is None:  # a session git has not finished setting up (or a foreign one)
        return None
    patch = names.get(commit or "")
    if patch is None and operation == "am" and len(series) == total and 0 < step <= total:
        patch = series[step - 1]
    applied = max(step - 1, 0)
    if onto is not None and (counted := count_since(tree, onto)) is not None:
        applied = counted
    return Stop(operation, onto, applied, step, total, patch, commit, subject)


def _lines(path: Path) -> list[str]:
    """A session file's lines; none when it is absent or unreadable (git may be writing it)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _first_line(path: Path) -> str:
    return next(iter(_lines(path)), "").strip()


def _number(path: Path) -> int | None:
    text = _first_line(path)
    return int(text) if text.isdigit() and len(text) < 10 else None


def _sha(path: Path) -> str | None:
    """A full commit name from a session file; anything else (empty, damaged) is no answer,
    since it goes to git as a revision."""
    text = _first_line(path)
    return text if is_full_sha(text) else None


def _unexported(tree: WorkTree, state: CheckoutState, head: str | None) -> tuple[Commit, ...]:
    """Commits since the base that no patch file made: what `assemble export` would write."""
    if head is None or head == state.head:
        return ()
    # a failure (a damaged fork, a base it lacks) is reported: silence would claim "nothing to export"
    return tuple(Commit(sha, text) for sha, text in commits_between(tree, head, state.base) if sha not in state.applied)


def workspace_overview(workspace: Workspace, deps: list[Dependency]) -> list[DepOverview]:
    return [overview(workspace, dep) for dep in deps]
