"""`assemble size WHEEL|DIR [--budget SIZE] [--json]`: where a wheel's bytes come from, per
dependency, per extension and per CUDA architecture, read in place."""

from __future__ import annotations

import argparse
from pathlib import Path

from assembler.cli.common import add_format


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "size", help="size of a wheel per dependency, extension and CUDA architecture",
        description="Compressed and uncompressed bytes per bundled dependency (from the wheel's assembler.json, else "
        "the install globs of deps.toml with -C, else per top-level directory), and for each shared object the "
        ".nv_fatbin split by architecture (cubin sm_XX, PTX compute_XX). Read in place, nothing is unpacked. "
        "With -C, deps.toml's [bundle] max-wheel-size and [deps.X] max-size are budgets. "
        "Exit 0, 1 when a budget is exceeded, 2 on unreadable input.",
    )
    parser.add_argument("path", type=Path, metavar="WHEEL|DIR", help="a wheel, or an unpacked wheel directory")
    parser.add_argument("--budget", metavar="SIZE", help="fail (exit 1) when the wheel is larger, e.g. 400MB or 321MiB")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.errors import CheckFailed, InputError
    from assembler.manifest.model import parse_size
    from assembler.report.output import console, emit_json
    from assembler.wheel.size import measure, measure_for_manifest, render

    budget = None
    if args.budget is not None:
        try:
            budget = parse_size(args.budget)
        except ValueError as exc:
            raise InputError(f"--budget: {exc}", hint="pass e.g. --budget 400MB") from None
    if args.workspace is not None:
        from assembler.cli.common import open_workspace

        report = measure_for_manifest(args.path, open_workspace(args).manifest, budget)
    else:
        report = measure(args.path, budget=budget)
    if args.json:
        emit_json(report.to_json())
    else:
        render(report, console)
    if report.over:
        raise CheckFailed("size budget exceeded: " + "; ".join(report.over),
                          hint="the breakdown shows which dependency and architecture the bytes come from")
    return 0
