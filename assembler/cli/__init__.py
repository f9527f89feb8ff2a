"""Thin command line: each subcommand module parses its arguments and calls the library.

Subcommand modules import the library inside their handler, so `assemble deps` does not pay
for torch-, ELF- or build-related imports (startup time is most of a no-op's cost).

A subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``handler`` to a function taking the parsed namespace and returning an exit code.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from assembler import __version__
from assembler.cli import audit, build, cache, check, checkout, deps, export, merge, patches, rebase, sbom, size, verify
from assembler.errors import AssembleError

COMMANDS = [deps, checkout, export, patches, rebase, check, build, verify, merge, audit, sbom, size, cache]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="assemble",
        description="Carry kernel libraries as pinned forks plus patch series; build one Stable-ABI wheel.",
    )
    parser.add_argument("--version", action="version", version=f"assemble {__version__}")
    parser.add_argument(
        "--workspace", "-C", type=Path, default=None,
        help="workspace directory (default: nearest directory upward holding deps.toml)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except AssembleError as error:
        from rich.console import Console
        from rich.markup import escape

        err = Console(stderr=True, highlight=False, soft_wrap=True)
        err.print(f"[bold red]error:[/] {escape(error.message)}", markup=True, emoji=False)
        if error.hint:
            err.print(f"[bold]hint:[/] {escape(error.hint)}", markup=True, emoji=False)
        return int(error.exit_code)
    except KeyboardInterrupt:
        print("interrupted; re-run the same command (or --continue / --abort) to recover", file=sys.stderr)
        return 130
