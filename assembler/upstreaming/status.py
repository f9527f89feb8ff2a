"""Is each carried patch upstream yet? Evidence in layers, cheapest first:

1. ``Applied-Upstream: commit:<sha>`` whose commit is an ancestor of the target;
2. the same ``git patch-id --stable`` as an upstream commit since the fork point (git's
   cherry-pick detection marks the candidates in one walk; one ``git log -p | git patch-id``
   pipe pairs them up when both sides have several);
3. a trial replay onto the target: the patch applies empty, or conflicts but reverse-applies
   (squash merges and rewritten-on-merge patches land here);
4. otherwise its ``Forwarded`` header says forwarded (a PR URL), local (no) or not-needed.

Plus the per-dependency summary `assemble patches` prints: base, counts, and the "migrated on
our side / migrated upstream" columns of a release table.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from assembler.audit.gate import passes
from assembler.builder.evidence import last_build_time, last_build_verdicts
from assembler.check.evidence import CheckEvidence, check_evidence
from assembler.errors import InputError, NetworkError
from assembler.git import mirrors
from assembler.git.process import DIFF_CONFIG, END_OF_OPTIONS, GitView
from assembler.git.runner import read_ref
from assembler.git.scratch import Scratch
from assembler.manifest import Dependency, Manifest
from assembler.series.headers import PatchStatus, forwarded_status
from assembler.upstreaming import classified
from assembler.upstreaming.horizon import ChainProbe, Commit, first_parent_chain
from assembler.upstreaming.patchset import (
    DIFF_ARGS,
    Patch,
    checkout_in_sync,
    from_commits,
    from_series,
    load_diffs,
    series_as_commits,
)
from assembler.upstreaming.replay import APPLIES, EMPTY, REVERSE, reverse_applies, trial
from assembler.workspace import Workspace

_MAX_PATHSPEC = 2000


class Evidence(StrEnum):
    """How a patch's status was established (the layers above, and a rebase's resolution)."""

    APPLIED_UPSTREAM = "applied-upstream"  # its Applied-Upstream commit is in the target
    PATCH_ID = "patch-id"  # an upstream commit has the same patch-id
    APPLIES_EMPTY = "applies-empty"  # replayed onto the target it changes nothing
    REVERSE_APPLIES = "reverse-applies"  # it conflicts, but the target already holds its result
    HEADER = "header"  # nothing in git: what its Forwarded header says
    RESOLVED_EMPTY = "resolved-empty"  # a rebase conflict resolved to no change
    DROPPED_BY_YOU = "dropped-by-you"  # skipped or dropped by the user during a rebase (confirmed)
    PULL_REQUEST = "pull-request"  # the same patch-id as a commit of an upstream pull request


LANDED = (Evidence.APPLIED_UPSTREAM, Evidence.PATCH_ID)  # evidence that names the upstream commit itself


class Migration(StrEnum):
    """The two release-table columns of `assemble patches`."""

    DONE = "done"
    IN_PROGRESS = "in progress"
    NO = "no"
    NOT_APPLICABLE = "n.a."
    NOT_CHECKED = "not checked"  # migrated on our side: no check or build of this pin + series yet


@dataclass
class PatchVerdict:
    name: str
    subject: str
    status: PatchStatus | None  # None only while classify() fills it in
    how: Evidence | None
    commit: Commit | None = None  # the upstream commit that carries the change
    url: str | None = None  # from Forwarded
    note: str = ""
    on_target: str | None = None  # trial replay outcome on the target (see replay.py)
    conflicts: list[str] = field(default_factory=list)

    def evidence(self) -> str:
        """One line for people: the upstream commit, or the PR URL, or what the header says."""
        if self.commit is not None:
            return f"{self.commit.sha[:12]} {self.commit.subject} ({self.how})"
        if self.how == Evidence.PULL_REQUEST:
            return f"{self.note} (same patch-id)" + (f": {self.url}" if self.url else "")
        return self.url or self.note

    def to_json(self) -> dict[str, object]:
        evidence: dict[str, object] = {"how": self.how}
        if self.commit is not None:
            evidence.update(commit=self.commit.sha, subject=self.commit.subject)
        if self.url:
            evidence["url"] = self.url
        if self.note:
            evidence["note"] = self.note
        return {"file": self.name, "subject": self.subject, "status": self.status, "evidence": evidence,
                "on_target": self.on_target, "conflicts": self.conflicts}


# -- mirrors -----------------------------------------------------------------------------

def resolve(mirror: mirrors.Mirror, ref: str) -> str | None:
    """A branch of the mirrored repository, a tag, or a commit; None if the mirror lacks it.
    A branch is read from its ref file (no git process: this runs on every rebase)."""
    branch = read_ref(mirror.path, f"refs/remotes/origin/{ref}")
    if branch is not None:
        return branch
    view = GitView(mirror.path)
    for candidate in (f"refs/remotes/origin/{ref}", f"refs/tags/{ref}", ref):
        sha = view.rev(candidate)
        if sha is not None:
            return sha
    return None


def tracked_tip(manifest: Manifest, url: str, ref: str, offline: bool) -> tuple[mirrors.Mirror, str]:
    """Fetch ``url``'s mirror (unless offline) and resolve ``ref`` there."""
    mirror = mirrors.open_mirror(manifest, url)
    if not offline:
        mirrors.fetch(mirror)
    sha = resolve(mirror, ref)
    if sha is None and not offline:
        with contextlib.suppress(NetworkError):
            mirrors.fetch(mirror, [ref])
        sha = resolve(mirror, ref)
    if sha is None:
        if offline:
            raise NetworkError(f"the mirror of {url} ({mirrors.age_text(mirror.last_fetched())}) has no {ref}",
                               hint="run without --offline to fetch it")
        raise InputError(f"{url} has no branch, tag or commit {ref}", hint="check `track` in deps.toml (or the REF given)")
    return mirror, sha


