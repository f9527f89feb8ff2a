"""`assemble status`: per dependency, what `git status` and `quilt applied` would say of its
fork, and what evidence stands for it: the pin, the branch and its condition, uncommitted edits
(``M file``), commits not exported yet, patches already in the pin, a rebase in progress, and
the last check and build of this pin and series. Offline: reads the workspace, the checkouts and
the evidence records; it fetches nothing and classifies nothing (that is `assemble patches`)."""

from __future__ import annotations

from typing import NamedTuple

from assembler.builder.evidence import BuildEvidence, build_evidence
from assembler.check.evidence import CheckEvidence, check_evidence
from assembler.git.condition import inspect
from assembler.git.process import END_OF_OPTIONS, WorkTree
from assembler.git.state import CheckoutCondition, CheckoutState, already_applied
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


class DepOverview(NamedTuple):
    name: str
    kind: str  # manifest.Dependency.kind: upstream, fork or fork-only
    pin: str
    track: str
    series: int  # patches in the series
    condition: CheckoutCondition
    branch: str | None  # checked out (None: detached HEAD or no checkout)
    head: str | None
    applied: int  # patches applied as commits
    already_applied: tuple[str, ...]  # patches that made no commit: already in the pin
    edits: tuple[Edit, ...]
    unexported: tuple[Commit, ...]  # commits on the branch that are not in patches/ yet
    operation: str | None  # a git operation the checkout is stopped in (am, rebase, merge, cherry-pick)
    rebase: Rebase | None  # an `assemble rebase` in progress
    check: CheckEvidence | None
    build: BuildEvidence | None  # the last gated build of this pin + series + recipe (any workspace)

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
        }


def overview(workspace: Workspace, dep: Dependency) -> DepOverview:
    """The status of one dependency (see the module docstring)."""
    condition = inspect(workspace, dep)
    path = workspace.fork_path(dep)
    state = CheckoutState.load(path) if condition in _READABLE or condition == CheckoutCondition.INTERRUPTED else None
    branch = head = operation = None
    edits: tuple[Edit, ...] = ()
    unexported: tuple[Commit, ...] = ()
    if state is not None and condition in _READABLE:
        tree = WorkTree(path, hint="move it away and run `assemble checkout` again")
        from assembler.git.runner import operation_in

        operation = operation_in(tree.git_dir)
        branch, head = _branch_and_head(tree)
        edits = _edits(tree)
        unexported = _unexported(tree, state, head)
    journal = jr.load(workspace, dep.name)
    rebase = None
    if journal is not None:
        stopped = journal.stopped
        rebase = Rebase(str(journal.phase), journal.onto, journal.onto_label,
                        journal.picks[stopped.index].name if stopped is not None and stopped.index < len(journal.picks) else None,
                        tuple(stopped.files) if stopped is not None else ())
    return DepOverview(
        name=dep.name, kind=dep.kind, pin=dep.commit, track=dep.track, series=len(dep.series),
        condition=condition, branch=branch, head=head, applied=len(state.applied) if state is not None else 0,
        already_applied=already_applied(dep, state) if state is not None and state.base == dep.commit else (),
        edits=edits, unexported=unexported, operation=operation, rebase=rebase,
        check=check_evidence(workspace, dep), build=build_evidence(dep),
    )


def _branch_and_head(tree: WorkTree) -> tuple[str | None, str | None]:
    lines = tree.run("status", "--porcelain=v2", "--branch", "--untracked-files=no").stdout.splitlines()
    head = next((line.split()[2] for line in lines if line.startswith("# branch.oid ")), None)
    branch = next((line.split(" ", 2)[2] for line in lines if line.startswith("# branch.head ")), None)
    return (None if branch == "(detached)" else branch), (None if head == "(initial)" else head)


def _edits(tree: WorkTree) -> tuple[Edit, ...]:
    """Uncommitted edits as `git status --short` shows them (untracked files included)."""
    output = tree.run("status", "--porcelain=v1", "-z", "--untracked-files=normal").stdout
    edits = []
    entries = iter(output.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        code, name = entry[:2], entry[3:]
        if code[0] in "RC":  # a rename or copy: the next entry is the old name
            next(entries, None)
        edits.append(Edit(code.strip(), name))
    return tuple(edits)


def _unexported(tree: WorkTree, state: CheckoutState, head: str | None) -> tuple[Commit, ...]:
    """Commits since the base that no patch file made: what `assemble export` would write."""
    if head is None or head == state.head:
        return ()
    listed = tree.run("log", "--reverse", "--format=%H%x00%s", END_OF_OPTIONS, head, f"^{state.base}", check=False).stdout
    commits = [Commit(*line.split("\0", 1)) for line in listed.splitlines() if "\0" in line]
    return tuple(commit for commit in commits if commit.sha not in state.applied)


def workspace_overview(workspace: Workspace, deps: list[Dependency]) -> list[DepOverview]:
    return [overview(workspace, dep) for dep in deps]
