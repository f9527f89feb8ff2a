"""`assemble plan --matrix [--json]`: the release as a CI matrix (``builder.matrix``): one entry per
dependency with its artifact key, whether a store holds it, and its estimated compile cost."""

from __future__ import annotations

import argparse

from assembler.cli.common import add_format, cuda_version, torch_version


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "plan", help="the release as a GitHub Actions matrix: one job per dependency, with keys and costs",
        description="Check out, resolve the toolchain, and print one entry per dependency: its artifact key, whether the "
        "local or the shared store ([cache] artifacts) has it, and its estimated compile cost. With --json the output "
        "is a strategy.matrix document, {\"include\": [...]}, for fromJSON().",
    )
    parser.add_argument("--matrix", action="store_true", required=True, help="plan the CI fan-out (the only kind of plan)")
    parser.add_argument("--cuda", metavar="X.Y", type=cuda_version, required=True, help="CUDA toolkit version the jobs build with (part of each key)")
    parser.add_argument("--torch", metavar="VERSION", type=torch_version, help="torch to build against (default: [bundle] torch)")
    parser.add_argument("--only", action="append", default=[], metavar="DEP", help="plan just this dependency (repeatable)")
    add_format(parser)  # json: the strategy.matrix document alone (cli.main leaves out the envelope)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from assembler.builder.matrix import matrix_document, plan_matrix
    from assembler.cli.common import open_workspace
    from assembler.report.output import add_columns, console, emit_json, err_console

    workspace = open_workspace(args)
    entries = plan_matrix(workspace, args.cuda, args.torch, tuple(args.only),
                          note=lambda line: err_console.print(line, markup=False, highlight=False, soft_wrap=True))
    if args.json:
        emit_json(matrix_document(entries))
        return 0
    table = Table()
    add_columns(table, "dependency", "key", "archs", "units", "in store", "est. compile s")
    for entry in entries:
        where = "local" if entry.cached else "shared" if entry.in_store else "unknown" if entry.in_store is None else "-"
        units = f"{entry.cxx_units} c++ + {entry.cuda_units} cuda" if entry.units_known else "unknown"
        table.add_row(entry.dep, entry.key[:12], " ".join(entry.archs) or "-", units, where, f"{entry.cost:.0f}")
    console.print(table)
    return 0
