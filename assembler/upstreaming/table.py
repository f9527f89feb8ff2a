"""The words `assemble patches` prints for a dependency: its summary lines, and the release
table a release post carries (dependency | migrated on fork | migrated upstream). Here rather
than in the CLI so that other reports (and tests) get the same text."""

from __future__ import annotations

from assembler.report.output import short
from assembler.series.headers import PatchStatus
from assembler.upstreaming.status import DepStatus, Migration


def summary_line(status: DepStatus) -> str:
    """Base (where, when, own commits, how far behind) and the count of each status."""
    base = status.base
    where = f"{base.on} {short(base.commit)} ({base.date[:10]})"
    own = f", {base.own} own commits" if base.own else ""
    counts = ", ".join(f"{n} {s}" for s, n in status.counts().items() if n) or "no patches"
    return f"base {where}{own}, {base.behind} commits behind {status.track}; {counts}"


def migration_line(status: DepStatus) -> str:
    """The two release-table verdicts, and what keeps them from "done"."""
    line = (f"migrated on fork: {status.migrated_on_fork} ({status.migration_evidence}); "
            f"migrated upstream: {status.migrated_upstream}")
    if status.conflicts_on_tip:
        line += f"; conflicts on {short(status.tip)}: {', '.join(status.conflicts_on_tip)}"
    return line


def markdown(results: list[DepStatus]) -> str:
    """The release-post table: dependency | migrated on fork | migrated upstream."""
    lines = ["| dependency | migrated on fork | migrated upstream |", "| --- | --- | --- |"]
    for status in results:
        cells = (status.name, _cell_fork(status), _cell_upstream(status))
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def _cell_fork(status: DepStatus) -> str:
    if status.migrated_on_fork == Migration.NOT_APPLICABLE:
        return Migration.NOT_APPLICABLE
    carried = f"{len(status.verdicts)} patches on {short(status.base.commit)}; " if status.verdicts else ""
    return f"{status.migrated_on_fork} ({carried}{status.migration_evidence})"


def _cell_upstream(status: DepStatus) -> str:
    """The verdict, then how many patches are upstream and links to those forwarded."""
    counts = status.counts()
    relevant = len(status.verdicts) - counts[PatchStatus.NOT_NEEDED]
    links = [f"[{v.name}]({v.url})" for v in status.verdicts if v.status == PatchStatus.FORWARDED and v.url]
    if status.migrated_upstream in (Migration.NOT_APPLICABLE, Migration.NO) and not links:
        return status.migrated_upstream
    detail = f"{counts[PatchStatus.UPSTREAM]} of {relevant} upstream"
    if counts[PatchStatus.FORWARDED]:
        detail += f", {counts[PatchStatus.FORWARDED]} forwarded" + (f": {', '.join(links)}" if links else "")
    return f"{status.migrated_upstream} ({detail})"
