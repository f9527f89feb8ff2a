"""`assemble rebase`: move a dependency's series onto a newer upstream without losing work.

The replay itself is ``git rebase -i`` in forks/<dep> with a todo list we write: the same ort
three-way merges (renames included) and the same speed as plain git. Around it:

- patches already upstream by Applied-Upstream or patch-id are left out of the todo; those
  that apply empty are dropped by ``--empty=drop``; on a conflict, patches that
  reverse-apply on the target (squash merges) are dropped and the replay restarts;
- a journal with backups is written before anything changes (journal.py). Replays are
  deterministic (fixed committer, committer date = author date), so ``--continue`` after a
  crash simply replays the plan again; a conflict resolution is first turned into a commit
  and put in the plan in place of the patch it resolves, so it survives a crash too;
- on success the series is exported with low churn and deps.toml updated through tomlkit;
  ``--abort`` puts back only what the rebase itself changed (see journal.py).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from assembler.errors import ConflictError, InputError, WouldLoseWorkError
from assembler.git import history, mirrors
from assembler.git.checkout import checkout, refuse_to_lose_work
from assembler.git.commits import commit_like
from assembler.git.process import GitView, WorkTree, object_id
from assembler.git.scratch import Scratch
from assembler.git.sequencer import Sequencer, range_diff_lines
from assembler.git.state import CheckoutState, CheckoutStatus, already_applied, pinned_state, read_head
from assembler.manifest import Dependency
from assembler.manifest.edit import update_dependency
from assembler.series.headers import PatchStatus, forwarded_status, parse_patch_header
from assembler.series.seriesfile import find_patch
from assembler.upstreaming import journal as jr
from assembler.upstreaming.evidence_layers import classify, find_carriers, in_pull_requests, known_upstream
from assembler.upstreaming.floors import floor_warnings
from assembler.upstreaming.horizon import ChainProbe, Horizon, first_parent_chain
from assembler.upstreaming.journal import Dropped, Journal, Phase, Pick, Stopped
from assembler.upstreaming.patches_report import resolve, source_mirror, tracked_tip
from assembler.upstreaming.patchset import Patch, by_sha, checkout_in_sync, from_commits, from_series, series_as_commits
from assembler.upstreaming.replay import APPLIES, CONFLICT, EMPTY, reverse_applies
from assembler.upstreaming.verdicts import LANDED, Commit, Evidence, pull_request_link
from assembler.workspace import Workspace, locked

# Checkout files the rebase changes and --abort / --undo put back (ORIG_HEAD: git's own
# "before" pointer, which the replay moves).
CHECKOUT_FILES = {"state": Path(".git/assemble-state.json"), "alternates": Path(".git/objects/info/alternates"),
                  "orig_head": Path(".git/ORIG_HEAD")}


class RebaseStatus(StrEnum):
    """How `assemble rebase` ended."""

    DONE = "done"
    STOPPED = "stopped"  # at a conflict: resolve, then --continue (or --abort)
    UP_TO_DATE = "up-to-date"
    DRY_RUN = "dry-run"
    ABORTED = "aborted"
    UNDONE = "undone"  # --undo put back the state before the last finished rebase


@dataclass
class RangeEntry:
    """One line of ``git range-diff``'s summary: ``=`` same patch, ``!`` changed (``hunks``
    hunks of the diff between the two patches), ``<`` dropped, ``>`` added."""

    mark: str
    old: str | None  # patch name (or short SHA) before the rebase
    new: str | None  # short SHA after it
    subject: str
    hunks: int = 0


def parse_range_diff(text: str, names: dict[str, str]) -> list[RangeEntry]:
    """The summary of ``git range-diff`` output (git.sequencer.range_diff_lines reads it);
    ``names``: old commit -> patch name."""
    entries = []
    for line in range_diff_lines(text):
        name = next((n for sha, n in names.items() if sha.startswith(line.old)), line.old) if line.old else None
        entries.append(RangeEntry(line.mark, name, line.new, line.subject, line.hunks))
    return entries


@dataclass
class Conflict:
    name: str
    subject: str
    files: list[str]


@dataclass
class RebaseReport:
    dep: str
    status: RebaseStatus
    url: str
    onto_label: str
    old_base: str
    new_base: str
    crossed: int = 0
    applied: list[str] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    horizon: Horizon | None = None
    export: dict[str, list[str]] | None = None
    manifest: dict[str, str | None] = field(default_factory=dict)
    checkout: Path | None = None
    next: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    range_diff: list[RangeEntry] = field(default_factory=list)
    forwarded: dict[str, str] = field(default_factory=dict)  # patch -> pull request: Forwarded: trailer written

    def to_json(self) -> dict[str, object]:
        return {
            "dep": self.dep, "status": self.status, "url": self.url, "onto": self.onto_label,
            "old_base": self.old_base, "new_base": self.new_base, "upstream_commits_crossed": self.crossed,
            "applied": self.applied, "dropped": [d.to_json() for d in self.dropped],
            "conflicts": [{"file": c.name, "subject": c.subject, "files": c.files} for c in self.conflicts],
            "horizon": self.horizon.to_json() if self.horizon else None,
            "patches": self.export, "manifest": self.manifest,
            "checkout": str(self.checkout) if self.checkout else None, "next": self.next, "warnings": self.warnings,
            "range_diff": [vars(e) for e in self.range_diff], "forwarded": self.forwarded,
        }


class _Fork(Sequencer):
    """git in forks/<dep>, children holding the journal's running lock (see journal.running)."""

    def __init__(self, path: Path, fd: int | None) -> None:
        super().__init__(path, fd, hint=f"`assemble rebase --abort {path.name}` restores the state before the rebase")