def source_mirror(manifest: Manifest, dep: Dependency, offline: bool) -> mirrors.Mirror:
    if not offline:
        return mirrors.ensure_commit(manifest, dep.source, dep.commit)[0]
    mirror = mirrors.open_mirror(manifest, dep.source)
    if not mirror.has(dep.commit):
        raise NetworkError(f"the mirror of {dep.source} ({mirrors.age_text(mirror.last_fetched())}) lacks {dep.commit[:12]}",
                           hint="run without --offline to fetch it")
    return mirror


# -- layers --------------------------------------------------------------------------------

def describe(scratch: GitView, shas: list[str]) -> dict[str, Commit]:
    """Full SHA and subject of each (possibly abbreviated) commit, in one ``git log``."""
    unique = list(dict.fromkeys(shas))
    if not unique:
        return {}
    output = scratch.out("log", "--no-walk=unsorted", "--format=%H%x00%s", END_OF_OPTIONS, *unique)
    return {sha: Commit(*line.split("\0", 1)) for sha, line in zip(unique, output.splitlines(), strict=True)}


def patch_ids(scratch: GitView, patches: list[Patch]) -> dict[str, int]:
    """patch-id -> index of our patch, from the diffs themselves (one ``git patch-id``)."""
    stream = b"".join(b"commit %040x\n\n" % (i + 1) + (p.diff or b"") for i, p in enumerate(patches) if p.diff)
    if not stream:
        return {}
    ids = {}
    for line in scratch.out("patch-id", "--stable", input=stream).splitlines():
        pid, number = line.split()
        ids[pid] = int(number, 16) - 1
    return ids


def _pathspec(patches: list[Patch]) -> list[str]:
    """Our patches' files: an upstream commit whose diff on those paths equals a patch carries
    that patch, whatever else it changes; and ``git log -p`` stays cheap on big histories."""
    paths = sorted({name for p in patches for name in p.files})
    return ["--", *paths] if paths and len(paths) <= _MAX_PATHSPEC else []


def log_patch_ids(scratch: GitView, options: list[str], revisions: list[str], pathspec: list[str]) -> list[tuple[str, str]]:
    """(commit, patch-id) for the non-merge commits ``revisions`` name, newest first, from
    one ``git log -p | git patch-id --stable`` pipe."""
    output = scratch.pipe(
        [*DIFF_CONFIG, *DIFF_ARGS, "--no-merges", "--format=commit %H", *options, END_OF_OPTIONS, *revisions, *pathspec],
        ["patch-id", "--stable"],
    )
    pairs = []
    for line in output.splitlines():
        pid, sha = line.split()
        pairs.append((sha, pid))
    return pairs


