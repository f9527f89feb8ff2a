"""`assemble export DEP...`: write the checkout's commits back to patches/<dep>/."""

from __future__ import annotations

import argparse

from assembler.cli.common import add_format


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("export", help="write forks/<dep> commits back to patches/<dep>/ (low churn)")
    parser.add_argument("names", nargs="+", metavar="DEP", help="dependencies whose fork commits to export")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.cli.common import open_workspace
    from assembler.git.export import export_deps
    from assembler.report.output import console, emit_json, err_console

    results = export_deps(open_workspace(args), args.names)
    if args.json:
        emit_json({"deps": [{"name": r.dep, **vars(r)} for r in results]})  # "name", as in every command; "dep" kept
        return 0
    for r in results:
        console.print(
            f"{r.dep}: {len(r.written)} written, {len(r.unchanged)} unchanged, {len(r.removed)} removed"
            + (f" ({', '.join(r.written + r.removed)})" if r.changed else "")
        )
        if r.uncommitted:
            err_console.print(f"[yellow]note:[/] {r.dep} has uncommitted edits that were not exported: "
                              f"{', '.join(r.uncommitted)}")
    return 0