# -- planning ------------------------------------------------------------------------------

@dataclass
class _Target:
    url: str
    mirror: mirrors.Mirror
    source: mirrors.Mirror
    tip: str
    onto: str
    label: str


def _target(workspace: Workspace, dep: Dependency, onto_ref: str | None, upstream: str | None) -> _Target:
    """Fetch the followed repository; resolve the tracked tip and the requested REF."""
    url = upstream or dep.upstream_url
    mirror, tip = tracked_tip(workspace.manifest, url, dep.track, offline=False)
    onto, label = tip, dep.track
    if onto_ref not in (None, "horizon", dep.track):
        assert onto_ref is not None
        found = resolve(mirror, onto_ref)
        if found is None:
            _, found = tracked_tip(workspace.manifest, url, onto_ref, offline=False)
        onto, label = found, onto_ref
    source = mirror if dep.source == url else source_mirror(workspace.manifest, dep, offline=False)
    return _Target(url, mirror, source, tip, onto, label)


def _manifest_values(dep: Dependency, url: str, onto: str, switched: bool) -> dict[str, str | None]:
    """What deps.toml gets: the new commit; the commit now lives in ``url``, so ``source``
    goes (it defaults to upstream) unless ``url`` already is the source; ``--upstream``
    makes ``url`` the upstream."""
    values: dict[str, str | None] = {"commit": onto}
    if switched:
        values["upstream"] = url
    if url != dep.source or switched:
        values["source"] = None
    return values


def _former_source(dep: Dependency, target: _Target, switched: bool) -> str | None:
    """The fork a rebase moves the dependency off (its ``source`` goes), else None."""
    return (dep.source
            if dep.is_fork and _manifest_values(dep, target.url, target.onto, switched).get("source", "") is None
            else None)


def _with_trailers(fork_path: Path, view: GitView, patches: list[Patch], series: dict[str, str],
                   wanted: dict[str, list[str]]) -> list[Patch]:
    """Patches whose commits (keys of ``wanted``) get trailers before the replay: the same tree
    and parent (so the same change and patch-id), author, date and message plus the trailers
    (``Forwarded:`` replaces the one there, others are added); names in reports stay."""
    tree = WorkTree(fork_path)
    renamed: dict[str, str] = {}
    by_commit: dict[str, str] = {}
    for patch in patches:
        if patch.commit in wanted and patch.parent:
            new = commit_like(tree, view.tree_of(patch.commit), patch.parent, patch.commit,
                              trailers=wanted[patch.commit])
            renamed[new], by_commit[patch.commit] = patch.name, new
    if not renamed:
        return patches
    return by_sha(view, [by_commit.get(p.commit or "", p.commit or "") for p in patches], names={**series, **renamed})


def _origin_trailers(patches: list[Patch], series: dict[str, str], fork_url: str) -> dict[str, list[str]]:
    """The fork's own commits (not from the series) become patches when the dependency moves
    off the fork: each gets ``Origin: <fork URL> commit <sha>``."""
    return {p.commit: [f"Origin: {fork_url} commit {p.commit}"] for p in patches if p.commit and p.commit not in series}


def _forwarded_trailers(target: _Target, view: GitView, patches: list[Patch],
                        fork_point: str) -> dict[str, tuple[str, str]]:
    """Patches whose Forwarded says local (``no`` or none) but whose patch-id is in one of
    upstream's pull requests: commit -> (the Forwarded value to write, "pull/N")."""
    local = [i for i, p in enumerate(patches) if forwarded_status(p.header)[0] == PatchStatus.LOCAL and p.commit]
    found = in_pull_requests(target.mirror.path, view, patches, local, target.onto) if local else {}
    return {patches[i].commit or "": (pull_request_link(target.url, n) or f"{target.url} pull/{n}", f"pull/{n}")
            for i, n in found.items()}


def _ready_checkout(workspace: Workspace, dep: Dependency) -> CheckoutState:
    """forks/<dep> at the pinned commit with the series, clean and fully exported."""
    path = workspace.fork_path(dep)
    state = pinned_state(path, dep)
    if state is None:
        checkout(workspace, dep)
        state = CheckoutState.load(path)
        assert state is not None
    refuse_to_lose_work(dep, path, state)
    return state


def _dry_patches(workspace: Workspace, dep: Dependency, scratch: Scratch, fork_point: str) -> list[Patch]:
    """What a rebase would replay, without touching forks/<dep>: the checkout's commits when
    it is in sync, else the fork's own commits plus the series built in the scratch."""
    state = checkout_in_sync(workspace, dep)
    if state is not None and state.head:
        return from_commits(scratch, state.head, [fork_point], names=state.applied)
    own = from_commits(scratch, dep.commit, [fork_point]) if fork_point != dep.commit else []
    series = from_series(dep)
    broken = series_as_commits(scratch, series, dep.commit)
    if broken:
        raise ConflictError(f"{dep.name}: patch {broken} does not apply on the pinned commit {dep.commit[:12]}",
                            hint=f"run `assemble checkout {dep.name}` and fix it first")
    return own + series


def _fork_point(scratch: GitView, dep: Dependency, target: _Target) -> tuple[str, int]:
    """Where the pinned commit meets the target (commits after it are replayed), and how many
    upstream commits the move crosses: one walk when one contains the other (the usual case)."""
    own, crossed = history.left_right_counts(scratch, dep.commit, target.onto)
    if own == 0:
        return dep.commit, crossed
    if crossed == 0:
        return target.onto, 0
    found = scratch.merge_base(dep.commit, target.onto)
    if found is None:
        raise InputError(f"{dep.name}: {dep.commit[:12]} shares no history with {target.url} {target.label}",
                         hint="check --upstream / --onto (a repository switch needs a fork of the same project)")
    return found, crossed