def known_upstream(scratch: GitView, patches: list[Patch], since: str, target: str) -> dict[int, tuple[Evidence, Commit]]:
    """Layers 1 and 2: patch index -> (how, the upstream commit that carries it)."""
    found: dict[int, tuple[Evidence, str]] = {}
    for i, patch in enumerate(patches):
        sha = patch.header.applied_upstream
        if sha and scratch.is_ancestor(sha, target):
            found[i] = (Evidence.APPLIED_UPSTREAM, sha)
    rest = [i for i in range(len(patches)) if i not in found]
    known: dict[str, Commit] = {}
    if rest:
        for i, commit in _same_patch_id(scratch, patches, since, target).items():
            if i in rest:
                found[i] = (Evidence.PATCH_ID, commit.sha)
                known[commit.sha] = commit
    known |= describe(scratch, [sha for _, sha in found.values() if sha not in known])
    return {i: (how, known[sha]) for i, (how, sha) in found.items()}


def _same_patch_id(scratch: GitView, patches: list[Patch], since: str, target: str) -> dict[int, Commit]:
    """Patch index -> the oldest upstream commit (since..target) with the same change. When the
    patches are commits (all of since..last, the last one the tip), git's own cherry-pick
    detection (``--cherry-mark``, which hashes file headers first and full diffs only on a
    match) finds the candidates on both sides of target...tip; when one side has a single
    candidate the pairs are known, else one pipe gives the candidates' ``--stable`` patch-ids."""
    if not all(p.commit for p in patches):
        load_diffs(scratch, patches)
        ours = {i: pid for pid, i in patch_ids(scratch, patches).items()}
        upstream = {pid: sha for sha, pid in log_patch_ids(scratch, [], [target, f"^{since}"], _pathspec(patches))}
        matched = {i: upstream[pid] for i, pid in ours.items() if pid in upstream}
        commits = describe(scratch, list(matched.values()))
        return {i: commits[sha] for i, sha in matched.items()}
    index = {p.commit: i for i, p in enumerate(patches)}
    marks = scratch.out("log", "--cherry-mark", "--no-merges", "--format=%m%H %s", END_OF_OPTIONS, f"{target}...{patches[-1].commit}")
    mine: list[str] = []
    candidates: dict[str, Commit] = {}  # newest first
    for line in marks.splitlines():
        if line.startswith("="):
            sha, _, subject = line[1:].partition(" ")
            if sha in index:
                mine.append(sha)
            else:
                candidates[sha] = Commit(sha, subject)
    if not mine:
        return {}
    if len(mine) == 1 or len(candidates) == 1:
        # every candidate on one side equals the single one on the other: the oldest is kept
        return {index[sha]: list(candidates.values())[-1] for sha in mine}
    ours = {}
    theirs: dict[str, Commit] = {}  # patch-id -> upstream commit; newest first, so the oldest wins
    for sha, pid in log_patch_ids(scratch, ["--no-walk=unsorted"], [*mine, *candidates], []):
        if sha in index:
            ours[index[sha]] = pid
        else:
            theirs[pid] = candidates[sha]
    return {i: theirs[pid] for i, pid in ours.items() if pid in theirs}


def pull_request_link(upstream_url: str, number: int) -> str | None:
    """The web page of pull request ``number`` on a known forge (GitHub, GitLab), else None."""
    url = upstream_url.removesuffix("/").removesuffix(".git")
    if url.startswith("git@"):  # scp-like git@host:owner/repo
        host, _, path = url[len("git@"):].partition(":")
        url = f"https://{host}/{path}"
    if not url.startswith(("https://", "http://")):
        return None
    host = url.split("/")[2]
    if host == "github.com" or host.endswith(".github.com"):
        return f"{url}/pull/{number}"
    if "gitlab" in host:
        return f"{url}/-/merge_requests/{number}"
    return None


