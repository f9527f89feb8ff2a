"""`assemble verify WHEEL --torch X [--torch Y] [--torch window] [--python PATH]`: load and exercise the
wheel on each torch version (a cached environment each), on every release of its torch window and
on the torch of each interpreter given."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from assembler.cli.common import add_format, positive_float, torch_version

WINDOW_HELP = (
    "torch version to verify on (repeatable; default: [bundle] verify-torch); 'window': every torch minor from "
    "the wheel's floor (what its shim symbols need, or its declared torch-target / Requires-Dist if higher) to "
    "the newest release the package index offers (pip's configuration: indexes, find-links, constraints), each "
    "at its latest patch"
)


def torch_or_window(text: str) -> str:
    """argparse type for --torch: a torch release, or the word ``window``."""
    from assembler.verify.window import WINDOW, is_window

    return WINDOW if is_window(text) else torch_version(text)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "verify", help="prove a wheel loads, registers its ops and runs its smoke calls on several torch versions",
        description="Prove a wheel loads, registers its ops and runs its smoke calls on several torch versions. "
                    "The matrix (dependency x torch release: PASS 4/4 ops, FAIL, SKIPPED with the reason) is "
                    "printed as a table, --format markdown for release notes, or --json.",
    )
    parser.add_argument("wheel", type=Path, metavar="WHEEL", help="the merged wheel to verify")
    parser.add_argument("--torch", action="append", default=[], metavar="VERSION|window", type=torch_or_window,
                        help=WINDOW_HELP)
    parser.add_argument(
        "--python", action="append", default=[], metavar="PATH", dest="pythons",
        help="an interpreter that already has torch: verify on its torch, creating and downloading nothing "
             "(repeatable)",
    )
    parser.add_argument("--timeout", type=positive_float, default=600.0, metavar="SECONDS",
                        help="seconds one probe may run (default 600)")
    add_format(parser, markdown=True)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.report.output import console, emit_json, err_console
    from assembler.verify import verify_wheel, workspace_manifest
    from assembler.verify.window import WINDOW

    def say(message: str) -> None:
        err_console.print(message, markup=False, highlight=False, soft_wrap=True)

    # used only when the wheel is its bundle's (see verify.specs); searched from -C DIR, else the cwd
    manifest = workspace_manifest(args.workspace, args.directory)
    report = verify_wheel(
        manifest, args.wheel, [v for v in args.torch if v != WINDOW], timeout=args.timeout,
        pythons=[interpreter(args.directory, p) for p in args.pythons], progress=say, window=WINDOW in args.torch,
    )
    if args.json:
        emit_json(report.to_json())
    elif args.format == "markdown":
        sys.stdout.write(report.markdown())
    else:
        report.render(console)
    return 1 if report.failed else 0


def interpreter(base: Path, text: str) -> Path:
    """``--python``: a bare name (``python3``) is looked up on PATH as a shell would; a path with a
    directory in it is read against -C DIR or the caller's directory (resolve_paths)."""
    return base / text if "/" in text else Path(text)