def _behind_base(dep: Dependency, target: _Target, fork_point: str, explicit: bool) -> bool:
    """True when the target holds nothing the pinned commit lacks (it is an ancestor of it:
    e.g. a fork ahead of an upstream that has not moved). An explicit older REF is an error."""
    if fork_point != target.onto or target.onto == dep.commit:
        return False
    if explicit:
        raise InputError(f"{dep.name}: {target.label} ({target.onto[:12]}) is older than the pinned commit "
                         f"{dep.commit[:12]}",
                         hint="rebase moves forward only; pick a newer --onto")
    return True


def _horizon(scratch: Scratch, patches: list[Patch], since: str, target: str, landed: dict[int, str]) -> Horizon:
    probe = ChainProbe(scratch, patches, Commit(since, history.subject(scratch, since)),
                       first_parent_chain(scratch, since, target), landed)
    return probe.horizon(probe.at(len(probe.chain) - 1))


@locked
def start(workspace: Workspace, dep: Dependency, onto_ref: str | None = None, upstream: str | None = None,
          dry_run: bool = False, on_step: Callable[[str], None] = lambda _: None) -> RebaseReport:
    if jr.load(workspace, dep.name) is not None:
        raise ConflictError(f"a rebase of {dep.name} is already in progress",
                            hint=f"`assemble rebase --continue {dep.name}` or `assemble rebase --abort {dep.name}`")
    on_step("fetch")
    with ThreadPoolExecutor(max_workers=1) as pool:
        # The fetch waits on git and the network; the checkout's checks need only the checkout.
        fetching = pool.submit(_target, workspace, dep, onto_ref, upstream)
        state = None if dry_run else _ready_checkout(workspace, dep)
        target = fetching.result()
    switched = upstream is not None and upstream != dep.upstream_url
    fork_path = workspace.fork_path(dep)
    repos = [target.mirror.path, target.source.path] + ([fork_path] if fork_path.is_dir() else [])
    # Trials (dry run, horizon) write, so they get a scratch repository; a plain rebase only
    # reads, straight from the checkout (which sees the followed repository without a copy).
    trials = dry_run or onto_ref == "horizon"
    view = Scratch(repos) if trials else nullcontext(GitView(fork_path / ".git", [target.mirror.path]))
    former: str | None = None
    detected: dict[str, str] = {}  # patch -> the pull request found for it (a Forwarded: trailer is written)
    with view as scratch:
        on_step("status")
        fork_point, crossed = _fork_point(scratch, dep, target)
        if _behind_base(dep, target, fork_point, explicit=onto_ref not in (None, "horizon", dep.track)):
            return RebaseReport(dep.name, RebaseStatus.UP_TO_DATE, target.url, target.label, dep.commit, dep.commit,
                                checkout=fork_path)
        if state is not None and state.head:
            patches = from_commits(scratch, state.head, [fork_point], names=state.applied)
            former = _former_source(dep, target, switched)
            wanted = _origin_trailers(patches, state.applied, former) if former is not None else {}
            forwarded = _forwarded_trailers(target, scratch, patches, fork_point)
            for commit, (value, _) in forwarded.items():
                wanted.setdefault(commit, []).append(f"Forwarded: {value}")
            if wanted:
                names = {p.commit: p.name for p in patches}
                patches = _with_trailers(fork_path, scratch, patches, state.applied, wanted)
                detected = {names[commit]: f"{pull} ({value})" for commit, (value, pull) in forwarded.items()}
        else:  # only a dry run gets here (a rebase first makes the checkout ready): a scratch
            assert isinstance(scratch, Scratch)
            patches = _dry_patches(workspace, dep, scratch, fork_point)
        horizon = None
        if onto_ref == "horizon":
            assert isinstance(scratch, Scratch)
            on_step("horizon")
            horizon = _horizon(scratch, patches, fork_point, target.onto, {
                i: commit.sha for i, (_, commit) in known_upstream(scratch, patches, fork_point, target.onto).items()})
            if horizon.position == 0:
                return RebaseReport(dep.name, RebaseStatus.UP_TO_DATE, target.url, f"horizon of {dep.track}",
                                    dep.commit, dep.commit,
                                    applied=[p.name for p in patches], horizon=horizon, checkout=fork_path)
            target.onto, target.label = horizon.commit.sha, f"horizon of {dep.track}"
            fork_point, crossed = _fork_point(scratch, dep, target)
        report = RebaseReport(dep.name, RebaseStatus.DRY_RUN if dry_run else RebaseStatus.DONE, target.url,
                              target.label, dep.commit,
                              target.onto, crossed=crossed,
                              manifest=_manifest_values(dep, target.url, target.onto, switched), checkout=fork_path,
                              horizon=horizon)
        if dry_run:
            assert isinstance(scratch, Scratch)
            pinned = pinned_state(fork_path, dep)
            # then classify finds them (applies-empty)
            pin_holds = pinned is not None and bool(already_applied(dep, pinned))
            if (target.onto == dep.commit and not switched and not pin_holds
                    and not known_upstream(scratch, patches, fork_point, target.onto)):
                report.status, report.applied = RebaseStatus.UP_TO_DATE, [p.name for p in patches]
                return report
            return _dry_run(scratch, report, patches, fork_point, target)
        known = known_upstream(scratch, patches, fork_point, target.onto)
        assert state is not None
        in_pin = _already_in_pin(scratch, dep, state)
        if target.onto == dep.commit and not known and not switched and not in_pin:
            report.status, report.applied = RebaseStatus.UP_TO_DATE, [p.name for p in patches]
            return report
        dropped = [Dropped(p.name, p.subject, known[i][0], p.commit or "", known[i][1].sha, known[i][1].subject)
                   for i, p in enumerate(patches) if i in known] + in_pin
    assert state is not None
    planned = [Pick(p.commit or "", p.name, p.subject, p.key) for p in patches]
    journal = Journal(
        dep=dep.name, phase=Phase.REPLAYING, branch=_current_branch(fork_path),
        old_head=state.head or "", old_base=dep.commit, replay_base=fork_point, onto=target.onto,
        onto_label=target.label,
        tip=target.tip, url=target.url, crossed=report.crossed, manifest=report.manifest, planned=planned,
        picks=[pick for i, pick in enumerate(planned) if i not in known], dropped=dropped, former_source=former,
        forwarded=detected,
    )
    jr.begin(workspace, journal, dep.patches_dir, {label: fork_path / rel for label, rel in CHECKOUT_FILES.items()})
    _link_followed_objects(fork_path, target.mirror)
    with jr.running(workspace, dep.name) as fd:
        on_step("replay")
        return _drive(workspace, journal, _Fork(fork_path, fd), fresh=True, on_step=on_step)


