"""What the workspace's checks and builds left behind, for readers outside them: `assemble
patches` (the evidence of "migrated on our side") and `assemble cache prune --keep` (the cache
entries in use).

**Evidence is keyed by what it is about**, the pinned source, the series' content and the
recipe (``evidence_key``), and kept in the assembler cache (``<cache>/evidence/<dep>/``), not in
one workspace: the same pin and series read the same evidence in every workspace that shares
the cache. Only a check or build of exactly the pin plus the series (no local commits, no
edits) is published. A build's evidence is its gate verdicts with the code of the audit that
gave them, and the verify results when it ran ``--verify``: it proves the migration only when
every verdict passes the gate (``audit.gate.passes``: the load check included), no verify
FAILed, and the audit is this assembler's.

**What a build records about one workspace** (its last merge and audit, the compile commands
of each dependency's last build) is kept in the user's cache too, under
``<cache>/workspaces/<digest of the workspace's path>/`` (``workspace_records``), written only by
this machine's builds. Never in the workspace: a workspace is data anyone can commit to, with
``.assemble/`` and ``dist/`` included, and these records' keys are deterministic, so a record
there could say an audit passed that never ran, or leave units out of `check`. This module owns
the records' place, so nothing outside the builder reaches into the pipeline's private state.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from assembler.cache import KINDS, cache_root
from assembler.errors import AssembleError
from assembler.git.state import pinned_state
from assembler.manifest import Dependency
from assembler.workspace import Workspace

if TYPE_CHECKING:
    from assembler.audit.gate import GateVerdict

MERGE_STATE = "last-merge.json"  # in workspace_records
EVIDENCE_SCHEMA = 1
CHECK, BUILD = "check", "build"  # the two kinds of evidence
ASSESS = "assess"  # what `assemble assess` counted (migration/progress.py): not a verdict, the progress line


def recipe_digest(dep: Dependency) -> str:
    """The recipe as evidence is keyed by it (a change of sources, include dirs, flags or
    defines, or of torch-target, is evidence about something else)."""
    from assembler.fsutil import digest_texts

    return digest_texts(json.dumps(dep.build.to_dict(), sort_keys=True, default=str), dep.torch_target)


def evidence_key(dep: Dependency) -> str | None:
    """What evidence about ``dep`` is about: its source repository and pinned commit, the
    content of its series, its recipe. None when the series cannot be read (no evidence then)."""
    from assembler.fsutil import digest_texts
    from assembler.git.state import series_digest

    try:
        series = series_digest(dep)
    except OSError:
        return None
    return digest_texts(dep.source, dep.commit, series, recipe_digest(dep))


def evidence_path(dep: Dependency, kind: str, key: str, root: Path | None = None) -> Path:
    return (root or cache_root(create=False)) / KINDS["evidence"] / dep.name / f"{key}-{kind}.json"


def publish(dep: Dependency, kind: str, record: dict[str, Any]) -> None:
    """Keep ``record`` as the evidence of ``kind`` about ``dep``'s pin, series and recipe, for
    every workspace (written atomically; a read-only cache keeps none)."""
    from assembler.fsutil import atomic_write

    key = evidence_key(dep)
    if key is None:
        return
    document = {"schema": EVIDENCE_SCHEMA, "kind": kind, "dep": dep.name, "key": key, "commit": dep.commit, **record}
    path = evidence_path(dep, kind, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(document, indent=2, sort_keys=True) + "\n")
    except OSError:
        pass


def read_evidence(dep: Dependency, kind: str) -> dict[str, Any] | None:
    """The evidence of ``kind`` about exactly ``dep``'s pin, series and recipe, else None."""
    key = evidence_key(dep)
    if key is None:
        return None
    try:
        record = json.loads(evidence_path(dep, kind, key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("schema") != EVIDENCE_SCHEMA or record.get("key") != key:
        return None
    return record


def is_exactly_pinned(workspace: Workspace, dep: Dependency, head: str | None, series_head: str | None,
                      dirty: bool) -> bool:
    """Whether a run that saw ``head`` (``series_head`` what the series produced, ``dirty``)
    ran on exactly the pinned commit plus the series: what may be published as evidence."""
    try:
        state = pinned_state(workspace.fork_path(dep), dep)
    except AssembleError:
        return False
    return state is not None and state.is_exactly_pin_and_series(head, series_head, dirty)


@functools.cache
def audit_digest() -> str:
    """The code of the audit and its gate: build evidence counts only when this assembler's
    gate gave it (a newer gate may fail what an older one passed, as the load check does)."""
    from assembler.fsutil import digest_texts

    audit = Path(__file__).resolve().parent.parent / "audit"
    return digest_texts(*(path.read_bytes() for path in sorted(audit.glob("*.py"))))


class BuildEvidence(NamedTuple):
    """What the last gated build of a pin + series said of its extensions."""

    gate: tuple[GateVerdict, ...]  # the gate's verdict of each extension
    obtained: str  # when (ISO 8601, UTC)
    current: bool  # given by this assembler's audit and gate (else it proves nothing)
    verify_failed: tuple[str, ...] = ()  # torch versions on which `--verify` FAILed
    verified: tuple[str, ...] = ()  # ... and on which it passed
    workspace: str = ""  # where the build ran

    @property
    def passes(self) -> bool:
        """Every extension passes the gate (the load check included), none FAILed verify, and
        it is this gate's word."""
        return self.current and bool(self.gate) and all(v.passes for v in self.gate) and not self.verify_failed

    @property
    def work_left(self) -> bool:
        """An extension fails the gate, or verify FAILed: the migration is not done."""
        return self.current and (any(not v.passes for v in self.gate) or bool(self.verify_failed))

    @property
    def verdicts(self) -> tuple[str, ...]:
        """Each extension's verdict as its text (``UNSTABLE+NON-ABI3``), as `patches` prints it."""
        return tuple(str(v) for v in self.gate)

    def summary(self) -> str:
        verdicts = ", ".join(sorted(set(self.verdicts))) or "no extension"
        parts = [f"build audit: {verdicts}"]
        if self.verify_failed:
            parts.append(f"verify FAIL on torch {', '.join(self.verify_failed)}")
        elif self.verified:
            parts.append(f"verify PASS on torch {', '.join(self.verified)}")
        if not self.current:
            parts.append("by another assembler's gate: rebuild to count")
        return ", ".join(parts) + f", {self.obtained[:10]}"

    def to_json(self) -> dict[str, Any]:
        return {"source": "audit of the last build", "verdicts": list(self.verdicts), "obtained": self.obtained,
                "current": self.current, "verify_failed": list(self.verify_failed), "verified": list(self.verified),
                "workspace": self.workspace, "passes": self.passes}


def publish_build(workspace: Workspace, dep: Dependency, artifact: Path, verdicts: Sequence[GateVerdict],
                  verified: Sequence[str] = (), verify_failed: Sequence[str] = ()) -> None:
    """Publish a gated build's verdicts as evidence, when its artifact is of exactly the pin plus
    the series (``artifact``: its directory)."""
    from datetime import UTC, datetime

    from assembler.wheel.artifact import stored_artifact

    record = stored_artifact(artifact)
    if (record is None or record.commit != dep.commit
            or not is_exactly_pinned(workspace, dep, record.head, record.series_head, record.dirty)):
        return
    publish(dep, BUILD, {
        "gate": [verdict.record() for verdict in verdicts], "audit": audit_digest(),
        "verified": list(verified), "verify_failed": list(verify_failed),
        "obtained": datetime.now(UTC).isoformat(timespec="seconds"), "workspace": str(workspace.root),
    })


def build_evidence(dep: Dependency) -> BuildEvidence | None:
    """The evidence of the last gated build of ``dep``'s pin, series and recipe, from any workspace."""
    from assembler.audit.gate import GateVerdict

    record = read_evidence(dep, BUILD)
    if record is None:
        return None
    try:
        return BuildEvidence(
            tuple(GateVerdict.from_record(v) for v in record["gate"]), str(record["obtained"]),
            record["audit"] == audit_digest(),
            tuple(str(v) for v in record["verify_failed"]), tuple(str(v) for v in record["verified"]),
            str(record["workspace"]),
        )
    except (KeyError, TypeError, ValueError):  # not this format (an older assembler's): no evidence
        return None


def default_artifacts(workspace: Workspace) -> Path:
    """Where `assemble build` keeps artifacts unless --artifacts says otherwise."""
    return workspace.state_dir / "artifacts"


def workspace_records(root: Path, create: bool = False) -> Path:
    """``<cache>/workspaces/<digest>/``: what this machine's builds recorded about the workspace at
    ``root`` (keyed by its real path, so ``-C`` spellings agree and a copy starts afresh)."""
    from assembler.fsutil import digest_texts

    return cache_root(create=create) / KINDS["workspaces"] / digest_texts(str(root.resolve()))[:32]


def merge_state_path(workspace: Workspace) -> Path:
    """The last merge and audit of the workspace's build (builder.pipeline), in the user's cache."""
    return workspace_records(workspace.root) / MERGE_STATE


def workspace_keys(workspace: Workspace, root: Path | None = None) -> list[Path]:
    """The entries the workspace at hand uses (``prune --keep``): its dependencies' mirrors,
    the artifacts its last build materialized, the CUDA toolkits those were built with, the
    environments of its [bundle] torch and verify-torch, the evidence and its own records."""
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
    keep.append(root / KINDS["evidence"])
    keep.append(root / KINDS["workspaces"] / workspace_records(workspace.root).name)
    labels = {f"verify-torch{version}" for version in manifest.bundle.verify_torch}
    if manifest.bundle.torch:
        labels.add(f"build-torch{manifest.bundle.torch}")
    for kind, prefixes in (("environments", labels), ("toolchains", {f"cuda-{cuda}" for cuda in cudas})):
        base = root / KINDS[kind]
        if base.is_dir():
            keep += [path for path in base.iterdir() if path.name.rsplit("-", 1)[0] in prefixes]
    return keep
