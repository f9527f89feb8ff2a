"""`assemble patches [DEP...]`: which carried patches are upstream, forwarded, local or
not needed, with the evidence, and the release table "migrated on fork / migrated upstream"."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from assembler.cli.common import add_format

if TYPE_CHECKING:
    from assembler.upstreaming.verdicts import DepStatus, PatchVerdict


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("patches", help="status of each carried patch against the tracked upstream branch")
    parser.add_argument("names", nargs="*", metavar="DEP", help="dependencies to report (default: all)")
    add_format(parser, markdown=True)
    parser.add_argument("--offline", action="store_true",
                        help="use the mirrors as last fetched (says how old they are)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.cli.common import failures_json, open_workspace, print_failures
    from assembler.report.output import DeferredStatus, emit_json
    from assembler.upstreaming.patches_report import dependency_status

    workspace = open_workspace(args)
    from assembler.errors import AssembleError

    results = []
    failures: dict[str, AssembleError] = {}  # keep going: one unreachable mirror does not hide the others
    for dep in workspace.manifest.select(args.names):
        # The spinner (and rich with it) only for slow work: a fetch, or a classification that has
        # to be computed; an unchanged offline report is printed before a spinner would be seen.
        with DeferredStatus(f"{dep.name}: checking patches against {dep.track}",
                            active=args.format == "table") as spinner:
            if not args.offline:
                spinner.start()
            try:
                results.append(dependency_status(workspace, dep, offline=args.offline, on_classify=spinner.start))
            except AssembleError as failed:
                failures[dep.name] = failed
    if failures and not results and args.format != "markdown":  # the release table lists failures too
        raise next(iter(failures.values()))
    code = int(next(iter(failures.values())).exit_code) if failures else 0
    print_failures(failures)
    if args.format == "json":
        emit_json({"schema": 2, "workspace": str(workspace.root), "offline": args.offline,
                   "deps": [r.to_json() for r in results],
                   "failures": failures_json(failures)})
    elif args.format == "markdown":
        from assembler.upstreaming.table import markdown

        print(markdown(results, failures, [dep.name for dep in workspace.manifest.select(args.names)]), end="")
    else:
        for result in results:
            print_table(result, args.offline)
    return code


def print_table(status: DepStatus, offline: bool) -> None:
    """The dependency's summary lines, then one row per patch (not rich: see report.table).

    Wide enough (or piped without COLUMNS: a row a line, for grep), a row is the patch file,
    subject, status and evidence. Narrower (80 columns), the file name (up to 64 characters,
    git format-patch's limit) cannot share its line and is never cut: the row is the patch's
    number (what `assemble show DEP 0002` takes), status and subject, and the file name and the
    evidence are lines of their own under it, as `git log --stat` puts the files under a commit."""
    import sys

    from assembler.report.table import Cell, TextTable, clean, is_terminal, layout, paint, paragraph, write
    from assembler.series.headers import PatchStatus
    from assembler.series.seriesfile import patch_label
    from assembler.upstreaming.table import migration_line, progress_line, summary_line

    width, colour = layout(sys.stdout)
    mirror = f" (offline: mirror {status.fetched})" if offline else ""
    name = paint(clean(status.name), "bold") if colour else clean(status.name)
    summary = paragraph(f"{status.name}: {summary_line(status)}{mirror}", width, hang="  ")
    if colour:
        summary = summary.replace(clean(status.name), name, 1)
    write(summary + paragraph(f"  {migration_line(status)}", width, hang="    ")
          + paragraph(f"  {progress_line(status)}", width, hang="    "))
    if not status.verdicts:
        return
    colours = {PatchStatus.UPSTREAM: "green", PatchStatus.FORWARDED: "yellow", PatchStatus.LOCAL: "red",
               PatchStatus.NOT_NEEDED: "blue"}

    def status_cell(v: PatchVerdict) -> Cell:
        return Cell(str(v.status), colours[v.status] if v.status is not None else "red")

    # file names are never cut
    table = TextTable("patch", "subject", "status", "evidence", text=("subject", "evidence"), edge=False)
    for v in status.verdicts:
        table.add_row(v.name, v.subject, status_cell(v), v.evidence())
    if not table.fits(width, plain=not is_terminal(sys.stdout)):
        names = [v.name for v in status.verdicts]
        table = TextTable("patch", "status", "subject", text=("subject",), edge=False, notes_at="status")
        for v in status.verdicts:
            table.add_row(patch_label(names, v.name), status_cell(v), v.subject,
                          notes=[Cell(v.name, "dim"), v.evidence()])
    table.print()
