"""`assemble review DEP [PATCH...]`: every hunk of a migration series judged by the token
criterion (format only, API-only, or FLAGGED with the tokens that differ) and by a compile of
the series' result (a hunk whose lines do not compile is FLAGGED with the compiler's message);
exit 1 while a flagged hunk is not acknowledged by a ``Migration-Review:`` trailer."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from assembler.cli.common import add_format, open_workspace

if TYPE_CHECKING:
    from assembler.migration.review import Hunk, ReviewReport


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("review",
                                   help="token review of a migration series: flags hunks that change more than the "
                                        "torch API")
    parser.add_argument("dep", metavar="DEP", help="the dependency whose series is reviewed")
    parser.add_argument("patches", nargs="*", metavar="PATCH", help="patch files of the series (default: all of them)")
    parser.add_argument("--no-compile", action="store_true",
                        help="judge the tokens only; do not compile the series' result in forks/DEP")
    add_format(parser, markdown=True)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from assembler.migration.review import compile_series, run_review
    from assembler.report.output import emit_json, note

    workspace = open_workspace(args)
    dep = workspace.manifest.select([args.dep])[0]
    report = run_review(dep.name, dep.patches_dir, dep.series, list(args.patches))
    if args.no_compile:
        report.compile.reason = "not asked to (--no-compile)"
    else:
        compile_series(report, workspace, dep, note)
    if args.format == "json":
        emit_json(report.to_json())
    else:
        sys.stdout.write(render(report, markdown=args.format == "markdown", base=f"forks/{dep.name}/"))
    return report.exit_code


def render(report: ReviewReport, markdown: bool, base: str = "") -> str:
    """One table per patch: each hunk, its verdict, the tokens that differ, the acknowledgement."""
    from assembler.migration.review import HunkVerdict
    from assembler.report.table import TextTable

    out: list[str] = []
    tables: dict[int, TextTable] = {}  # where each table goes in ``out``: drawn at the end, all in one style
    for patch in report.patches:
        counts = {v: sum(1 for h in patch.hunks if h.verdict is v) for v in HunkVerdict}
        if markdown:
            out.append(f"## {patch.patch}: {patch.subject}")
        else:  # the file name whole on its line, the subject wrapped under it where a width is known (80 columns)
            import sys

            from assembler.report.table import layout, paragraph

            out.append(paragraph(f"{patch.patch}: {patch.subject}", layout(sys.stdout)[0], hang="  ").rstrip("\n"))
        out.append("")
        counted = (f"{len(patch.hunks)} hunks: {counts[HunkVerdict.API]} API-only, {counts[HunkVerdict.FORMAT]} "
                   f"format/comment only, {counts[HunkVerdict.FLAGGED]} flagged ({len(patch.unacknowledged)} not "
                   "acknowledged)")
        out.append(counted if markdown else _wrapped(counted))
        out.append("")
        if not patch.hunks:
            out += ["no C/C++/CUDA hunks", ""]
            continue
        rows = [["hunk", "verdict", "removed tokens", "added tokens", "acknowledged"]]
        for hunk in patch.hunks:
            name = f"[{hunk.id}]({base}{hunk.file}#L{hunk.new_start})" if markdown else f"{hunk.id} (+{hunk.new_start})"
            rows.append([name, hunk.verdict.words, *_token_cells(hunk), hunk.acknowledged or ""])
        if markdown:
            out.append("| " + " | ".join(rows[0]) + " |")
            out.append("|" + "---|" * len(rows[0]))
            out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows[1:]]
        else:
            # the acknowledgement on a line of its own under its row: five columns do not fit 80
            table = TextTable(*rows[0][:4], text=("hunk", "verdict", "removed tokens", "added tokens"),
                              notes_at="removed tokens")
            for row in rows[1:]:
                table.add_row(*row[:4], notes=[f"acknowledged: {row[4]}"] if row[4] else [])
            tables[len(out)] = table
            out.append("")
        for hunk in patch.hunks:
            if hunk.compile_error is not None:
                line = f"{hunk.id} does not compile: {hunk.compile_error}"
                out.append(f"- {line.replace('|', chr(92) + '|')}" if markdown else _wrapped(line))
        for ack in patch.unknown_acknowledgements:
            unknown = f"Migration-Review: {ack}: names no hunk of this patch (write FILE#N or FILE:LINE)"
            out.append(f"- {unknown}" if markdown else _wrapped(unknown))
        out.append("")
    if tables:  # fitted to stdout: boxes on a terminal where every table fits boxed, else plain columns
        from assembler.report.table import texts_for

        for at, text in zip(tables, texts_for(list(tables.values())), strict=True):
            out[at] = text
    out.append(_wrapped(compile_line(report)))
    flagged = sum(len(p.unacknowledged) for p in report.patches)
    out.append(f"{report.dep}: {flagged} flagged hunks not acknowledged" if flagged
               else f"{report.dep}: every hunk is API-only, "
               "format-only or acknowledged")
    return "\n".join(out) + "\n"


def _token_cells(hunk: Hunk) -> list[str]:
    """The removed and added tokens; a hunk that only moved them says so, rather than print the
    same tokens twice (``FLAGGED  in  in``); a hunk flagged by the compile alone says that."""
    removed, added = " ".join(hunk.removed_tokens), " ".join(hunk.added_tokens)
    if hunk.reordered and removed:
        return [removed, "(the same tokens, in another order)"]
    if not removed and not added and hunk.compile_error is not None:
        return ["", "(does not compile: below)"]
    return [removed, added]


def compile_line(report: ReviewReport) -> str:
    """What the compile of the series' result covered, or why it did not run."""
    check = report.compile
    if not check.compiled:
        return f"not compiled: {check.reason}"
    bad = sum(1 for p in report.patches for h in p.hunks if h.compile_error is not None)
    text = (f"compiled: {len(check.units)} units of the series' result as the build compiles them "
            f"({sum(1 for unit in check.units if unit['ok'])} compile; {bad} hunks do not)")
    for item in check.not_proven:
        text += f"; not proven: {item['unit']}: {item['error']}"
    return text


def _wrapped(text: str) -> str:
    """One note, wrapped between words at stdout's width (80 columns when piped)."""
    import sys

    from assembler.report.table import layout, paragraph

    return paragraph(text, layout(sys.stdout)[0], hang="  ").rstrip("\n")
