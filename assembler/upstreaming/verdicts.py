"""What `assemble patches` says of each carried patch and each dependency: the verdicts, the
evidence each rests on (``Evidence``), the per-dependency summary and the two release-table
columns ("migrated on fork / migrated upstream"). Data only: evidence_layers.py computes the
verdicts, classification_cache.py stores them, patches_report.py puts a report together."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from assembler.builder.evidence import BuildEvidence
from assembler.check.evidence import CheckEvidence
from assembler.migration.progress import MigrationProgress
from assembler.series.headers import PatchStatus


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
    NOT_CHECKED = "not checked"  # migrated on fork: no check or build of this pin + series yet


class Commit(NamedTuple):
    """An upstream commit a verdict names."""

    sha: str
    subject: str


class PatchVerdict:
    """One patch's status and what it rests on. Filled in by classify(), so mutable; a plain
    class, not a dataclass (see report.output.Settings: start-up)."""

    __slots__ = ("commit", "conflicts", "how", "migration", "name", "note", "on_target", "status", "subject", "url")

    def __init__(self, name: str, subject: str, status: PatchStatus | None, how: Evidence | None,
                 commit: Commit | None = None, url: str | None = None, note: str = "", on_target: str | None = None,
                 conflicts: list[str] | None = None, migration: bool = True) -> None:
        self.name = name
        self.subject = subject
        self.status = status  # None only while classify() fills it in
        self.how = how
        self.commit = commit  # the upstream commit that carries the change
        self.url = url  # from Forwarded
        self.note = note
        self.on_target = on_target  # trial replay outcome on the target (see replay.py)
        self.conflicts: list[str] = [] if conflicts is None else conflicts
        # migration work: its diff changes a line naming a torch API (classify.touches_torch_api)
        self.migration = migration

    def __repr__(self) -> str:
        return f"PatchVerdict({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"

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
                "on_target": self.on_target, "conflicts": self.conflicts, "migration": self.migration}


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


# -- per dependency ------------------------------------------------------------------------

class Base(NamedTuple):
    commit: str
    date: str
    on: str  # "upstream" (an ancestor of the tracked branch) or "fork"
    behind: int  # tracked-branch commits the base lacks
    own: int  # commits of the base that are not upstream (a fork's own work)
    fork_point: str = ""  # where the pin meets the tracked branch (the pin itself when on upstream)

    def to_json(self) -> dict[str, object]:
        return {"commit": self.commit, "date": self.date, "on": self.on, "behind": self.behind, "own_commits": self.own,
                "fork_point": self.fork_point}


def migration_on_fork(build: BuildEvidence | None, check: CheckEvidence | None,
                      broken_on_base: str | None) -> Migration:
    """"Migrated on fork", from evidence only (see DepStatus.migrated_on_fork): the one rule for
    `assemble patches` and `assemble status`."""
    if broken_on_base:
        return Migration.IN_PROGRESS
    build = build if build is not None and build.current else None  # another gate's word counts for nothing
    left = (build is not None and build.work_left) or (check is not None and check.work_left)
    proved = (build is not None and build.passes) or (check is not None and check.done)
    if proved and not left:
        return Migration.DONE
    if build is not None or check is not None:
        return Migration.IN_PROGRESS
    return Migration.NOT_CHECKED


class DepStatus(NamedTuple):
    name: str
    upstream: str
    track: str
    tip: str
    fetched: str  # how old the mirror is
    base: Base
    patches_from: str  # "series", "fork commits" or "none"
    verdicts: list[PatchVerdict]
    broken_on_base: str | None  # first series patch that does not apply on the pinned base
    build: BuildEvidence | None = None  # the last gated build of this pin + series + recipe (any workspace)
    check: CheckEvidence | None = None  # the last `assemble check` of this pin + series + recipe (any workspace)
    classified_at: str = ""  # when the verdicts were computed (ISO 8601, UTC)
    reused: bool = False  # the verdicts are the stored ones of that time: nothing they depend on changed since
    fetched_at: str | None = None  # when the upstream mirror was last fetched (ISO 8601, UTC); None: never
    # the last `assemble assess` of this pin + series + recipe (any workspace)
    progress: MigrationProgress | None = None

    @property
    def build_verdicts(self) -> tuple[str, ...] | None:
        return self.build.verdicts if self.build is not None else None

    def counts(self) -> dict[PatchStatus, int]:
        return {status: sum(v.status == status for v in self.verdicts) for status in PatchStatus}

    @property
    def conflicts_on_tip(self) -> list[str]:
        return [v.name for v in self.verdicts if v.conflicts]

    @property
    def migrated_on_fork(self) -> Migration:
        """Only evidence makes it done, about this pin + series + recipe from any workspace:
        the last `assemble check` found every translation unit CLEAN, or the last build's every
        extension passed this assembler's gate (the load check included) and none FAILed
        verify; and neither found work left (an UNSTABLE unit, a failing extension, a verify
        FAIL). in progress: work left, evidence that proves nothing (INCOMPLETE units), or a
        series that does not apply on its base; not checked: no such evidence, also when nothing
        is carried (the pinned source itself may still need the migration)."""
        return migration_on_fork(self.build, self.check, self.broken_on_base)

    @property
    def migration_evidence(self) -> str:
        """What the "migrated on fork" verdict rests on, in a few words."""
        parts = []
        if self.check is not None:
            parts.append(f"check: {self.check.summary}, {self.check.obtained[:10]}")
        if self.build is not None:
            parts.append(self.build.summary())
        if self.broken_on_base:
            parts.append(f"series does not apply from {self.broken_on_base}")
        return "; ".join(parts) or "no check or build of this pin and series"

    @property
    def migration_patches(self) -> list[PatchVerdict]:
        """The carried patches that are migration work (they change torch API lines) and meant
        for upstream (not not-needed): what "migrated upstream" counts."""
        return [v for v in self.verdicts if v.migration and v.status != PatchStatus.NOT_NEEDED]

    @property
    def migrated_upstream(self) -> Migration:
        """From what upstream contains. With migration patches: done when every one is found
        upstream, in progress when some are upstream or forwarded, no when none was sent. With
        none (nothing carried, or only changes that touch no torch API: a fork's sync or build
        commits are not migration work): upstream holds the migration exactly when the pinned
        source is migrated, so this follows "migrated on our side": done when a check or build
        of the pin is clean, no when it found work left, not checked without either."""
        relevant = [v.status for v in self.migration_patches]
        if relevant:
            if all(status == PatchStatus.UPSTREAM for status in relevant):
                return Migration.DONE
            if any(status in (PatchStatus.UPSTREAM, PatchStatus.FORWARDED) for status in relevant):
                return Migration.IN_PROGRESS
            return Migration.NO
        ours = self.migrated_on_fork
        return {Migration.DONE: Migration.DONE, Migration.IN_PROGRESS: Migration.NO}.get(ours, Migration.NOT_CHECKED)

    @property
    def upstream_evidence(self) -> str:
        """What the "migrated upstream" verdict rests on, in a few words."""
        patches = self.migration_patches
        if patches:
            upstream = sum(v.status == PatchStatus.UPSTREAM for v in patches)
            return f"{upstream} of {len(patches)} migration patches found upstream"
        carried = f"{len(self.verdicts)} carried, none a torch API change; " if self.verdicts else "no patches; "
        where = ("the upstream commit" if self.base.on == "upstream"
                 else f"fork point {self.base.fork_point[:12]} plus the fork's non-torch commits")
        return f"{carried}{where}: {self.migration_evidence}"

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name, "upstream": self.upstream, "track": self.track, "tip": self.tip,
            "mirror_fetched_at": self.fetched_at,
            "base": self.base.to_json(), "patches_from": self.patches_from,
            "counts": {str(k): n for k, n in self.counts().items()},
            "migrated_on_fork": self.migrated_on_fork, "migrated_upstream": self.migrated_upstream,
            "migrated_upstream_evidence": self.upstream_evidence,
            "broken_on_base": self.broken_on_base, "conflicts_on_tip": self.conflicts_on_tip,
            "build_verdicts": list(self.build_verdicts) if self.build_verdicts is not None else None,
            "migration_evidence": {
                "summary": self.migration_evidence,
                "check": self.check.to_json() if self.check is not None else None,
                "build": None if self.build is None else self.build.to_json(),
            },
            "patches": [v.to_json() for v in self.verdicts],
            "classified": {"at": self.classified_at, "reused": self.reused},
            "migration_progress": None if self.progress is None else self.progress.to_json(),
        }