def in_pull_requests(upstream: Path, scratch: GitView, patches: list[Patch], indices: list[int], target: str) -> dict[int, int]:
    """Patch index -> the lowest-numbered pull request (fetched by the mirror under
    refs/assemble/pull/) that has a commit with the patch's patch-id, not yet in ``target``."""
    view = GitView(upstream)
    if not indices or not view.out("for-each-ref", "--count=1", "--format=%(refname)", mirrors.PULL_NAMESPACE):
        return {}
    chosen = [patches[i] for i in indices]
    load_diffs(scratch, chosen)
    ours = {pid: indices[k] for pid, k in patch_ids(scratch, chosen).items()}
    found: dict[int, int] = {}
    pairs = log_patch_ids(view, [f"--glob={mirrors.PULL_NAMESPACE}*"], [f"^{target}"], _pathspec(chosen))
    for sha, pid in pairs:
        index = ours.get(pid)
        if index is None or index in found:
            continue
        refs = view.out("for-each-ref", "--contains", sha, "--format=%(refname)", mirrors.PULL_NAMESPACE).split()
        numbers = sorted(int(ref.rsplit("/", 1)[1]) for ref in refs if ref.rsplit("/", 1)[1].isdigit())
        if numbers:
            found[index] = numbers[0]
    return found


def by_header(patch: Patch) -> tuple[PatchStatus, str | None, str]:
    """Layer 4, from ``Forwarded``: (status, PR URL, note)."""
    return forwarded_status(patch.header)


def classify(scratch: Scratch, patches: list[Patch], since: str, target: str) -> list[PatchVerdict]:
    """Every layer for every patch against ``target`` (fork point ``since``)."""
    known = known_upstream(scratch, patches, since, target)
    replayed = trial(scratch, patches, target, dropped=set(known))
    present = [i for i, outcome in enumerate(replayed.outcomes) if outcome in (EMPTY, REVERSE)]
    applies = {i for i, outcome in enumerate(replayed.outcomes) if outcome == APPLIES}
    found_in = find_carriers(scratch, patches, since, target, present, applies)
    verdicts = []
    for i, patch in enumerate(patches):
        verdict = PatchVerdict(patch.name, patch.subject, None, None, on_target=replayed.outcomes[i], conflicts=replayed.conflicts.get(i, []))
        if i in known:
            verdict.status, verdict.how, verdict.commit = PatchStatus.UPSTREAM, *known[i]
        elif i in present:
            verdict.status = PatchStatus.UPSTREAM
            verdict.how = Evidence.APPLIES_EMPTY if replayed.outcomes[i] == EMPTY else Evidence.REVERSE_APPLIES
            verdict.commit = found_in.get(i)
            if verdict.commit is None:
                verdict.note = f"the change is already in {target[:12]}"
        else:
            verdict.status, verdict.url, verdict.note = by_header(patch)
            verdict.how = Evidence.HEADER
        verdicts.append(verdict)
    return verdicts


def find_carriers(scratch: Scratch, patches: list[Patch], since: str, target: str, present: list[int],
                  applies: set[int]) -> dict[int, Commit | None]:
    """For patches found already upstream by replay (``present``), the first first-parent
    commit of since..target that holds each change, by bisection."""
    if not present:
        return {}
    probe = ChainProbe(scratch, patches, Commit(since, ""), first_parent_chain(scratch, since, target), {})

    def present_at(i: int, m: int) -> bool:
        return _present_at(scratch, patches, i, probe.chain[m].sha, applies)

    return {i: probe.introduced(functools.partial(present_at, i)) for i in present}


def _present_at(scratch: Scratch, patches: list[Patch], k: int, sha: str, applies: set[int]) -> bool:
    """Whether upstream commit ``sha`` already holds patch ``k``'s change."""
    patch = patches[k]
    if patch.commit and patch.parent:
        tree = scratch.tree_of(sha)
        if scratch.pick(tree, patch.commit, patch.parent)[0] == tree:
            return True
    return 0 in reverse_applies(scratch, patches[k:], sha, {i - k for i in applies if i >= k})


# -- per dependency ------------------------------------------------------------------------

@dataclass
class Base:
    commit: str
    date: str
    on: str  # "upstream" (an ancestor of the tracked branch) or "fork"
    behind: int  # tracked-branch commits the base lacks
    own: int  # commits of the base that are not upstream (a fork's own work)
    fork_point: str = ""  # where the pin meets the tracked branch (the pin itself when on upstream)

    def to_json(self) -> dict[str, object]:
        return {"commit": self.commit, "date": self.date, "on": self.on, "behind": self.behind, "own_commits": self.own,
                "fork_point": self.fork_point}