def _already_in_pin(scratch: GitView, dep: Dependency, state: CheckoutState) -> list[Dropped]:
    """Patches of the series that made no commit in the checkout: ``git am`` found them already
    in the pinned commit (a pin moved by hand past them, git.state.already_applied). Dropped
    as upstream, the pin named as what carries them; the export then leaves them out."""
    names = already_applied(dep, state)
    if not names:
        return []
    pin_subject = history.subject(scratch, dep.commit)
    # no commit of the checkout was made from them: the pin stands for the pick (a full SHA, as the journal requires)
    return [Dropped(name, parse_patch_header(dep.patches_dir / name).subject, Evidence.APPLIES_EMPTY, dep.commit,
                    dep.commit,
                    pin_subject) for name in names]


def _current_branch(checkout: Path) -> str | None:
    """The branch checked out (None for a detached HEAD), read from .git/HEAD."""
    head = (checkout / ".git" / "HEAD").read_text().strip()
    return head.removeprefix("ref: refs/heads/") if head.startswith("ref: refs/heads/") else None


def _link_followed_objects(checkout: Path, mirror: mirrors.Mirror) -> None:
    """Give the checkout the followed repository's objects (the new base and everything
    upstream): hard-linked from its mirror, as a checkout is made (git.objects), so the fork
    keeps owning every object it reads, whatever later happens to the cache."""
    from assembler.cache import in_use
    from assembler.git.objects import link_objects

    with in_use(mirror.path):  # no prune removes the mirror while its packs are linked from
        link_objects((mirror.path / "objects").resolve(), checkout / ".git" / "objects")


def _dry_run(scratch: Scratch, report: RebaseReport, patches: list[Patch], fork_point: str,
             target: _Target) -> RebaseReport:
    verdicts = classify(scratch, patches, fork_point, target.onto)
    for patch, verdict in zip(patches, verdicts, strict=True):
        if verdict.status == PatchStatus.UPSTREAM:
            assert verdict.how is not None  # classify() says how it found every upstream patch
            report.dropped.append(Dropped(patch.name, patch.subject, verdict.how, patch.commit or "",
                                          verdict.commit.sha if verdict.commit else None,
                                          verdict.commit.subject if verdict.commit else None))
        elif verdict.on_target == CONFLICT:
            report.conflicts.append(Conflict(patch.name, patch.subject, verdict.conflicts))
        elif verdict.on_target in (APPLIES, EMPTY):
            report.applied.append(patch.name)
    if report.conflicts and report.horizon is None:
        landed = {i: v.commit.sha for i, v in enumerate(verdicts) if v.how in LANDED and v.commit}
        report.horizon = _horizon(scratch, patches, fork_point, target.onto, landed)
    return report


# -- replay --------------------------------------------------------------------------------

def _drive(workspace: Workspace, journal: Journal, fork: _Fork, fresh: bool,
           on_step: Callable[[str], None] = lambda _: None) -> RebaseReport:
    """Replay until done or a real conflict, then finish (export, deps.toml)."""
    dropped_empty = None
    while journal.phase == Phase.REPLAYING:
        if not fresh:
            fork.reset_to(journal.branch, journal.old_head)
        fresh = False
        dropped_empty = _replay_once(workspace, journal, fork)
        if dropped_empty is not None:
            break
        if journal.phase == Phase.STOPPED:  # type: ignore[comparison-overlap]  # _replay_once changes it
            return _stopped_report(workspace, journal, fork)
    on_step("export")
    return _finish(workspace, journal, fork, dropped_empty)


def _replay_once(workspace: Workspace, journal: Journal, fork: _Fork) -> set[str] | None:
    """One ``git rebase -i`` of the plan. When it completed, the picks git says it dropped as
    empty; otherwise None, and the journal says "stopped", or "replaying" again when picks
    found upstream were dropped."""
    todo = jr.journal_dir(workspace, journal.dep) / "todo"
    # Only full object names go into the todo list: a subject is text from a patch, and a
    # newline in it would be a line of git's own (an ``exec``).
    todo.write_text("".join(f"pick {object_id(p.commit, str(todo))}\n" for p in journal.picks) or "noop\n")
    dropped = fork.replay(todo, journal.onto, journal.replay_base)
    if dropped is not None:
        # Not saved: a crash from here until "exported" replays again, with the same result.
        journal.result_head, journal.phase = read_head(fork.path), Phase.REPLAYED
        return dropped
    _record_stop(workspace, journal, fork)
    return None


