"""The evidence layers behind each verdict of `assemble patches`, cheapest first:

1. ``Applied-Upstream: commit:<sha>`` whose commit is an ancestor of the target;
2. the same ``git patch-id --stable`` as an upstream commit since the fork point (git's
   cherry-pick detection marks the candidates in one walk; one ``git log -p | git patch-id``
   pipe pairs them up when both sides have several);
3. a trial replay onto the target: the patch applies empty, or conflicts but reverse-applies
   (squash merges and rewritten-on-merge patches land here);
4. otherwise its ``Forwarded`` header says forwarded (a PR URL), local (no) or not-needed;
   a pull request of the upstream mirror carrying the same patch-id makes it forwarded.

Imported only when a classification is computed (status.dependency_status, rebase).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from assembler.errors import InputError
from assembler.git import mirrors
from assembler.git.history import (
    cherry_marks,
    diff_patch_ids,
    left_right_counts,
    patch_ids_between,
    patch_ids_of,
    subjects,
)
from assembler.git.process import GitView
from assembler.git.scratch import Scratch
from assembler.manifest import Dependency
from assembler.series.headers import PatchStatus, forwarded_status
from assembler.upstreaming.horizon import ChainProbe, first_parent_chain
from assembler.upstreaming.patchset import (
    Patch,
    checkout_in_sync,
    from_commits,
    from_series,
    load_diffs,
    series_as_commits,
)
from assembler.upstreaming.replay import APPLIES, EMPTY, REVERSE, reverse_applies, trial
from assembler.upstreaming.verdicts import Base, Commit, Evidence, PatchVerdict, pull_request_link
from assembler.workspace import Workspace

_MAX_PATHSPEC = 2000
# A changed line that names a torch API: its headers (torch/, ATen/, c10/), namespaces, the
# shim (aoti_torch_*), the registration macros, Tensor, or the pybind11 binding the Stable ABI replaces.
TORCH_API = re.compile(rb"torch[/:_.]|\bATen\b|\bc10\b|\bat::|\baoti_torch|\bTORCH_|\bTensor\b|pybind11|PYBIND11"
                       rb"|\bPy_LIMITED_API\b")


def touches_torch_api(diff: bytes) -> bool:
    """Whether a patch is migration work: a line it adds or removes names a torch API. A fork's
    sync commits, build scripts or kernels that touch none are not (see DepStatus.migrated_upstream)."""
    for line in diff.splitlines():
        if line[:1] in (b"+", b"-") and not line.startswith((b"+++ ", b"--- ")) and TORCH_API.search(line):
            return True
    return False


# -- layers --------------------------------------------------------------------------------

def describe(scratch: GitView, shas: list[str]) -> dict[str, Commit]:
    """Full SHA and subject of each (possibly abbreviated) commit, in one ``git log``."""
    unique = list(dict.fromkeys(shas))
    if not unique:
        return {}
    return {sha: Commit(full, text) for sha, (full, text) in zip(unique, subjects(scratch, unique), strict=True)}


def patch_ids(scratch: GitView, patches: list[Patch]) -> dict[str, int]:
    """patch-id -> index of our patch, from the diffs themselves (one ``git patch-id``)."""
    return diff_patch_ids(scratch, [p.diff for p in patches])


def _pathspec(patches: list[Patch]) -> list[str]:
    """Our patches' files: an upstream commit whose diff on those paths equals a patch carries
    that patch, whatever else it changes; and ``git log -p`` stays cheap on big histories."""
    paths = sorted({name for p in patches for name in p.files})
    return paths if len(paths) <= _MAX_PATHSPEC else []


def known_upstream(scratch: GitView, patches: list[Patch], since: str,
                   target: str) -> dict[int, tuple[Evidence, Commit]]:
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
        upstream = {pid: sha for sha, pid in patch_ids_between(scratch, since, target, _pathspec(patches))}
        matched = {i: upstream[pid] for i, pid in ours.items() if pid in upstream}
        commits = describe(scratch, list(matched.values()))
        return {i: commits[sha] for i, sha in matched.items()}
    index = {p.commit: i for i, p in enumerate(patches)}
    marks = cherry_marks(scratch, target, patches[-1].commit or "")
    mine: list[str] = []
    candidates: dict[str, Commit] = {}  # newest first
    for mark, sha, subject in marks:
        if mark == "=":
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
    for sha, pid in patch_ids_of(scratch, [*mine, *candidates]):
        if sha in index:
            ours[index[sha]] = pid
        else:
            theirs[pid] = candidates[sha]
    return {i: theirs[pid] for i, pid in ours.items() if pid in theirs}


def in_pull_requests(upstream: Path, scratch: GitView, patches: list[Patch], indices: list[int],
                     target: str) -> dict[int, int]:
    """Patch index -> the lowest-numbered pull request (fetched by the mirror under
    refs/assemble/pull/) that has a commit with the patch's patch-id, not yet in ``target``."""
    if not indices or not mirrors.has_pull_requests(upstream):
        return {}
    chosen = [patches[i] for i in indices]
    load_diffs(scratch, chosen)
    ours = {pid: indices[k] for pid, k in patch_ids(scratch, chosen).items()}
    found: dict[int, int] = {}
    pairs = mirrors.pull_request_patch_ids(upstream, target, _pathspec(chosen))
    for sha, pid in pairs:
        index = ours.get(pid)
        if index is None or index in found:
            continue
        numbers = mirrors.pull_requests_containing(upstream, sha)
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
        verdict = PatchVerdict(patch.name, patch.subject, None, None, on_target=replayed.outcomes[i],
                               conflicts=replayed.conflicts.get(i, []))
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


def carried_patches(workspace: Workspace, dep: Dependency, scratch: Scratch,
                    fork_point: str) -> tuple[list[Patch], str, str | None]:
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


def classify_dependency(workspace: Workspace, dep: Dependency, upstream: mirrors.Mirror, source: mirrors.Mirror,
                        tip: str) -> tuple[Base, str, str | None, list[PatchVerdict]]:
    """(base, where the patches come from, first patch not applying on the base, verdicts) of
    ``dep``'s patches against ``tip`` of its ``upstream`` mirror (``source``: the mirror holding the pin)."""
    repos: list[Path] = [upstream.path, source.path]
    if workspace.fork_path(dep).is_dir():
        repos.append(workspace.fork_path(dep))
    with Scratch(repos) as scratch:
        fork_point = scratch.merge_base(dep.commit, tip) or ""
        if not fork_point:
            raise InputError(f"{dep.name}: {dep.commit[:12]} shares no history with {dep.upstream_url} {dep.track}",
                             hint="check `upstream`, `source` and `track` in deps.toml")
        own, behind = left_right_counts(scratch, dep.commit, tip)
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
        load_diffs(scratch, patches)
        for verdict, patch in zip(verdicts, patches, strict=True):
            verdict.migration = patch.diff is None or touches_torch_api(patch.diff)  # no diff to read: counted
    return base, origin, broken, verdicts
