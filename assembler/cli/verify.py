"""`assemble verify WHEEL --torch X [--torch Y]`: load and exercise the wheel on each torch version."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "verify", help="prove a wheel loads, registers its ops and runs its smoke calls on several torch versions",
    )
    parser.add_argument("wheel", type=Path, metavar="WHEEL")
    parser.add_argument(
        "--torch", action="append", default=[], metavar="VERSION",
        help="torch version to verify on (repeatable; default: [bundle] verify-torch)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one probe may run (default 600)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.errors import ManifestError
    from assembler.report.output import console, emit_json, err_console
    from assembler.verify import verify_wheel
    from assembler.workspace import open_workspace

    try:
        manifest = open_workspace(args.workspace).manifest
    except ManifestError:
        if args.workspace is not None:
            raise
        manifest = None  # outside a workspace: load checks only, one row per extension
        err_console.print("note: no deps.toml found; checking that each extension loads (no ops or smoke calls)")
    versions = args.torch or (list(manifest.bundle.verify_torch) if manifest else [])
    report = verify_wheel(manifest, args.wheel, versions, progress=lambda msg: err_console.print(msg), timeout=args.timeout)
    if args.json:
        emit_json(report.to_json())
    else:
        report.render(console)
    return 1 if report.failed else 0