def _record_stop(workspace: Workspace, journal: Journal, fork: _Fork) -> None:
    """The sequencer stopped at a patch: drop it (and later ones) if it reverse-applies on the
    target, for a restart; else record the stop for the user."""
    current = fork.rev("REBASE_HEAD") or ""
    index = next((i for i, p in enumerate(journal.picks) if p.commit == current), None)
    if index is None:
        raise InputError(f"{fork.path}: the rebase stopped at {current[:12]}, which is not in the plan",
                         hint=f"`assemble rebase --abort {journal.dep}` restores the state before the rebase")
    remaining = journal.picks[index:]
    with Scratch([fork.path]) as scratch:
        present = reverse_applies(scratch, by_sha(scratch, [p.commit for p in remaining]), journal.onto)
    if 0 in present:
        for i in present:
            pick = remaining[i]
            journal.dropped.append(Dropped(pick.name, pick.subject, Evidence.REVERSE_APPLIES, pick.commit))
        journal.picks = journal.picks[:index] + [p for i, p in enumerate(remaining) if i not in present]
    else:
        journal.phase = Phase.STOPPED
        journal.stopped = Stopped(index=index, commit=current, head=fork.head(),
                                  files=fork.conflicted_files())
    jr.save(workspace, journal)


def _stopped_report(workspace: Workspace, journal: Journal, fork: _Fork) -> RebaseReport:
    assert journal.stopped is not None
    pick = journal.picks[journal.stopped.index]
    files = list(journal.stopped.files)
    report = _base_report(journal, RebaseStatus.STOPPED, fork.path)
    report.applied = [p.name for p in journal.picks[: journal.stopped.index]]
    report.conflicts = [Conflict(pick.name, pick.subject, files)]
    report.horizon = _stop_horizon(journal, fork)
    add = " ".join(shlex.quote(f) for f in files) or "<files>"
    report.next = [
        f"edit the conflicted files in {fork.path}"
        + (f" (to see the base version too: git -C {shlex.quote(str(fork.path))} checkout --conflict=zdiff3 {add})"
           if files else ""),
        f"git -C {shlex.quote(str(fork.path))} add {add}",
        f"assemble -C {shlex.quote(str(workspace.root))} rebase --continue {journal.dep}",
        f"(or drop this patch: assemble -C {shlex.quote(str(workspace.root))} rebase {journal.dep} --drop "
        f"{shlex.quote(pick.name)}; give up: assemble -C {shlex.quote(str(workspace.root))} rebase --abort "
        f"{journal.dep})",
    ]
    return report


def _stop_horizon(journal: Journal, fork: _Fork) -> Horizon | None:
    """Where the whole planned series still applies, and which upstream commit breaks each
    conflicting patch (trial replays of the original plan; the checkout is not touched)."""
    with Scratch([fork.path]) as scratch:
        patches = by_sha(scratch, [p.commit for p in journal.planned],
                         names={p.commit: p.name for p in journal.planned})
        landed = {i: d.commit for d in journal.dropped if d.commit and d.how in LANDED
                  for i, p in enumerate(journal.planned) if p.commit == d.pick}
        return _horizon(scratch, patches, journal.replay_base, journal.onto, landed)


def _base_report(journal: Journal, status: RebaseStatus, checkout: Path) -> RebaseReport:
    return RebaseReport(journal.dep, status, journal.url, journal.onto_label, journal.old_base, journal.onto,
                        crossed=journal.crossed, dropped=list(journal.dropped), manifest=journal.manifest,
                        checkout=checkout)


# -- finishing -----------------------------------------------------------------------------

def _finish(workspace: Workspace, journal: Journal, fork: _Fork, dropped_empty: set[str] | None = None) -> RebaseReport:
    """Export the replayed branch, then update deps.toml. ``dropped_empty``: the picks the
    replay reported dropping as empty (trusted when the exported commits add up)."""
    from assembler.git.export import export

    dep = workspace.manifest.deps.get(journal.dep)
    if dep is None:
        raise InputError(f"deps.toml no longer has [deps.{journal.dep}], which is being rebased",
                         hint=f"put it back, or `assemble rebase --abort {journal.dep}`")
    patches_dir = dep.patches_dir
    if journal.phase == Phase.REPLAYED:
        assert journal.result_head is not None
        # Picks that vanished while the user drove git are "upstream" only when assemble finds
        # their change in the result; otherwise the user dropped them, and must say so.
        gone = list(journal.skipped)
        if dropped_empty is None:
            gone += [p for p in _missing_picks(fork, journal) if p not in gone]
        verified, by_you = _verify_gone(fork, journal.result_head, gone)
        _confirm_drops(workspace, journal, by_you)
        state = CheckoutState.load(fork.path)
        assert state is not None
        state.base, state.source, state.applied = journal.onto, journal.url, {}
        state.head, state.status = journal.result_head, CheckoutStatus.READY
        state.save(fork.path)
        jr.writing(workspace, journal, "patches", patches_dir)
        with ThreadPoolExecutor(max_workers=1) as pool:  # git range-diff runs while export writes
            range_diff = pool.submit(_range_diff, fork, journal)
            result = export(workspace, dep)
            journal.range_diff = range_diff.result()
        made = len(result.written) + len(result.unchanged)
        kept = [p for p in journal.picks if p not in gone]
        if dropped_empty is not None and made == len(kept) - len(dropped_empty):
            empty = [pick for pick in kept if pick.commit in dropped_empty] + verified
        elif dropped_empty is not None:
            empty = [p for p in _missing_picks(fork, journal) if p not in gone] + verified
        else:
            empty = verified
        journal.dropped += [Dropped(p.name, p.subject, Evidence.DROPPED_BY_YOU, p.commit) for p in by_you]
        _drop_empty(fork, journal, empty)
        journal.export = {"written": result.written, "unchanged": result.unchanged, "removed": result.removed}
        journal.phase = Phase.EXPORTED
        jr.written(journal, "patches", patches_dir)
    jr.writing(workspace, journal, "deps.toml", workspace.manifest_path)
    note = (f"formerly source = \"{journal.former_source}\" (commit {journal.old_base}); moved to {journal.url} by "
            "assemble rebase" if journal.former_source else None)
    update_dependency(workspace.manifest_path, journal.dep, journal.manifest, note=note)
    jr.written(journal, "deps.toml", workspace.manifest_path)
    jr.save(workspace, journal)
    workspace.reload()
    if journal.former_source and journal.dep in workspace.manifest.deps:
        from assembler.git.checkout import name_remotes

        name_remotes(workspace, workspace.manifest.deps[journal.dep], former_source=journal.former_source)
    jr.finish(workspace, journal.dep, keep=True)
    report = _base_report(journal, RebaseStatus.DONE, fork.path)
    report.forwarded = dict(journal.forwarded)
    report.range_diff = parse_range_diff(journal.range_diff or "", {p.commit: p.name for p in journal.planned})
    if journal.old_base != journal.onto:
        report.warnings += floor_warnings(GitView(fork.git_dir), journal.old_base, journal.onto, dep.torch_target)
    dropped = {d.pick for d in journal.dropped}
    report.applied = [p.name for p in journal.picks if p.commit not in dropped]
    report.export = journal.export
    return report


