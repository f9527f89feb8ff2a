"""`assemble patches [DEP...]`: which carried patches are upstream, forwarded, local or
not needed, with the evidence, and the release table "migrated on fork / migrated upstream"."""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from assembler.upstreaming.status import DepStatus


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("patches", help="status of each carried patch against the tracked upstream branch")
    parser.add_argument("names", nargs="*", metavar="DEP")
    parser.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    parser.add_argument("--offline", action="store_true", help="use the mirrors as last fetched (says how old they are)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.report.output import emit_json, err_console
    from assembler.upstreaming.status import dependency_status
    from assembler.workspace import open_workspace

    workspace = open_workspace(args.workspace)
    results = []
    for dep in workspace.manifest.select(args.names):
        with err_console.status(f"{dep.name}: checking patches against {dep.track}", spinner="dots") if args.format == "table" else nullcontext():
            results.append(dependency_status(workspace, dep, offline=args.offline))
    if args.format == "json":
        emit_json({"workspace": str(workspace.root), "offline": args.offline, "deps": [r.to_json() for r in results]})
    elif args.format == "markdown":
        print(markdown(results), end="")
    else:
        for result in results:
            print_table(result, args.offline)
    return 0


def summary_line(status: DepStatus) -> str:
    from assembler.report.output import short

    base = status.base
    where = f"{base.on} {short(base.commit)} ({base.date[:10]})"
    own = f", {base.own} own commits" if base.own else ""
    counts = ", ".join(f"{n} {s}" for s, n in status.counts().items() if n) or "no patches"
    return f"base {where}{own}, {base.behind} commits behind {status.track}; {counts}"


def print_table(status: DepStatus, offline: bool) -> None:
    from rich.markup import escape
    from rich.table import Table

    from assembler.report.output import console, short
    from assembler.upstreaming.status import STATUSES

    mirror = f" (offline: mirror {status.fetched})" if offline else ""
    console.print(f"[bold]{escape(status.name)}[/]: {escape(summary_line(status))}{escape(mirror)}")
    console.print(f"  migrated on fork: {status.migrated_on_fork}; migrated upstream: {status.migrated_upstream}"
                  + (f"; series does not apply on its base from {status.broken_on_base}" if status.broken_on_base else "")
                  + (f"; conflicts on {short(status.tip)}: {', '.join(status.conflicts_on_tip)}" if status.conflicts_on_tip else ""),
                  markup=False)
    if not status.verdicts:
        return
    table = Table(show_edge=False, pad_edge=False)
    for column in ("patch", "subject", "status", "evidence"):
        table.add_column(column, overflow="fold")
    colours = dict(zip(STATUSES, ("green", "yellow", "red", "blue"), strict=True))
    for v in status.verdicts:
        table.add_row(escape(v.name), escape(v.subject), f"[{colours[v.status]}]{v.status}[/]", escape(v.evidence()))
    console.print(table)


def _cell_upstream(status: DepStatus) -> str:
    counts = status.counts()
    relevant = len(status.verdicts) - counts["not-needed"]
    links = [f"[{v.name}]({v.url})" for v in status.verdicts if v.status == "forwarded" and v.url]
    if status.migrated_upstream in ("n.a.", "no") and not links:
        return status.migrated_upstream
    detail = f"{counts['upstream']} of {relevant} upstream"
    if counts["forwarded"]:
        detail += f", {counts['forwarded']} forwarded" + (f": {', '.join(links)}" if links else "")
    return f"{status.migrated_upstream} ({detail})"


def _cell_fork(status: DepStatus) -> str:
    from assembler.report.output import short

    if status.migrated_on_fork == "n.a.":
        return "n.a."
    return f"{status.migrated_on_fork} ({len(status.verdicts)} patches on {short(status.base.commit)})"


def markdown(results: list[DepStatus]) -> str:
    """The release-post table: dependency | migrated on fork | migrated upstream."""
    lines = ["| dependency | migrated on fork | migrated upstream |", "| --- | --- | --- |"]
    for status in results:
        cells = (status.name, _cell_fork(status), _cell_upstream(status))
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