@dataclass
class DepStatus:
    name: str
    upstream: str
    track: str
    tip: str
    fetched: str  # how old the mirror is
    base: Base
    patches_from: str  # "series", "fork commits" or "none"
    verdicts: list[PatchVerdict]
    broken_on_base: str | None  # first series patch that does not apply on the pinned base
    build_verdicts: tuple[str, ...] | None = None  # the last build's audit of this pin + series
    build_obtained: str | None = None  # when that build's audit ran (ISO 8601, UTC)
    check: CheckEvidence | None = None  # the last `assemble check` of this pin + series
    classified_at: str = ""  # when the verdicts were computed (ISO 8601, UTC)
    reused: bool = False  # the verdicts are the stored ones of that time: nothing they depend on changed since

    def counts(self) -> dict[PatchStatus, int]:
        return {status: sum(v.status == status for v in self.verdicts) for status in PatchStatus}

    @property
    def conflicts_on_tip(self) -> list[str]:
        return [v.name for v in self.verdicts if v.conflicts]

    @property
    def migrated_on_fork(self) -> Migration:
        """Only evidence makes it done: every translation unit CLEAN in the last `assemble
        check` of this pin + series, or every extension of the last build of this pin + series
        audited STABLE. in progress: a check or build found work left, or the series does not
        apply on its base; not checked: no such evidence, also when nothing is carried (the
        pinned source itself may still need the migration)."""
        built = self.build_verdicts
        if self.broken_on_base:
            return Migration.IN_PROGRESS
        if (built and all(passes(v) for v in built)) or (self.check is not None and self.check.done):
            return Migration.DONE
        if built or self.check is not None:
            return Migration.IN_PROGRESS
        return Migration.NOT_CHECKED

    @property
    def migration_evidence(self) -> str:
        """What the "migrated on our side" verdict rests on, in a few words."""
        parts = []
        if self.check is not None:
            parts.append(f"check: {self.check.summary}, {self.check.obtained[:10]}")
        if self.build_verdicts:
            verdicts = ", ".join(sorted(set(self.build_verdicts)))
            parts.append(f"build audit: {verdicts}" + (f", {self.build_obtained[:10]}" if self.build_obtained else ""))
        if self.broken_on_base:
            parts.append(f"series does not apply from {self.broken_on_base}")
        return "; ".join(parts) or "no check or build of this pin and series"

    @property
    def migrated_upstream(self) -> Migration:
        """done: every patch that should go upstream is there; in progress: some are upstream or
        forwarded; no: none sent; n.a.: nothing that should go upstream."""
        relevant = [v.status for v in self.verdicts if v.status != PatchStatus.NOT_NEEDED]
        if not relevant:
            return Migration.NOT_APPLICABLE
        if all(status == PatchStatus.UPSTREAM for status in relevant):
            return Migration.DONE
        if any(status in (PatchStatus.UPSTREAM, PatchStatus.FORWARDED) for status in relevant):
            return Migration.IN_PROGRESS
        return Migration.NO

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name, "upstream": self.upstream, "track": self.track, "tip": self.tip, "mirror": self.fetched,
            "base": self.base.to_json(), "patches_from": self.patches_from, "counts": {str(k): n for k, n in self.counts().items()},
            "migrated_on_fork": self.migrated_on_fork, "migrated_upstream": self.migrated_upstream,
            "broken_on_base": self.broken_on_base, "conflicts_on_tip": self.conflicts_on_tip,
            "build_verdicts": list(self.build_verdicts) if self.build_verdicts is not None else None,
            "migration_evidence": {
                "summary": self.migration_evidence,
                "check": self.check.to_json() if self.check is not None else None,
                "build": None if self.build_verdicts is None else {
                    "source": "audit of the last build", "verdicts": list(self.build_verdicts),
                    "obtained": self.build_obtained,
                },
            },
            "patches": [v.to_json() for v in self.verdicts],
            "classified": {"at": self.classified_at, "reused": self.reused},
        }


