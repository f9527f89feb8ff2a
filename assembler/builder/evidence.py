"""What the workspace's builds left behind, for readers outside the build: `assemble patches`
(the last build's audit) and `assemble cache prune --keep` (the cache entries in use).

The build records its merge and audit in ``.assemble/last-merge.json``; this module owns that
file's name and reads the audit back, so nothing outside the builder reaches into the
pipeline's private state.
"""

from __future__ import annotations

import json
from pathlib import Path

from assembler.cache import KINDS, cache_root
from assembler.errors import AssembleError
from assembler.git.state import pinned_state
from assembler.manifest import Dependency
from assembler.workspace import Workspace

MERGE_STATE = "last-merge.json"


def default_artifacts(workspace: Workspace) -> Path:
    """Where `assemble build` keeps artifacts unless --artifacts says otherwise."""
    return workspace.state_dir / "artifacts"


def merge_state_path(workspace: Workspace) -> Path:
    return workspace.state_dir / MERGE_STATE


def last_build_verdicts(workspace: Workspace, dep: Dependency) -> tuple[str, ...] | None:
    """The audit verdicts of ``dep``'s extensions in the last merged wheel, when that build
    compiled exactly the pinned commit plus the current series (no local work); else None, for
    "not built" and "built from something else" alike. `assemble patches` reports them."""
    root = default_artifacts(workspace) / dep.name
    if not root.is_dir():  # never built: no need to load the artifact reader
        return None
    try:
        checkout = pinned_state(workspace.fork_path(dep), dep)
    except AssembleError:  # an unreadable checkout state is no evidence; checkout reports it
        return None
    if checkout is None:
        return None
    from assembler.wheel.artifact import stored_artifact

    artifact = stored_artifact(root)
    if artifact is None or not checkout.is_exactly_pin_and_series(artifact.head, artifact.series_head, artifact.dirty):
        return None
    try:
        audit = json.loads(merge_state_path(workspace).read_text())["audit"]
        return tuple(str(item["verdict"]) for item in audit[dep.name])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def last_build_time(workspace: Workspace) -> str | None:
    """When the last merge and audit ran (ISO 8601, UTC), for the evidence `patches` shows."""
    from datetime import UTC, datetime

    try:
        mtime = merge_state_path(workspace).stat().st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(mtime, UTC).isoformat(timespec="seconds")


def workspace_keys(workspace: Workspace, root: Path | None = None) -> list[Path]:
    """The entries the workspace at hand uses (``prune --keep``): its dependencies' mirrors,
    the artifacts its last build materialized, the CUDA toolkits those were built with, and
    the environments of its [bundle] torch and verify-torch."""
    from assembler.git.mirrors import mirror_path
    from assembler.wheel.artifact import stored_artifact

    root = root or cache_root()
    manifest = workspace.manifest
    keep: list[Path] = []
    cudas: set[str] = set()
    for dep in manifest.deps.values():
        keep += [mirror_path(manifest, url) for url in {dep.source, dep.upstream} if url]
        artifact = stored_artifact(default_artifacts(workspace) / dep.name)
        if artifact is not None:
            keep.append(root / KINDS["artifacts"] / dep.name / artifact.key)
            if artifact.toolchain.get("cuda"):
                cudas.add(str(artifact.toolchain["cuda"]))
    labels = {f"verify-torch{version}" for version in manifest.bundle.verify_torch}
    if manifest.bundle.torch:
        labels.add(f"build-torch{manifest.bundle.torch}")
    for kind, prefixes in (("environments", labels), ("toolchains", {f"cuda-{cuda}" for cuda in cudas})):
        base = root / KINDS[kind]
        if base.is_dir():
            keep += [path for path in base.iterdir() if path.name.rsplit("-", 1)[0] in prefixes]
    return keep