def _range_diff(fork: _Fork, journal: Journal) -> str:
    """``git range-diff`` of the series before (replay base..old head) and after (onto..result)."""
    assert journal.result_head is not None
    revs = (journal.replay_base, journal.old_head, journal.onto, journal.result_head)
    return fork.range_diff(*revs)


def _verify_gone(fork: _Fork, result_head: str, gone: list[Pick]) -> tuple[list[Pick], list[Pick]]:
    """(picks whose change the result already holds: picking them onto it changes nothing;
    the others, which the user dropped)."""
    if not gone:
        return [], []
    held: list[Pick] = []
    dropped: list[Pick] = []
    with Scratch([fork.path]) as scratch:
        tree = scratch.tree_of(result_head)
        for pick in gone:
            parent = scratch.rev(f"{pick.commit}^")
            picked = scratch.pick(tree, pick.commit, parent)[0] if parent else None
            (held if picked == tree else dropped).append(pick)
    return held, dropped


def _confirm_drops(workspace: Workspace, journal: Journal, by_you: list[Pick]) -> None:
    """A patch the user skipped with git is not called upstream: it is dropped only once the
    user confirms it (``--drop NAME``); until then the rebase waits, its journal saying so."""
    unconfirmed = [p for p in by_you if p.name not in journal.confirmed]
    if not unconfirmed:
        return
    jr.save(workspace, journal)
    names = ", ".join(p.name for p in unconfirmed)
    drops = " ".join(f"--drop {shlex.quote(p.name)}" for p in unconfirmed)
    raise ConflictError(
        f"{journal.dep}: {names} {'was' if len(unconfirmed) == 1 else 'were'} skipped by hand (git rebase --skip) "
        "and the result does not hold the change: it is not upstream",
        hint=f"confirm the drop with `assemble rebase {journal.dep} {drops}`, or `assemble rebase --abort "
             f"{journal.dep}`",
    )


def _missing_picks(fork: _Fork, journal: Journal) -> list[Pick]:
    """The picks with no commit of theirs in the result (recognised by author, date and
    message), in case git's own account of what it dropped is not there."""
    assert journal.result_head is not None
    unmatched = [commit.key for commit in from_commits(GitView(fork.git_dir), journal.result_head, [journal.onto])]
    empty = []
    for pick in journal.picks:
        if pick.key in unmatched:
            unmatched.remove(pick.key)
        else:
            empty.append(pick)
    return empty


def _drop_empty(fork: _Fork, journal: Journal, empty: list[Pick]) -> None:
    """Picks the replay dropped as empty are upstream too. For them and for those found to
    reverse-apply, find the upstream commit that carries each change (bisection)."""
    journal.dropped += [Dropped(p.name, p.subject, Evidence.APPLIES_EMPTY, p.commit) for p in empty]
    unknown = [d for d in journal.dropped if d.how in (Evidence.APPLIES_EMPTY, Evidence.REVERSE_APPLIES)
               and d.commit is None]
    if not unknown:
        return
    with Scratch([fork.path]) as scratch:
        patches = by_sha(scratch, [d.pick for d in unknown])
        carriers = find_carriers(scratch, patches, journal.replay_base, journal.onto, list(range(len(patches))), set())
    for i, dropped in enumerate(unknown):
        carrier = carriers.get(i)
        if carrier is not None:
            dropped.commit, dropped.commit_subject = carrier.sha, carrier.subject


# -- continue / abort ----------------------------------------------------------------------

def _journal_for(workspace: Workspace, name: str | None) -> Journal:
    names = workspace.rebases_pending()
    if name is None:
        if len(names) != 1:
            raise InputError("no rebase in progress" if not names else f"rebases in progress: {', '.join(names)}",
                             hint="name the dependency" if names else None)
        name = names[0]
    journal = jr.load(workspace, name)
    if journal is None:
        raise InputError(f"no rebase of {name} in progress", hint=f"start one with `assemble rebase {name}`")
    return journal


