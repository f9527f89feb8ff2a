"""`assemble verify WHEEL --torch X [--torch Y] [--python PATH]`: load and exercise the wheel on each
torch version (a cached environment each) and on the torch of each interpreter given."""

from __future__ import annotations

import argparse
from pathlib import Path

from assembler.cli.common import add_format, positive_float, torch_version


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "verify", help="prove a wheel loads, registers its ops and runs its smoke calls on several torch versions",
    )
    parser.add_argument("wheel", type=Path, metavar="WHEEL", help="the merged wheel to verify")
    parser.add_argument(
        "--torch", action="append", default=[], metavar="VERSION", type=torch_version,
        help="torch version to verify on (repeatable; default: [bundle] verify-torch)",
    )
    parser.add_argument(
        "--python", action="append", default=[], metavar="PATH", dest="pythons",
        help="an interpreter that already has torch: verify on its torch, creating and downloading nothing (repeatable)",
    )
    parser.add_argument("--timeout", type=positive_float, default=600.0, metavar="SECONDS", help="seconds one probe may run (default 600)")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.report.output import console, emit_json, err_console
    from assembler.verify import verify_wheel, workspace_manifest

    # used only when the wheel is its bundle's (see verify.specs); searched from -C DIR, else the cwd
    manifest = workspace_manifest(args.workspace, args.directory)
    report = verify_wheel(
        manifest, args.wheel, args.torch, timeout=args.timeout, pythons=[interpreter(args.directory, p) for p in args.pythons],
        progress=lambda msg: err_console.print(msg, markup=False, highlight=False, soft_wrap=True),
    )
    if args.json:
        emit_json(report.to_json())
    else:
        report.render(console)
    return 1 if report.failed else 0


def interpreter(base: Path, text: str) -> Path:
    """``--python``: a bare name (``python3``) is looked up on PATH as a shell would; a path with a
    directory in it is read against -C DIR or the caller's directory (resolve_paths)."""
    return base / text if "/" in text else Path(text)
