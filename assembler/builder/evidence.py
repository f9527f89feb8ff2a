"""What the last build proved, for readers outside the build (`assemble patches`).

The build records its merge and audit in ``.assemble/last-merge.json``; this module owns that
file's name and reads the audit back, so nothing outside the builder reaches into the
pipeline's private state.
"""

from __future__ import annotations

import json
from pathlib import Path

from assembler.git.state import CheckoutState, is_up_to_date, series_digest
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
    from assembler.wheel.artifact import stored_artifact

    path = workspace.fork_path(dep)
    checkout = CheckoutState.load(path) if path.exists() else None
    artifact = stored_artifact(default_artifacts(workspace) / dep.name)
    if checkout is None or artifact is None or not is_up_to_date(checkout, dep, series_digest(dep)):
        return None
    if artifact.dirty or not artifact.head == artifact.series_head == checkout.head:
        return None
    try:
        audit = json.loads(merge_state_path(workspace).read_text())["audit"]
        return tuple(str(item["verdict"]) for item in audit[dep.name])
    except (OSError, ValueError, KeyError, TypeError):
        return None
