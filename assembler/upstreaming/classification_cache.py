"""A dependency's patch classification, kept for reuse while what it was computed from is unchanged.

Classifying a dependency's patches (classify.classify_dependency: the pin's base and every patch) takes ~15 git
processes: merge-base, a cherry-mark walk, a trial replay per patch. Everything it reads is named by
content: the pin, the tracked branch's tip, the series' bytes, the upstream mirror's
pull-request refs and, when the checkout holds the series as commits, those commits. The
result is stored under a key over exactly these and reused while the key is the same, so an
unchanged `assemble patches --offline` starts no git process to classify (issue 12's start-up
budget). What is not classification is read fresh every time: the mirror's age, the last
build's audit, the last `assemble check`.

The record lives in the user cache, ``classifications/<key>.json`` (the key names everything
it was computed from, so it is found from any workspace), never in the workspace: a record a
pull request added there could claim a patch is upstream. Writing it is best effort (a
read-only cache still gets its answer, computed); the newest KEPT are kept. A record that does
not parse, or whose key differs, is ignored and rewritten.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assembler import __version__
from assembler.fsutil import sha256
from assembler.git.mirrors import PULL_NAMESPACE
from assembler.git.reproducible import refs_under
from assembler.git.state import pinned_state, series_digest

if TYPE_CHECKING:
    from assembler.manifest import Dependency
    from assembler.upstreaming.verdicts import Base, PatchVerdict
    from assembler.workspace import Workspace

FORMAT = 2  # of the record; bump it when evidence_layers.py decides differently: older records are then recomputed
DIRECTORY = "classifications"  # in the user cache
KEPT = 256  # records kept, the most recently written


def key(workspace: Workspace, dep: Dependency, upstream_mirror: Path, tip: str) -> str | None:
    """The digest of everything the classification reads; None when part of it cannot be read
    without git (a reftable mirror): then nothing is reused."""
    pulls = refs_under(upstream_mirror, PULL_NAMESPACE)
    if pulls is None:
        return None
    state = pinned_state(workspace.fork_path(dep), dep)
    inputs = {
        "format": FORMAT, "assembler": __version__, "name": dep.name, "upstream": dep.upstream_url,
        "source": dep.source, "track": dep.track, "commit": dep.commit, "tip": tip,
        "series": series_digest(dep), "pull_refs": pulls,
        "checkout": None if state is None else {"head": state.head, "applied": sorted(state.applied.items())},
    }
    return sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def record_path(digest: str, create: bool = False) -> Path:
    """Where the classification of key ``digest`` is kept (OSError when there is no cache)."""
    from assembler.cache import cache_root

    return cache_root(create) / DIRECTORY / f"{digest}.json"


def load(digest: str) -> dict[str, Any] | None:
    """The stored classification when its key is ``digest``, else None."""
    try:
        record = json.loads(record_path(digest).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("key") != digest:
        return None
    return record


def store(digest: str, record: dict[str, Any]) -> None:
    """Keep ``record`` under ``digest`` (atomically; silently not when the cache is read-only)."""
    from assembler.fsutil import atomic_write

    try:
        path = record_path(digest, create=True)
        path.parent.mkdir(exist_ok=True)
        atomic_write(path, json.dumps({"format": FORMAT, "key": digest, **record}, indent=1) + "\n")
        kept = sorted(path.parent.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[KEPT:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


def to_record(base: Base, patches_from: str, broken_on_base: str | None, verdicts: list[PatchVerdict],
              at: str) -> dict[str, Any]:
    return {
        "at": at, "base": base.to_json(), "patches_from": patches_from, "broken_on_base": broken_on_base,
        "verdicts": [{"name": v.name, "subject": v.subject, "status": v.status, "how": v.how,
                      "commit": None if v.commit is None else [v.commit.sha, v.commit.subject], "url": v.url,
                      "note": v.note, "on_target": v.on_target, "conflicts": v.conflicts, "migration": v.migration}
                     for v in verdicts],
    }


def from_record(record: dict[str, Any]) -> tuple[Base, str, str | None, list[PatchVerdict], str]:
    """(base, patches_from, broken_on_base, verdicts, when classified) of a stored record; a
    ValueError/KeyError/TypeError when it is not one (the caller recomputes)."""
    from assembler.series.headers import PatchStatus
    from assembler.upstreaming.verdicts import Base, Commit, Evidence, PatchVerdict

    b = record["base"]
    base = Base(str(b["commit"]), str(b["date"]), str(b["on"]), int(b["behind"]), int(b["own_commits"]),
                str(b["fork_point"]))
    verdicts = [
        PatchVerdict(str(v["name"]), str(v["subject"]), PatchStatus(v["status"]), Evidence(v["how"]),
                     None if v["commit"] is None else Commit(str(v["commit"][0]), str(v["commit"][1])),
                     v["url"], str(v["note"]), v["on_target"], [str(c) for c in v["conflicts"]], bool(v["migration"]))
        for v in record["verdicts"]
    ]
    broken = record["broken_on_base"]
    return base, str(record["patches_from"]), None if broken is None else str(broken), verdicts, str(record["at"])
