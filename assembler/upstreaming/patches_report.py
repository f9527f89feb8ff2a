"""`assemble patches` for one dependency: the tracked branch's tip (fetched unless offline), the
classification of its carried patches, reused while nothing it was computed from changed
(classification_cache.py) and else computed (evidence_layers.py, imported only then: an unchanged report starts
no git process), and the evidence of the last check and build, read fresh."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from assembler.builder.evidence import build_evidence
from assembler.check.evidence import check_evidence
from assembler.errors import InputError, NetworkError
from assembler.git import mirrors
from assembler.git.reproducible import read_ref
from assembler.manifest import Dependency, Manifest
from assembler.migration.progress import read_progress
from assembler.upstreaming import classification_cache
from assembler.upstreaming.verdicts import DepStatus
from assembler.workspace import Workspace

# -- mirrors -----------------------------------------------------------------------------

def resolve(mirror: mirrors.Mirror, ref: str) -> str | None:
    """A branch of the mirrored repository, a tag, or a commit; None if the mirror lacks it.
    A branch is read from its ref file (no git process: this runs on every rebase)."""
    branch = read_ref(mirror.path, f"refs/remotes/origin/{ref}")
    if branch is not None:
        return branch
    from assembler.git.process import GitView

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
    if sha is None and (unfetchable := mirrors.not_fetched(mirror, ref, offline)) is not None:
        raise unfetchable
    if sha is None:
        with contextlib.suppress(NetworkError):
            mirrors.fetch(mirror, [ref])
        sha = resolve(mirror, ref)
    if sha is None:
        raise InputError(f"{url} has no branch, tag or commit {ref}",
                         hint="check `track` in deps.toml (or the REF given)")
    return mirror, sha


def source_mirror(manifest: Manifest, dep: Dependency, offline: bool) -> mirrors.Mirror:
    """The mirror of ``dep.source`` holding the pinned commit (fetched when it lacks it, unless
    offline). Asked also when the source is the upstream: a fetch of its branches does not
    bring a pin that is on none of them, and classifying without it says "shares no history"."""
    mirror = mirrors.open_mirror(manifest, dep.source)
    if mirror.has(dep.commit):
        return mirror
    unfetchable = mirrors.not_fetched(mirror, f"commit {dep.commit[:12]}", offline)
    if unfetchable is not None:
        raise unfetchable
    return mirrors.ensure_commit(manifest, dep.source, dep.commit)[0]


def dependency_status(workspace: Workspace, dep: Dependency, offline: bool = False,
                      on_classify: Callable[[], None] = lambda: None) -> DepStatus:
    """The dependency's patches classified against its tracked branch (fetched first unless
    ``offline``), reusing the last classification while its inputs are unchanged (classification_cache.py);
    ``on_classify`` is told when it has to be computed (seconds, where reuse takes milliseconds)."""
    from datetime import UTC, datetime

    manifest = workspace.manifest
    upstream, tip = tracked_tip(manifest, dep.upstream_url, dep.track, offline)
    digest = classification_cache.key(workspace, dep, upstream.path, tip)
    record = classification_cache.load(digest) if digest is not None else None
    found = None
    if record is not None:
        with contextlib.suppress(KeyError, TypeError, ValueError, IndexError):
            found = classification_cache.from_record(record)
    if found is not None:
        base, origin, broken, verdicts, at = found
    else:
        at = datetime.now(UTC).isoformat(timespec="seconds")
        on_classify()
        from assembler.upstreaming.evidence_layers import classify_dependency

        source = source_mirror(manifest, dep, offline)
        base, origin, broken, verdicts = classify_dependency(workspace, dep, upstream, source, tip)
        if digest is not None:
            classification_cache.store(digest, classification_cache.to_record(base, origin, broken, verdicts, at))
    return DepStatus(dep.name, dep.upstream_url, dep.track, tip, mirrors.age_text(upstream.last_fetched()),
                     base, origin, verdicts, broken, build_evidence(dep), check_evidence(workspace, dep),
                     classified_at=at, reused=found is not None,
                     fetched_at=_utc(upstream.last_fetched()), progress=read_progress(dep))


def _utc(timestamp: float | None) -> str | None:
    """A Unix time as ISO 8601 UTC (the JSON's timestamps), None for none."""
    if timestamp is None:
        return None
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")
