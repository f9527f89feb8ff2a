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
    from assembler.report.output import console, emit_json, err_console
    from assembler.verify import verify_wheel, workspace_manifest

    manifest = workspace_manifest(args.workspace, Path.cwd())
    if manifest is None:
        err_console.print("note: no deps.toml found; checking that each extension loads (no ops or smoke calls)")
    report = verify_wheel(manifest, args.wheel, args.torch, progress=lambda msg: err_console.print(msg), timeout=args.timeout)
    if args.json:
        emit_json(report.to_json())
    else:
        report.render(console)
    return 1 if report.failed else 0
