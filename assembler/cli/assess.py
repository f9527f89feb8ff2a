"""`assemble assess DEP...`: the inventory of LibTorch uses a Stable-ABI migration has to
convert, from the units the recipe builds under the build's defines."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from assembler.cli.common import add_format, non_negative_int, open_workspace, torch_version

if TYPE_CHECKING:
    from assembler.migration.assess import AssessReport


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("assess",
                                   help="inventory of every LibTorch use to migrate, with its stable equivalent")
    parser.add_argument("names", nargs="*", metavar="DEP", help="dependencies to assess (default: all)")
    parser.add_argument("--torch", metavar="VERSION", type=torch_version,
                        help="torch whose headers are read (default: [bundle] torch)")
    parser.add_argument("--jobs", "-j", type=non_negative_int, default=0, metavar="N",
                        help="translation units preprocessed at once (default 0: one per CPU)")
    add_format(parser, markdown=True)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.migration.assess import run_assess
    from assembler.report.output import emit_json, note, status

    workspace = open_workspace(args)
    with status("assessing translation units", active=args.format == "table"):
        report = run_assess(workspace, list(args.names), jobs=args.jobs, torch=args.torch, note=note)
    if args.format == "json":
        emit_json(report.to_json())
    else:
        import sys

        sys.stdout.write(render(report, markdown=args.format == "markdown"))
    return report.exit_code


def render(report: AssessReport, markdown: bool) -> str:
    """The inventory for people: per dependency the summary, then one table per family. Text is
    fitted to stdout: the summary wrapped between words, the tables all boxed or all plain."""
    import sys

    from assembler.report.table import TextTable, layout, paragraph, texts_for

    width = None if markdown else layout(sys.stdout)[0]
    data = report.to_json()
    out: list[str] = []
    tables: dict[int, TextTable] = {}  # where each table goes in ``out``: drawn at the end, in one style
    head = "## " if markdown else ""

    def said(text: str, hang: str = "  ") -> str:
        return text if markdown else paragraph(text, width, hang).rstrip("\n")

    for assessed, dep in zip(report.deps, data["deps"], strict=True):
        name = dep["name"]
        if dep.get("error"):
            out += [said(f"{head}{name}: not assessed: {dep['error']['message']}"), ""]
            continue
        s, py = dep["summary"], dep["pybind11"]
        kinds = s["kinds"]
        floor = s["torch_floor"] or "none"
        raise_note = f" (above torch-target {dep['torch_target']}: raise it)" if s["raises_torch_target"] else ""
        out += [
            said(f"{head}{name}: {s['uses']} uses of {s['apis']} APIs in {s['files']} files ({dep['seconds']:.1f} s, "
                 f"rules {data['rules_version']}, torch {data['torch']})"),
            "",
            said(f"- {kinds['mechanical']} mechanical, {kinds['judgment']} need judgment, {kinds['none']} have no "
                 "stable equivalent"),
            said(f"- torch floor of the migration: {floor}{raise_note}"
                 + (f", set by {', '.join(s['floor_set_by'])}" if s["floor_set_by"] else "")),
            said(f"- pybind11: {py['modules']} modules"
                 + (f" (and {py['helpers']} functions they are handed to)" if py["helpers"] else "")
                 + f", {py['defs']} m.def, {py['args']} py::arg, {py['tuple_parameters']} tuple parameters, "
                 f"{py['tuple_returns']} tuple returns, {py['reference_scalars']} scalars by reference (int&)"),
            said(f"- progress: {assessed.progress(report.ruleset).text}"),
            "",
        ]
        for family in dep["families"]:
            out.append(said(f"{'### ' if markdown else ''}{family['family']} ({family['count']}): "
                            f"{family['description']}", ""))
            out.append("")
            rows = [["API", "uses", "stable equivalent", "since", "kind", "where"]]
            for api in family["apis"]:
                stable = api["stable"] or f"none: {api['way_round']}"
                if api["hazard"]:
                    stable += f" (hazard: {api['hazard']})"
                rows.append([api["api"], str(api["count"]), stable, api["since"] or "-", api["kind"],
                             _where(api["uses"], "," if markdown else ", ")])
            if markdown:
                out += _markdown(rows)
            else:
                # the API wraps; its stable equivalent and where it is used go under its row, across the
                # table (as columns they were squeezed: one cell over 12 lines, a table of 223 columns)
                table = TextTable("API", "uses", "since", "kind", text=("API",), right=("uses",))
                for api_name, count, stable, since, kind, where in rows[1:]:
                    table.add_row(api_name, count, since, kind, notes=[f"stable: {stable}", f"where: {where}"])
                tables[len(out)] = table
                out.append("")
            out.append("")
    for at, text in zip(tables, texts_for(list(tables.values())), strict=True):
        out[at] = text.rstrip("\n")
    return "\n".join(out) + ("\n" if out else "")


def _where(uses: list[dict[str, object]], comma: str = ",") -> str:
    """``file:l1,l2 other:l3``: each file once, its lines in order, each line once (``comma``
    ", " for people: a long list wraps between its lines)."""
    lines: dict[str, list[str]] = {}
    for use in uses:
        file, _, line = str(use["at"]).rpartition(":")
        if line not in lines.setdefault(file, []):
            lines[file].append(line)
    return " ".join(f"{file}:{comma.join(numbers)}" for file, numbers in lines.items())


def _markdown(rows: list[list[str]]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")
    lines = ["| " + " | ".join(cell(c) for c in rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows[1:]]
