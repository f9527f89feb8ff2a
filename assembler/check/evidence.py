"""What the last `assemble check` proved about a dependency, for `assemble patches`.

Evidence counts only for the source that is pinned now: the check must have scanned the
checkout at the manifest's commit with the current series applied and nothing else (no local
commits, no uncommitted edits), under the current recipe and torch-target. Reading it costs a
few file reads and no compiler, git or torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from assembler.audit.gate import Verdict
from assembler.errors import AssembleError
from assembler.manifest import Dependency
from assembler.workspace import Workspace


class CheckEvidence(NamedTuple):
    dep: str
    clean: int  # translation units found CLEAN
    total: int  # translation units checked
    verdicts: dict[str, str]  # unit (path in the checkout) -> CLEAN / UNSTABLE / NOT-LIMITED / INCOMPLETE
    obtained: str  # when the scans ran (ISO 8601, UTC)
    key: str  # the check's cache key
    torch: str  # the torch whose headers were read
    torch_target: str

    @property
    def done(self) -> bool:
        """Every unit CLEAN (and there is at least one)."""
        return self.total > 0 and self.clean == self.total

    @property
    def summary(self) -> str:
        return units_summary(self.clean, self.total)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": "assemble check", "clean": self.clean, "total": self.total, "verdicts": self.verdicts,
            "obtained": self.obtained, "key": self.key, "torch": self.torch, "torch_target": self.torch_target,
        }


def units_summary(clean: int, total: int) -> str:
    """How a check's result is said in a few words, by `assemble check` and by `patches`' evidence."""
    return f"{clean} of {total} translation units clean"


# Where `assemble check` keeps one record per dependency, and its format. Here rather than in
# check.run so that `assemble patches` reads the evidence without importing the checker.
CHECK_DIR = "check"
RECORD_SCHEMA = 1


def record_path(workspace: Workspace, dep: str) -> Path:
    return workspace.state_dir / CHECK_DIR / f"{dep}.json"


def recipe_digest(dep: Dependency) -> str:
    """The recipe as check reads it (a change of sources, include dirs or defines is a new check)."""
    from assembler.builder.cache import digest_texts

    return digest_texts(json.dumps(dep.build.to_dict(), sort_keys=True, default=str), dep.torch_target)


def check_evidence(workspace: Workspace, dep: Dependency) -> CheckEvidence | None:
    """The last check of ``dep`` when it scanned exactly the pinned commit plus the current
    series under the current recipe; None when there is none or it is about something else."""
    from assembler.git.state import pinned_state

    try:
        record = json.loads(record_path(workspace, dep.name).read_text())
    except (OSError, ValueError):
        return None
    try:
        state = pinned_state(workspace.fork_path(dep), dep)
    except AssembleError:  # an unreadable checkout state is no evidence; checkout reports it
        return None
    try:
        if (
            state is None or record["schema"] != RECORD_SCHEMA
            or record["commit"] != dep.commit or record["series"] != state.series_digest
            or not state.is_exactly_pin_and_series(record["head"], record["series_head"], bool(record["dirty"]))
            or record["recipe"] != recipe_digest(dep) or record["torch_target"] != dep.torch_target
        ):
            return None
        units = record["result"]["units"]
        verdicts = {str(unit["source"]): str(Verdict(unit["verdict"])) for unit in units}
        return CheckEvidence(
            dep=dep.name, clean=sum(v == Verdict.CLEAN for v in verdicts.values()), total=len(verdicts),
            verdicts=verdicts, obtained=str(record["obtained"]), key=str(record["key"]),
            torch=str(record["torch"]), torch_target=str(record["torch_target"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
