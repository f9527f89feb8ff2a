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
from typing import NoReturn

from assembler import __version__
from assembler.cli import (
    audit,
    build,
    cache,
    check,
    checkout,
    deps,
    export,
    merge,
    patches,
    plan,
    rebase,
    sbom,
    size,
    verify,
)
from assembler.errors import AssembleError, ExitCode, InputError, environment_failure, from_os_error

COMMANDS = [deps, checkout, export, patches, rebase, check, build, plan, verify, merge, audit, sbom, size, cache]


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on the one error path of main (one line, a hint, exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{self.prog}: {message}", hint=f"see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="assemble",
        description="Carry kernel libraries as pinned forks plus patch series; build one Stable-ABI wheel.",
    )
    parser.add_argument("--version", action="version", version=f"assemble {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an unexpected error (for bug reports)")
    parser.add_argument(
        "--workspace", "-C", type=Path, default=None,
        help="workspace directory (default: nearest directory upward holding deps.toml)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. The one error path: an AssembleError, an OSError (disk full, read-only,
    a path that is not what it should be) or an argument error is one line with a hint and a
    documented exit code (errors.ExitCode); anything else is a bug, reported in one line with
    exit INTERNAL, and with its traceback under --debug."""
    words = sys.argv[1:] if argv is None else argv
    debug = "--debug" in words[: words.index("--")] if "--" in words else "--debug" in words
    try:
        args = build_parser().parse_args(argv)
        return int(args.handler(args))
    except AssembleError as error:
        return _report(error)
    except OSError as error:
        if debug:
            raise
        return _report(from_os_error(error))
    except KeyboardInterrupt:
        print("interrupted; re-run the same command (or --continue / --abort) to recover", file=sys.stderr)
        return 130
    except Exception as error:
        if debug:
            raise
        failed = _git_failure(error)
        if failed is not None:
            return _report(failed)
        return _report(AssembleError(
            f"internal error: {type(error).__name__}: {error}".splitlines()[0][:500],
            hint="this is a bug in assemble: re-run with --debug and report the traceback",
        ), ExitCode.INTERNAL)


def _git_failure(error: Exception) -> AssembleError | None:
    """A git process that failed where no caller expected it (GitPython's GitCommandError):
    git's own first line, exit ENVIRONMENT when the system refused (a full disk, a read-only
    file system), else BAD_INPUT."""
    git_module = sys.modules.get("git")
    if git_module is None or not isinstance(error, git_module.GitCommandError):
        return None
    from assembler.git.runner import git_error_line

    command = error.command if isinstance(error.command, list) else str(error.command).split()
    words = [str(w) for w in command[1:]]
    while words and words[0].startswith("-"):
        words = words[2:] if words[0] == "-c" else words[1:]
    stderr = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else str(error.stderr or "")
    lines = [line.strip().removeprefix("stderr: '").strip("' ") for line in stderr.splitlines()]
    reason = next((line for line in lines if line.startswith(("fatal:", "error:"))), None) or git_error_line(stderr, error.status)
    message = f"git {words[0] if words else ''} failed: {reason}"
    return environment_failure(message, stderr) or InputError(
        message, hint="check that the repository is readable and not damaged (git fsck), then run the command again")


def _report(error: AssembleError, code: ExitCode | None = None) -> int:
    from rich.console import Console
    from rich.markup import escape

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    err.print(f"[bold red]error:[/] {escape(error.message)}", markup=True, emoji=False)
    if error.hint:
        err.print(f"[bold]hint:[/] {escape(error.hint)}", markup=True, emoji=False)
    return int(code if code is not None else error.exit_code)
