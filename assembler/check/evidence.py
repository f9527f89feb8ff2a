"""What the last `assemble check` proved about a dependency, for `assemble patches`.

Evidence counts only for the source that is pinned now: the check must have scanned the
checkout at the manifest's commit with the current series applied and nothing else (no local
commits, no uncommitted edits), under the current recipe and torch-target. Such a check is
published in the assembler cache keyed by pin, series and recipe (builder.evidence), so every
workspace reads the same. Reading it costs a few file reads and no compiler, git or torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from assembler.audit.gate import Verdict
from assembler.manifest import Dependency
from assembler.workspace import Workspace


class CheckEvidence(NamedTuple):
    dep: str
    clean: int  # translation units found CLEAN
    total: int  # translation units checked
    verdicts: dict[str, Verdict]  # unit (path in the checkout) -> CLEAN / UNSTABLE / NOT-LIMITED / INCOMPLETE
    obtained: str  # when the scans ran (ISO 8601, UTC)
    key: str  # the check's cache key
    torch: str  # the torch whose headers were read
    torch_target: str

    @property
    def done(self) -> bool:
        """Every unit CLEAN (and there is at least one)."""
        return self.total > 0 and self.clean == self.total

    @property
    def work_left(self) -> bool:
        """A unit is UNSTABLE or NOT-LIMITED: the migration is not done (INCOMPLETE proves nothing either way)."""
        return any(v in (Verdict.UNSTABLE, Verdict.NOT_LIMITED) for v in self.verdicts.values())

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


# Where `assemble check` keeps its results, and their format. Here rather than in check.run so
# that `assemble patches` reads the evidence without importing the checker.
RECORD_SCHEMA = 2


def record_path(dep: str, key: str, create: bool = False) -> Path:
    """``<cache>/checks/<dep>-<key>.json``: a check's result, in the user's cache, written by this
    machine. Never in the workspace: a workspace is data anyone can commit to, and the key is
    deterministic, so a record kept there could be forged to say CLEAN."""
    from assembler.cache import KINDS, cache_root

    return cache_root(create=create) / KINDS["checks"] / f"{dep}-{key}.json"


def recipe_digest(dep: Dependency) -> str:
    """The recipe as check reads it (a change of sources, include dirs or defines is a new
    check): the one evidence is keyed by (builder.evidence.recipe_digest)."""
    from assembler.builder.evidence import recipe_digest as digest

    return digest(dep)


def publish_check(workspace: Workspace, dep: Dependency, record: dict[str, Any]) -> None:
    """Publish a finished check (its workspace record) as the evidence about ``dep``'s pin,
    series and recipe, for every workspace, when it scanned exactly the pin plus the series."""
    from assembler.builder.evidence import CHECK, is_exactly_pinned, publish

    try:
        exact = record["commit"] == dep.commit and record["recipe"] == recipe_digest(dep) and is_exactly_pinned(
            workspace, dep, record["head"], record["series_head"], bool(record["dirty"]))
        if not exact:
            return
        publish(dep, CHECK, {
            "verdicts": {str(unit["source"]): Verdict(unit["verdict"]) for unit in record["result"]["units"]},
            "obtained": str(record["obtained"]), "check_key": str(record["key"]), "torch": str(record["torch"]),
            "torch_target": str(record["torch_target"]), "workspace": str(workspace.root),
        })
    except (KeyError, TypeError, ValueError):
        return


def check_evidence(workspace: Workspace, dep: Dependency) -> CheckEvidence | None:
    """The last check of ``dep``'s pinned commit plus its series under its recipe, from any
    workspace sharing the cache (builder.evidence); None when there is none."""
    from assembler.builder.evidence import CHECK, read_evidence

    record = read_evidence(dep, CHECK)
    if record is None:
        return None
    try:
        verdicts = {str(unit): Verdict(verdict) for unit, verdict in record["verdicts"].items()}
        return CheckEvidence(
            dep=dep.name, clean=sum(v == Verdict.CLEAN for v in verdicts.values()), total=len(verdicts),
            verdicts=verdicts, obtained=str(record["obtained"]), key=str(record["check_key"]),
            torch=str(record["torch"]), torch_target=str(record["torch_target"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
