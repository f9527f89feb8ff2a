"""`assemble merge DIR...`: the second half of a split release. Each matrix job runs
`assemble build --only DEP --artifacts DIR`; one job gathers the DIRs and merges them into the
same wheel that a single `assemble build` would have produced."""

from __future__ import annotations

import argparse
from pathlib import Path

from assembler.cli.common import add_format, cuda_version, non_negative_int


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "merge", help="merge per-dependency build artifacts into one wheel",
        description="Merge artifact directories (each <dep>/artifact.json, or a directory of them) into one "
        "reproducible abi3 wheel. Timestamps come from SOURCE_DATE_EPOCH, else 1980-01-01.",
    )
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="artifact directory, or a directory of them")
    parser.add_argument("--cuda", metavar="X.Y", type=cuda_version,
                        help="CUDA version of the +cuXY label (default: the one the artifacts were built with)")
    parser.add_argument("--output", "-o", "--out", dest="output", type=Path, default=None, metavar="DIR",
                        help="where the wheel goes (default: <workspace>/dist; --out is an older spelling)")
    parser.add_argument(
        "--exclude", action="append", default=[], metavar="PATTERN",
        help="another shared library provided at run time, left out of the manylinux check (repeatable; "
        "libtorch*, libc10*, libcudart*, libcuda.so*, libpython* always are)",
    )
    parser.add_argument("--partial", action="store_true",
                        help="merge the artifacts given though some dependencies have none: a wheel labelled "
                             "+cuXY.partial.DEP in dist/partial/, never a release (without it, every dependency must "
                             "be there)")
    parser.add_argument("--jobs", "-j", type=non_negative_int, default=0, metavar="N",
                        help="threads compressing loose files (default 0: one per CPU, up to 4)")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from assembler.builder.pipeline import merge_artifacts
    from assembler.cli.common import open_workspace
    from assembler.report.output import console, emit_json, err_console, short
    from assembler.report.table import TextTable
    from assembler.wheel.platform import DEFAULT_EXCLUDES

    workspace = open_workspace(args)
    result = merge_artifacts(workspace, args.dirs, args.output, args.cuda, (*DEFAULT_EXCLUDES, *args.exclude),
                             args.jobs,
                             partial=args.partial)
    if args.json:
        emit_json(result.to_json())
        return 0
    # Names and SHAs are never cut; the archs and the headers of the counts wrap between words.
    table = TextTable("dependency", "commit", "patches", "archs", "files shipped", "not shipped",
                      text=("archs", "files shipped", "not shipped"), right=("patches", "files shipped", "not shipped"))
    for dep, record in result.provenance.items():
        table.add_row(
            dep, short(record["commit"]), str(len(record["patches"])), " ".join(record["archs"]) or "-",
            str(len(result.files.get(dep, ()))), str(len(result.unshipped.get(dep, ()))),
        )
    table.print(console.file)
    for warning in result.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(warning)}", markup=True, emoji=False, soft_wrap=True)
    size = f"{result.size / 1e6:.1f} MB" if result.size >= 100_000 else f"{result.size / 1e3:.0f} kB"
    cached = ", platform verdict cached" if result.platform.cached else ""
    console.print(f"merged in {result.seconds:.2f} s ({size}{cached})", soft_wrap=True)
    if result.missing:
        console.print(f"partial wheel (not a release; lacks {', '.join(result.missing)}): {result.wheel}",
                      soft_wrap=True)
    else:
        console.print(f"wheel: {result.wheel}", soft_wrap=True)
    return 0