@locked
def resume(workspace: Workspace, name: str | None = None,
           on_step: Callable[[str], None] = lambda _: None) -> RebaseReport:
    """``--continue``: after a conflict was resolved, or after a crash at any point."""
    journal = _journal_for(workspace, name)
    with jr.running(workspace, journal.dep) as fd:
        fork = _Fork(workspace.forks_dir / journal.dep, fd)
        if journal.phase == Phase.REPLAYING and _stopped_in_plan(journal, fork):
            _record_stop(workspace, journal, fork)  # stopped before the journal could say so
        if journal.phase == Phase.STOPPED and _take_resolution(workspace, journal, fork):
            return _finish(workspace, journal, fork)
        on_step("replay")
        return _drive(workspace, journal, fork, fresh=False, on_step=on_step)


def _stopped_in_plan(journal: Journal, fork: _Fork) -> bool:
    """The sequencer stopped at a pick of the plan before the journal could say so (a stop at
    a pick that --drop took out since is stale: the replay starts over)."""
    return fork.clean_stop() and fork.rev("REBASE_HEAD") in {p.commit for p in journal.picks}


def _take_resolution(workspace: Workspace, journal: Journal, fork: _Fork) -> bool:
    """Turn what the user did at the stop into plan entries; True if they finished the rebase
    with git themselves (the result is then taken as is)."""
    assert journal.stopped is not None
    stop_head = journal.stopped.head
    index = journal.stopped.index
    if not fork.stopped():
        head = fork.head()
        if not fork.is_ancestor(journal.onto, head):
            raise InputError(f"the rebase of {journal.dep} was abandoned outside assemble (HEAD is {head[:12]})",
                             hint=f"`assemble rebase --abort {journal.dep}` restores the state before the rebase")
        dirty = fork.dirty()
        if dirty:
            raise WouldLoseWorkError(f"{fork.path} has uncommitted changes "
                                     f"({', '.join(dirty[:5])}{', ...' if len(dirty) > 5 else ''})",
                                     hint="commit them (they become patches) or remove them, then `assemble rebase "
                                          f"--continue {journal.dep}`")
        journal.result_head, journal.phase = head, Phase.REPLAYED
        jr.save(workspace, journal)
        return True
    unmerged = fork.conflicted_files()
    if unmerged:
        raise ConflictError(f"{journal.dep}: still unresolved: {', '.join(unmerged)}",
                            hint=f"edit them, `git -C {fork.path} add` them, then `assemble rebase --continue "
                                 f"{journal.dep}`")
    unstaged = fork.unstaged()
    if unstaged:
        raise WouldLoseWorkError(f"{journal.dep}: changes not staged: {', '.join(unstaged)}",
                                 hint=f"`git -C {fork.path} add` them (or check them out) and continue")
    current = fork.rev("REBASE_HEAD") or journal.picks[index].commit
    position = next((i for i, p in enumerate(journal.picks) if p.commit == current), index)
    head = fork.head()
    names = {p.key: p.name for p in journal.planned}
    made = from_commits(GitView(fork.git_dir), head, [stop_head])
    new = [Pick(c.commit or "", names.get(c.key, c.name), c.subject, c.key) for c in made]
    made_keys = {c.key for c in made}
    # picks the user skipped with git on the way to this stop (or git dropped as empty)
    journal.skipped += [p for p in journal.picks[index:position] if p.key not in made_keys]
    pick = journal.picks[position]
    tree = fork.resolved_tree()
    if tree is not None:
        new.append(Pick(commit_like(fork, tree, head, current), pick.name, pick.subject, pick.key))
    else:
        journal.dropped.append(Dropped(pick.name, pick.subject, Evidence.RESOLVED_EMPTY, pick.commit))
    journal.picks = journal.picks[:index] + new + journal.picks[position + 1:]
    journal.phase, journal.stopped = Phase.REPLAYING, None
    jr.save(workspace, journal)
    return False


@locked
def abort(workspace: Workspace, name: str | None = None) -> RebaseReport:
    """``--abort``: branch, HEAD and tracked files as before; deps.toml and patches/<dep>/ byte
    for byte unless they were edited during the rebase (then kept, with a warning)."""
    journal = _journal_for(workspace, name)
    warnings = []
    with jr.running(workspace, journal.dep) as fd:
        path = workspace.forks_dir / journal.dep
        backup = jr.Backup(workspace, journal.dep)
        if path.is_dir():
            _Fork(path, fd).reset_to(journal.branch, journal.old_head)
            for label, rel in CHECKOUT_FILES.items():
                backup.restore_file(f"checkout/{label}", path / rel)
        dep = workspace.manifest.deps.get(journal.dep)
        patches_dir = dep.patches_dir if dep else workspace.root / "patches" / journal.dep
        if backup.restorable(journal, "patches", patches_dir):
            backup.restore_patches(patches_dir)
        else:
            warnings.append(f"{patches_dir} was changed during the rebase; left as it is (review it with `assemble "
                            f"patches {journal.dep}`)")
        if backup.restorable(journal, "deps.toml", workspace.manifest_path):
            backup.restore_file("deps.toml", workspace.manifest_path)
        else:
            warnings.append(f"{workspace.manifest_path} was changed during the rebase; left as it is "
                            f"(check that [deps.{journal.dep}] still says commit = \"{journal.old_base}\")")
        jr.finish(workspace, journal.dep)
    workspace.reload()
    report = _base_report(journal, RebaseStatus.ABORTED, path)
    report.new_base = journal.old_base
    report.warnings = warnings
    return report


# -- drop / undo ---------------------------------------------------------------------------

