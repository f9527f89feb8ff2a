"""`assemble migrate DEP [--style FILE] [--dry-run]`: the mechanical part of a Stable-ABI
migration as commits on assemble/DEP (one per step), with a report of what is left by
file:line, the compile proof of every rewritten file (what does not compile is not committed)
and check's verdict before and after."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from assembler.cli.common import add_format, open_workspace

if TYPE_CHECKING:
    from assembler.migration.migrate import MigrateReport


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("migrate",
                                   help="rewrite a dependency mechanically towards the Stable ABI, one commit per step")
    parser.add_argument("dep", metavar="DEP", help="the dependency whose checkout is migrated (forks/DEP)")
    parser.add_argument("--style", metavar="FILE", type=Path,
                        help='per-project choices, a TOML file: data-ptr = "const-mutable" | "mutable"')
    parser.add_argument("--dry-run", action="store_true", help="print each step's diff; write and commit nothing")
    parser.add_argument("--no-check", action="store_true", help="do not run `assemble check` before and after")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from assembler.migration.migrate import read_style, run_migrate
    from assembler.report.output import clean_block, emit_json, note, status

    workspace = open_workspace(args)
    style = read_style(args.style)
    with status("migrating", active=args.format == "table"):
        report = run_migrate(workspace, args.dep, style, dry_run=args.dry_run, check=not args.no_check, note=note)
    if args.format == "json":
        emit_json(report.to_json())
        return 0
    out: list[str] = []
    for step in report.steps:
        commit = step.commit[:12] if step.commit else "(dry run)"
        out.append(f"{commit} {step.subject}")
        if report.dry_run:
            out.append(step.diff)
    if not report.steps:
        out.append(f"{report.dep}: nothing to rewrite mechanically")
    for item in report.declined:
        out.append(f"declined {item['at']}: {item['rewrite']}: {item['reason']}")
    for item in report.remaining:
        branch = ", on a line this build does not compile" if item.get("compiled") is False else ""
        out.append(f"left {item['at']}: {item['api']} ({item['kind']}{branch}): {item['approach']}")
    out += proof_lines(report)
    if report.formatted_with is not None:
        out.append(f"formatted: the touched lines only, in the style of {report.formatted_with} (clang-format --lines)")
    out += [f"warning: not formatted: {error}" for error in report.format_errors]
    if report.before is not None and report.after is not None:
        out.append(f"check: {report.before.clean} of {report.before.total} units CLEAN before "
                   f"({report.before.verdict}), {report.after.clean} of {report.after.total} after "
                   f"({report.after.verdict}): {report.went_clean} went from UNSTABLE to CLEAN")
    if not report.dry_run and report.steps:
        out.append(f"next: review with `assemble review {report.dep}` after `assemble export {report.dep}`")
    sys.stdout.write(clean_block("\n".join(_fitted(out, report.dry_run))) + "\n")  # the fork's paths and reasons: data
    return 0


def _fitted(lines: list[str], dry_run: bool) -> list[str]:
    """Each report line wrapped between words at stdout's width (80 columns at COLUMNS=80),
    its continuation indented; a table is already fitted, a dry run's diff is the fork's text."""
    import sys

    from assembler.report.table import layout, paragraph

    width = layout(sys.stdout)[0]
    out = []
    for line in lines:
        if "\n" in line or (dry_run and line.startswith(("---", "+++", "@@", "+", "-", " "))):
            out.append(line)  # a fitted table, or a diff
        else:
            out.append(paragraph(line, width, hang="    ").rstrip("\n"))
    return out


def proof_lines(report: MigrateReport) -> list[str]:
    """What the compile proof found: how many rewritten files compile, the rewrites not committed
    (work for a person: a table of the file, the compiler's first error and the unit it came
    from), the unstable includes kept, and the files nothing could prove."""
    proof = report.proof
    if not proof.compiled:
        return [f"proof: {proof.reason}"] if proof.reason else []
    out = [f"proof: {len(proof.proven)} of {proof.changed} rewritten files proven to compile, "
           f"{len(proof.not_committed)} not committed ({len(proof.units)} units compiled, {proof.seconds:.1f} s)"]
    if proof.not_committed:
        from assembler.report.table import TextTable

        table = TextTable("file", "first error", "unit", text=("first error",),
                          title="not committed, work for a person: the rewritten file does not compile")
        for item in proof.not_committed:
            table.add_row(item["file"], f"{item['at']}: {item['error']}", item["unit"])
        out.append(table.text_for().rstrip("\n"))
    if proof.not_committed and proof.first_errors:
        out.append(f"the first compile, every file rewritten ({len(proof.first_errors)} errors: what is left before "
                   "any of them can be committed):")
        out += [f"  {item['at']}: {item['error']} ({item['unit']})" for item in proof.first_errors]
    for item in proof.includes_kept:
        out.append(f"kept the unstable includes of {item['file']}: {item['unit']} does not compile without them "
                   f"({item['at']}: {item['error']})")
    out += [f"not proven {item['file']}: {item['reason']}" for item in proof.not_proven]
    if proof.unbuilt is not None:
        probe = proof.unbuilt["probe"]
        names = ", ".join(proof.unbuilt["rewrites"])
        out.append(f"{proof.unbuilt['rewritten']} {names} rewritten on lines this build does not compile, "
                   f"literal messages only (probe compiled, {probe['seconds']:.1f} s)" if probe["ok"] else
                   f"{names} left on lines this build does not compile: the probe did not compile ({probe['error']})")
    return out
