"""The migration progress line `assemble assess` and `assemble patches` share: "k of n units
clean, m uses left (j need judgment)", computed in one place (``migration_progress``) from an
assess that ran, and said with that run (``ProgressEvidence``).

`assess` publishes what it counted as evidence (``builder.evidence``, kind ``assess``) when it
read exactly the pinned commit plus the series, so `patches` prints the same line from the same
numbers without preprocessing anything: reading it costs one file read. Evidence of another
rules version counts for nothing (a newer rule set may count other uses).

A unit is clean here when no LibTorch use is on a line it compiles and it preprocessed
without error; the CLEAN verdict of `check` is another proof and is printed beside it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from assembler.migration.rules import Kind

if TYPE_CHECKING:
    from assembler.manifest import Dependency

SOURCE = "assemble assess"


class ProgressEvidence(NamedTuple):
    """The assess run the numbers come from (NamedTuples here: `patches` builds them at start-up)."""

    obtained: str  # when it ran (ISO 8601, UTC)
    head: str  # the commit of the checkout it read
    torch: str  # whose headers decided the active lines
    rules_version: str

    @property
    def words(self) -> str:
        return f"{SOURCE} of {self.head[:12]} at {self.obtained}, torch {self.torch}, rules {self.rules_version}"

    def to_json(self) -> dict[str, Any]:
        return {"source": SOURCE, "obtained": self.obtained, "head": self.head, "torch": self.torch,
                "rules_version": self.rules_version}


class MigrationProgress(NamedTuple):
    units_clean: int
    units: int
    uses: int
    judgment: int  # uses that are not mechanical: they need judgment or have no stable equivalent
    evidence: ProgressEvidence

    @property
    def line(self) -> str:
        return (f"{self.units_clean} of {self.units} units clean, {self.uses} uses left "
                f"({self.judgment} need judgment)")

    @property
    def text(self) -> str:
        """The line with the run it comes from, as both commands print it."""
        return f"{self.line} ({self.evidence.words})"

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "units_clean": self.units_clean, "units": self.units, "uses": self.uses,
                "judgment": self.judgment, "evidence": self.evidence.to_json()}


def migration_progress(units_clean: Iterable[bool], use_kinds: Iterable[Kind],
                       evidence: ProgressEvidence) -> MigrationProgress:
    """The one computation of the progress: each unit's cleanliness, each use's kind."""
    clean = list(units_clean)
    kinds = list(use_kinds)
    return MigrationProgress(sum(clean), len(clean), len(kinds), sum(kind is not Kind.MECHANICAL for kind in kinds),
                             evidence)


def evidence_record(units_clean: Iterable[bool], use_kinds: Iterable[Kind],
                    evidence: ProgressEvidence) -> dict[str, Any]:
    """What assess publishes: the inputs of ``migration_progress``, not its result."""
    counts = {kind.value: 0 for kind in Kind}
    for kind in use_kinds:
        counts[kind.value] += 1
    return {"units_clean": [bool(c) for c in units_clean], "use_kinds": counts, **evidence.to_json()}


def read_progress(dep: Dependency) -> MigrationProgress | None:
    """The progress the last assess of ``dep``'s pin + series + recipe counted, from any
    workspace sharing the cache; None when none ran (or under other rules)."""
    from assembler.builder.evidence import ASSESS, read_evidence
    from assembler.migration.rules import load_rules

    record = read_evidence(dep, ASSESS)
    if record is None:
        return None
    try:
        evidence = ProgressEvidence(str(record["obtained"]), str(record["head"]), str(record["torch"]),
                                    str(record["rules_version"]))
        if evidence.rules_version != load_rules().version:
            return None
        kinds = [Kind(kind) for kind, count in record["use_kinds"].items() for _ in range(int(count))]
        return migration_progress([bool(c) for c in record["units_clean"]], kinds, evidence)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def publish_progress(dep: Dependency, record: dict[str, Any]) -> None:
    from assembler.builder.evidence import ASSESS, publish

    publish(dep, ASSESS, record)