@locked
def drop(workspace: Workspace, name: str | None, patches: list[str],
         on_step: Callable[[str], None] = lambda _: None) -> RebaseReport:
    """``--drop PATCH`` (or ``--skip PATCH``) during a pending rebase: the patch is left out
    of the new series, recorded as dropped by you. The one the rebase stopped at is skipped
    and the replay goes on; one skipped by hand with git is confirmed; a later one is taken
    out of the plan."""
    journal = _journal_for(workspace, name)
    with jr.running(workspace, journal.dep) as fd:
        fork = _Fork(workspace.forks_dir / journal.dep, fd)
        if journal.phase == Phase.REPLAYING and _stopped_in_plan(journal, fork):
            _record_stop(workspace, journal, fork)
        start = journal.stopped.index if journal.stopped is not None else 0
        replay = False
        for wanted in patches:
            pick = _find_pick(journal, wanted)
            journal.confirmed.append(pick.name)
            if pick in journal.skipped or journal.phase == Phase.REPLAYED:
                continue
            index = journal.picks.index(pick)
            if index < start:
                raise InputError(f"{journal.dep}: {pick.name} is already replayed in this rebase",
                                 hint=f"`assemble rebase --abort {journal.dep}`, then drop it from "
                                      f"patches/{journal.dep}/series")
            if journal.stopped is not None and index == journal.stopped.index:
                if fork.rev("HEAD") != journal.stopped.head:
                    raise WouldLoseWorkError(f"{fork.path} has commits made since the rebase stopped",
                                             hint=f"`assemble rebase --continue {journal.dep}` first (they are kept), "
                                                  "then drop")
                replay = True
            journal.picks.remove(pick)
            journal.dropped.append(Dropped(pick.name, pick.subject, Evidence.DROPPED_BY_YOU, pick.commit))
        if replay:
            journal.phase, journal.stopped = Phase.REPLAYING, None
        jr.save(workspace, journal)
        if journal.phase == Phase.STOPPED:
            return _stopped_report(workspace, journal, fork)
        on_step("replay")
        return _drive(workspace, journal, fork, fresh=False, on_step=on_step)


def _find_pick(journal: Journal, wanted: str) -> Pick:
    """A pick of the plan (or one skipped by hand) by patch file name, name without
    ``.patch``, or commit SHA prefix."""
    candidates = [*journal.picks, *journal.skipped]
    if wanted == "":  # `--skip` alone, as git's: the patch the rebase stopped at
        if journal.stopped is None or journal.stopped.index >= len(journal.picks):
            raise InputError(f"{journal.dep}: the rebase is not stopped at a patch, so --skip has nothing to skip",
                             hint="name the patch: --drop PATCH")
        return journal.picks[journal.stopped.index]
    for pick in candidates:
        if wanted in (pick.name,
                      pick.name.removesuffix(".patch")) or (len(wanted) >= 7 and pick.commit.startswith(wanted)):
            return pick
    found = find_patch([pick.name for pick in candidates], wanted)  # its number (0002) or a part of its name
    if found is not None:
        return next(pick for pick in candidates if pick.name == found)
    names = ", ".join(p.name for p in candidates) or "none"
    raise InputError(f"{journal.dep}: no patch {wanted!r} left in this rebase",
                     hint=f"patches that can be dropped: {names}")


@locked
def undo(workspace: Workspace, dep: Dependency) -> RebaseReport:
    """``--undo``: the state before the last finished rebase of ``dep`` (deps.toml,
    patches/<dep>/, the checkout's branch and files) from the backup that rebase kept, byte
    for byte; refused when anything changed since that rebase wrote it."""
    if jr.load(workspace, dep.name) is not None:
        raise ConflictError(f"a rebase of {dep.name} is in progress",
                            hint=f"`assemble rebase --abort {dep.name}` undoes that one")
    directory = jr.undo_dir(workspace, dep.name)
    journal = jr.load(workspace, dep.name, directory)
    if journal is None:
        raise InputError(f"no finished rebase of {dep.name} to undo",
                         hint="only the last rebase can be undone, until the next one finishes (or it is undone)")
    backup = jr.Backup(workspace, dep.name, directory)
    path = workspace.fork_path(dep)
    # Each piece holds what the rebase wrote, or already the backup (an undo that was killed
    # half-way is simply run again); anything else is an edit an undo would lose.
    changed = [label for label, target in (("deps.toml", workspace.manifest_path), ("patches", dep.patches_dir))
               if jr.digest_path(target) not in (journal.wrote.get(label, [None, None])[1], backup.digest(label))]
    if changed:
        raise WouldLoseWorkError(f"{', '.join(changed)} changed since the rebase of {dep.name} onto "
                                 f"{journal.onto[:12]}; undo would lose that",
                                 hint="put those edits aside, or undo by hand from " + str(directory / jr.BACKUP))
    if path.is_dir():
        fork = _Fork(path, None)
        if fork.stopped() or read_head(path) not in (journal.result_head, journal.old_head) or fork.dirty():
            raise WouldLoseWorkError(f"{path} changed since the rebase (commits, edits or a git operation)",
                                     hint=f"export or discard them first (`assemble export {dep.name}`), then --undo")
    with jr.running(workspace, dep.name) as fd:
        if path.is_dir():
            _Fork(path, fd).reset_to(journal.branch, journal.old_head)
            for label, rel in CHECKOUT_FILES.items():
                backup.restore_file(f"checkout/{label}", path / rel)
        backup.restore_patches(dep.patches_dir)
        backup.restore_file("deps.toml", workspace.manifest_path)
        jr.forget_undo(workspace, dep.name)
    workspace.reload()
    report = _base_report(journal, RebaseStatus.UNDONE, path)
    report.new_base = journal.old_base
    return report