def carried_patches(workspace: Workspace, dep: Dependency, scratch: Scratch, fork_point: str) -> tuple[list[Patch], str, str | None]:
    """(patches with commits, where they come from, first patch not applying on the base).
    Series patches use the checkout's commits when it is in sync, else are built in the
    scratch; a fork pinned without a series contributes its own commits since ``fork_point``."""
    if dep.series:
        patches = from_series(dep)
        state = checkout_in_sync(workspace, dep)
        if state is None:
            return patches, "series", series_as_commits(scratch, patches, dep.commit)
        by_name = {name: sha for sha, name in state.applied.items()}
        parent = dep.commit
        for patch in patches:
            patch.parent, patch.commit = parent, by_name[patch.name]
            parent = patch.commit
        return patches, "series", None
    if fork_point != dep.commit:
        return from_commits(scratch, dep.commit, [fork_point]), "fork commits", None
    return [], "none", None


def dependency_status(workspace: Workspace, dep: Dependency, offline: bool = False) -> DepStatus:
    """The dependency's patches classified against its tracked branch (fetched first unless
    ``offline``), reusing the last classification while its inputs are unchanged (classified.py)."""
    from datetime import UTC, datetime

    manifest = workspace.manifest
    upstream, tip = tracked_tip(manifest, dep.upstream_url, dep.track, offline)
    digest = classified.key(workspace, dep, upstream.path, tip)
    record = classified.load(workspace, dep, digest) if digest is not None else None
    found = None
    if record is not None:
        with contextlib.suppress(KeyError, TypeError, ValueError, IndexError):
            found = classified.from_record(record)
    if found is not None:
        base, origin, broken, verdicts, at = found
    else:
        at = datetime.now(UTC).isoformat(timespec="seconds")
        base, origin, broken, verdicts = _classify_dependency(workspace, dep, upstream, tip, offline)
        if digest is not None:
            classified.store(workspace, dep, digest, classified.to_record(base, origin, broken, verdicts, at))
    return DepStatus(dep.name, dep.upstream_url, dep.track, tip, mirrors.age_text(upstream.last_fetched()),
                     base, origin, verdicts, broken, last_build_verdicts(workspace, dep),
                     last_build_time(workspace), check_evidence(workspace, dep), classified_at=at, reused=found is not None)


def _classify_dependency(workspace: Workspace, dep: Dependency, upstream: mirrors.Mirror, tip: str,
                         offline: bool) -> tuple[Base, str, str | None, list[PatchVerdict]]:
    """(base, where the patches come from, first patch not applying on the base, verdicts)."""
    source = upstream if dep.source == dep.upstream_url else source_mirror(workspace.manifest, dep, offline)
    repos: list[Path] = [upstream.path, source.path]
    if workspace.fork_path(dep).is_dir():
        repos.append(workspace.fork_path(dep))
    with Scratch(repos) as scratch:
        fork_point = scratch.merge_base(dep.commit, tip) or ""
        if not fork_point:
            raise InputError(f"{dep.name}: {dep.commit[:12]} shares no history with {dep.upstream_url} {dep.track}",
                             hint="check `upstream`, `source` and `track` in deps.toml")
        own, behind = (int(n) for n in scratch.out("rev-list", "--left-right", "--count", END_OF_OPTIONS, f"{dep.commit}...{tip}").split())
        date = scratch.commit_date(dep.commit)
        base = Base(dep.commit, date, "upstream" if own == 0 else "fork", behind, own, fork_point)
        patches, origin, broken = carried_patches(workspace, dep, scratch, fork_point)
        # A series on a fork's commit is replayed after the fork's own commits, as a rebase
        # would; only the series is reported.
        own_commits = from_commits(scratch, dep.commit, [fork_point]) if origin == "series" and own else []
        verdicts = classify(scratch, own_commits + patches, fork_point, tip)[len(own_commits):] if patches else []
        open_ = [i for i, v in enumerate(verdicts) if v.status in (PatchStatus.LOCAL, PatchStatus.FORWARDED)]
        for i, number in in_pull_requests(upstream.path, scratch, patches, open_, tip).items():
            verdict = verdicts[i]
            verdict.url = pull_request_link(dep.upstream_url, number) or verdict.url  # else the Forwarded URL, if any
            verdict.status, verdict.how, verdict.note = PatchStatus.FORWARDED, Evidence.PULL_REQUEST, f"pull/{number}"
    return base, origin, broken, verdicts
