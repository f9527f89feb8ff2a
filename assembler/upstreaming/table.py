"""The words `assemble patches` prints for a dependency: its summary lines, and the release
table a release post carries (dependency | migrated on fork | migrated upstream). Here rather
than in the CLI so that other reports (and tests) get the same text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from assembler.report.output import clean, short
from assembler.series.headers import PatchStatus
from assembler.upstreaming.verdicts import DepStatus, Evidence, Migration, PatchVerdict

if TYPE_CHECKING:
    from assembler.errors import AssembleError


def plural(count: int, noun: str) -> str:
    """"1 patch", "2 patches", "0 commits"."""
    if count == 1:
        return f"1 {noun}"
    return f"{count} {noun}es" if noun.endswith(("ch", "sh", "s", "x")) else f"{count} {noun}s"


def summary_line(status: DepStatus) -> str:
    """The pin (when, on upstream or a fork's own commits), the fork point where it meets the
    tracked branch when that is another commit, how far behind, and the count of each status."""
    base = status.base
    pin = f"pin {short(base.commit)} ({base.date[:10]}, {'on upstream' if base.on == 'upstream' else 'a fork commit'})"
    fork = (f", {plural(base.own, 'own commit')} since fork point {short(base.fork_point)}"
            if base.own and base.fork_point and base.fork_point != base.commit else "")
    counts = ", ".join(f"{n} {s}" for s, n in status.counts().items() if n) or "no patches"
    behind = "up to date with" if base.behind == 0 else f"{plural(base.behind, 'commit')} behind"
    return f"{pin}{fork}, {behind} {status.track}; {counts}"


def migration_line(status: DepStatus) -> str:
    """The two release-table verdicts, and what keeps them from "done"."""
    line = (f"migrated on fork: {status.migrated_on_fork} ({status.migration_evidence}); "
            f"migrated upstream: {status.migrated_upstream} ({status.upstream_evidence})")
    if status.conflicts_on_tip:
        line += f"; conflicts on {short(status.tip)}: {', '.join(status.conflicts_on_tip)}"
    return line


def progress_line(status: DepStatus) -> str:
    """The migration progress `assemble assess` counted on this pin + series (migration/progress.py)."""
    if status.progress is None:
        return f"migration progress: not assessed (`assemble assess {status.name}`)"
    return f"migration progress: {status.progress.text}"


def _row(cells: tuple[str, ...]) -> str:
    """One Markdown table row; a cell's control characters are escaped (report.output.clean)."""
    return "| " + " | ".join(clean(cell).replace("|", "\\|") for cell in cells) + " |"


def markdown(results: list[DepStatus], failures: Mapping[str, AssembleError] | None = None,
             order: list[str] | None = None) -> str:
    """The release-post table (dependency | migrated on fork | migrated upstream), then one
    table per dependency with each patch's status, evidence and link. A dependency that could
    not be reported (``failures``) keeps its row, saying so with its error, and its section
    says what failed; ``order`` (the manifest's) places the rows."""
    failed = dict(failures or {})
    by_name = {status.name: status for status in results}
    names = [name for name in (order or [*by_name, *failed]) if name in by_name or name in failed]
    lines = ["| dependency | migrated on fork | migrated upstream |", "| --- | --- | --- |"]
    for name in names:
        if name in failed:
            lines.append(_row((name, f"{Migration.NOT_CHECKED} (error: {failed[name].message})",
                               str(Migration.NOT_CHECKED))))
        else:
            lines.append(_row((name, _cell_fork(by_name[name]), _cell_upstream(by_name[name]))))
    for name in names:
        if name in failed:
            error = failed[name]
            lines += ["", f"### {clean(name)}", "", clean(f"error: {error.message}").replace("|", "\\|")]
            if error.hint:
                lines.append(clean(f"hint: {error.hint}").replace("|", "\\|"))
            continue
        status = by_name[name]
        lines += ["", f"### {status.name}", "", clean(summary_line(status)).replace("|", "\\|"), "",
                  clean(progress_line(status)).replace("|", "\\|")]
        if not status.verdicts:
            continue
        lines += ["", "| patch | subject | status | evidence | link |", "| --- | --- | --- | --- | --- |"]
        for v in status.verdicts:
            link = f"[{_link_label(v.url)}]({v.url})" if v.url else ""
            lines.append(_row((f"`{v.name}`", v.subject, str(v.status), _evidence_cell(v), link)))
    return "\n".join(lines) + "\n"


def _evidence_cell(verdict: PatchVerdict) -> str:
    if verdict.commit is not None:
        return f"{verdict.how}: `{short(verdict.commit.sha)}` {verdict.commit.subject}"
    if verdict.how == Evidence.PULL_REQUEST:
        return f"{verdict.how}: {verdict.note}"
    return f"{verdict.how}: {verdict.note}" if verdict.note else str(verdict.how)


def _link_label(url: str) -> str:
    """"pull/151" for a forge's pull-request URL, else the URL's last two parts."""
    parts = url.rstrip("/").split("/")
    return "/".join(parts[-2:]) if len(parts) >= 2 else url


def _cell_fork(status: DepStatus) -> str:
    if status.migrated_on_fork == Migration.NOT_APPLICABLE:
        return Migration.NOT_APPLICABLE
    carried = f"{plural(len(status.verdicts), 'patch')} on {short(status.base.commit)}; " if status.verdicts else ""
    return f"{status.migrated_on_fork} ({carried}{status.migration_evidence})"


def _cell_upstream(status: DepStatus) -> str:
    """The verdict, then how many patches are upstream and links to those forwarded."""
    patches = status.migration_patches
    if not patches:  # nothing carried is migration work: it rests on the pinned source's evidence
        return f"{status.migrated_upstream} ({status.upstream_evidence})"
    upstream = sum(v.status == PatchStatus.UPSTREAM for v in patches)
    forwarded = [v for v in patches if v.status == PatchStatus.FORWARDED]
    links = [f"[{v.name}]({v.url})" for v in forwarded if v.url]
    if status.migrated_upstream == Migration.NO and not links:
        return status.migrated_upstream
    detail = f"{upstream} of {len(patches)} upstream"
    if forwarded:
        detail += f", {len(forwarded)} forwarded" + (f": {', '.join(links)}" if links else "")
    return f"{status.migrated_upstream} ({detail})"
