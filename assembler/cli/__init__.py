"""Thin command line: each subcommand module parses its arguments and calls the library.

Start-up is most of a no-op's cost, so: only the subcommand named on the command line is
imported and registered (all of them for ``--help``, completion and an unknown word), and
subcommand modules import the library inside their handler.

A subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``handler`` to a function taking the parsed namespace and returning an exit code.

Every parser, the subcommands' included, takes the global options (-C/--workspace, -v, -q,
--color, --debug), so they work before or after the subcommand.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from assembler import __version__
from assembler.errors import AssembleError, ExitCode, InputError, from_os_error

# Command name -> module under assembler.cli, in the order `assemble --help` lists them.
COMMAND_MODULES = {
    "deps": "deps", "checkout": "checkout", "export": "export", "patches": "patches", "rebase": "rebase",
    "check": "check", "assess": "assess", "migrate": "migrate", "review": "review", "build": "build", "plan": "plan",
    "verify": "verify", "merge": "merge", "audit": "audit",
    "sbom": "sbom", "size": "size", "cache": "cache", "completion": "completion",
    "status": "status", "show": "show", "init": "init", "add": "add", "ci": "ci",
}

EXIT_CODES = {
    ExitCode.OK: "success",
    ExitCode.CHECK_FAILED: "a gate said no (audit --check, a verify FAIL, a size budget, check not CLEAN, "
                           "a rebase --dry-run that would conflict)",
    ExitCode.BAD_INPUT: "bad input: manifest, series, arguments, missing or corrupt files",
    ExitCode.NETWORK: "a repository or package index could not be reached",
    ExitCode.WOULD_LOSE_WORK: "uncommitted edits or unexported commits in forks/ would be lost",
    ExitCode.CONFLICT: "a patch did not apply; the checkout is left to resolve",
    ExitCode.BUILD_FAILED: "a compiler, CMake or build backend failed",
    ExitCode.TOOLCHAIN: "the CUDA toolkit or torch asked for is unavailable",
    ExitCode.LOCKED: "another assemble process holds the workspace lock",
    ExitCode.ENVIRONMENT: "the machine refused: disk full, read-only file system, permission denied",
    ExitCode.INTERNAL: "a bug in assemble (--debug shows the traceback)",
}

ENVIRONMENT_VARIABLES = {
    "ASSEMBLE_CACHE": "the shared cache (mirrors, toolchains, environments, artifacts); default ~/.cache/assembler",
    "ASSEMBLE_LOCK_TIMEOUT": "seconds to wait for another process's workspace lock (default 600)",
    "ASSEMBLE_INSTALLER": "uv (default) or pip: what creates torch environments and the CUDA toolkit",
    "ASSEMBLE_SCCACHE": "0 or 1: the compiler cache (sccache) off or on, overriding [cache] compiler",
    "ASSEMBLE_ARTIFACT_STORE": "the shared artifact store (file://, s3://), overriding [cache] artifacts; empty: none",
    "ASSEMBLE_PULL_REQUESTS": "0 stops mirrors fetching pull-request heads (used to recognise patches sent upstream)",
    "ASSEMBLE_PATCHES_OUTSIDE_WORKSPACE": "1 lets a series name patch files outside the workspace",
    "ASSEMBLE_INFLATER": "zlib-ng (default when installed), isal or zlib: what inflates wheel members in audit "
                         "and size",
    "ASSEMBLE_VERIFY_SANDBOX": "0 runs verify's probe without its read-only namespace (where user namespaces are "
                               "disabled)",
    "SOURCE_DATE_EPOCH": "the timestamp of files in built wheels (default 1980-01-01)",
    "NO_COLOR": "no colour (unless --color always)",
    "GITHUB_ACTIONS, CI": "CI logs: per-dependency build logs in ::group:: sections, one line per phase change",
}

# Variables read by assemble's own child processes, not meant to be set by hand.
INTERNAL_VARIABLES = ("ASSEMBLE_CUDA_HOME", "ASSEMBLE_NINJA_SAVE", "ASSEMBLE_REAL_NINJA", "ASSEMBLE_SCCACHE_OWNER",
                      "ASSEMBLE_TEST_SUBPROCESS",
                      # set by a build for its compiler launcher (toolchain/launch.py)
                      "ASSEMBLE_PATH_ROOTS", "ASSEMBLE_SHARD", "ASSEMBLE_CHECKOUT", "ASSEMBLE_UNIT_TIMES",
                      "ASSEMBLE_SCCACHE_PARENT",
                      "ASSEMBLE_PROBE_SANDBOX")  # verify tells its probe which sandbox it runs in

# Exit codes of a run stopped by a signal (the shell's 128 + signal number); re-running recovers.
SIGNAL_EXIT_CODES = {
    130: "interrupted (Ctrl-C, SIGINT): re-run the same command to recover (a rebase: --continue or --abort)",
    143: "terminated (SIGTERM): stopped as for Ctrl-C; re-run the same command to recover",
}


def _interrupt_hint(command: str | None) -> str:
    """How to recover from an interrupted command: only rebase has --continue and --abort; every
    other command is safe to re-run (interrupted runs leave nothing half done)."""
    if command == "rebase":
        return "`assemble rebase --continue` goes on where it stopped; `assemble rebase --abort` puts everything back"
    return "re-run the same command to recover: what was interrupted is redone, nothing half done is kept"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, as Ctrl-C raises KeyboardInterrupt: the same
    cleanup runs (git children are stopped and waited for, see git.process.run_git) and the
    run ends with exit 143 instead of dying where it stood."""


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises Terminated for the duration of one command (the first only: a second
    while the run cleans up is ignored); the previous handler is put back after it."""
    import signal

    def terminated(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated

    try:
        previous = signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread (a caller running commands in threads): signals stay as they are
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# Global options that take a value (so the word after them is not the subcommand).
_VALUED_GLOBALS = ("-C", "--workspace", "--color")


def _epilog() -> str:
    codes = "\n".join(f"  {int(code):<3} {text}" for code, text in [*EXIT_CODES.items(), *SIGNAL_EXIT_CODES.items()])
    variables = "\n".join(f"  {name}\n      {text}" for name, text in ENVIRONMENT_VARIABLES.items())
    return (f"exit codes:\n{codes}\n\nenvironment variables:\n{variables}\n\n"
            "JSON: every command's --format json (--json) prints one document on stdout, "
            '{"schema": N, "command": ..., "ok": ..., ...}, with "error": {message, hint, exit_code} on failure.')


def add_global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """-C, -v, -q, --color and --debug; on a subcommand their default is SUPPRESS, so a value
    given before the subcommand is kept when none is given after it."""

    from assembler.report.output import COLORS

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    group = parser.add_argument_group("global options (before or after the command)")
    group.add_argument("-C", "--workspace", type=Path, default=default(None), metavar="DIR",
                       help="run as if started in DIR, like git -C: the workspace is the nearest deps.toml upward "
                            "from DIR, and relative paths are read against DIR")
    group.add_argument("-v", "--verbose", action="count", default=default(0),
                       help="more detail (repeatable; audit: the offending and version-setting symbols)")
    group.add_argument("-q", "--quiet", action="count", default=default(0), help="less on stderr: no progress notes")
    group.add_argument("--color", choices=COLORS, default=default("auto"),
                       help="colour on stdout/stderr (default auto: on a terminal, unless NO_COLOR is set)")
    group.add_argument("--debug", action="store_true", default=default(False),
                       help="show the Python traceback of an unexpected error (for bug reports)")


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's own width (shutil.get_terminal_size: COLUMNS, else the terminal, else 80)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:\n"):  # a subcommand's examples (cli/examples.py): one per line, as written
            return "".join(indent + line + "\n" for line in text.splitlines()).rstrip("\n")
        if text.startswith("exit codes:\n"):  # `assemble --help`'s epilog: its items kept apart, each wrapped
            return _fill_items(text, width, indent)
        return super()._fill_text(text, width, indent)

    def _format_usage(self, usage: str | None, actions: Any, groups: Any, prefix: str | None) -> str:
        """argparse's usage, where a group of exclusive options wider than the width (rebase's
        ``[--continue | --abort | ...]``) goes on over lines broken after a ``|``."""
        text: str = super()._format_usage(usage, actions, groups, prefix)
        lines: list[str] = []
        for line in text.split("\n"):
            while len(line) > self._width and " | " in line[:self._width]:
                cut = line.rindex(" | ", 0, self._width - 1) + 2
                head = line[:len(line) - len(line.lstrip(" "))]
                lines.append(line[:cut])
                line = head + " " + line[cut + 1:]
            lines.append(line)
        return "\n".join(lines)


def _fill_items(text: str, width: int, indent: str) -> str:
    """A text of items, one a line (``  130 interrupted ...``, ``      the shared cache ...``),
    each wrapped between words to ``width``, its continuation under its text; blank lines kept."""
    import textwrap

    out: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            out.append("")
            continue
        spaces = line[:len(line) - len(line.lstrip(" "))]
        code = re.match(r"  \d+ +", line) if spaces == "  " else None  # an exit code: its text hangs under the text
        lead = indent + spaces
        hang = indent + " " * (code.end() if code else len(spaces))
        out += textwrap.wrap(line.strip(), width, initial_indent=lead, subsequent_indent=hang,
                             break_long_words=False, break_on_hyphens=False) or [lead]
    return "\n".join(out)


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on the one error path of main (one line, a hint, exit 2), and
    the global options on every subcommand parser."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _SubParsers)

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{self.prog}: {message}", hint=f"see `{self.prog} --help`")


class _SubParsers(argparse._SubParsersAction):  # type: ignore[type-arg]
    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        from assembler.cli.examples import epilog

        if kwargs.get("help") and "description" not in kwargs:  # every --help page says what the command does
            kwargs["description"] = kwargs["help"][0].upper() + kwargs["help"][1:] + "."
        kwargs.setdefault("epilog", epilog(name) if self.dest == "command" else None)
        parser: argparse.ArgumentParser = super().add_parser(name, **kwargs)
        add_global_options(parser, top=False)
        return parser


def _command_word(words: list[str]) -> str | None:
    """The subcommand on the command line: the first word that is not an option or the value of
    a global option (None when there is none)."""
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            return words[index + 1] if index + 1 < len(words) else None
        if word in _VALUED_GLOBALS:
            index += 2
            continue
        if not word.startswith("-"):
            return word
        index += 1
    return None


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"assembler.cli.{COMMAND_MODULES[name]}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: with ``only``, just that subcommand's (start-up), else all of them."""
    parser = _Parser(
        prog="assemble",
        description="Carry kernel libraries as pinned forks plus patch series; build one Stable-ABI wheel.",
        epilog=_epilog(),
    )
    parser.add_argument("--version", action="version", version=f"assemble {__version__}")
    add_global_options(parser, top=True)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [only] if only is not None else COMMAND_MODULES:
        _module(name).register(subparsers)
    return parser


def _wants_json(words: list[str]) -> bool:
    """--json or --format json on the command line (for an error before the parse finished)."""
    words = words[: words.index("--")] if "--" in words else words
    if "--json" in words or "--format=json" in words:
        return True
    return any(word == "--format" and index + 1 < len(words) and words[index + 1] == "json" for index,
               word in enumerate(words))


def _unknown_command(word: str) -> InputError:
    import difflib

    matches = difflib.get_close_matches(word, list(COMMAND_MODULES), n=1, cutoff=0.6)
    hint = f"did you mean `assemble {matches[0]}`?" if matches else "see `assemble --help` for the commands"
    return InputError(f"assemble: unknown command {word[:80]!r}", hint=hint)


def main(argv: list[str] | None = None) -> int:
    """Run one command. The one error path: an AssembleError, an OSError (disk full, read-only,
    a path that is not what it should be) or an argument error is one line with a hint and a
    documented exit code (errors.ExitCode); anything else is a bug, reported in one line with
    exit INTERNAL, and with its traceback under --debug. With --format json, stdout carries one
    JSON document whatever happened (``report.output.envelope``)."""
    from assembler.report import output

    words = sys.argv[1:] if argv is None else list(argv)
    before_dashes = words[: words.index("--")] if "--" in words else words
    debug = "--debug" in before_dashes
    output.configure()
    command = _command_word(words)
    if command is None and "--version" in before_dashes:  # without building every subcommand's parser
        print(f"assemble {__version__}")
        return 0
    as_json = _wants_json(words)
    with output.json_session(command if command in COMMAND_MODULES else "assemble") as session, output.heartbeat(), \
            _sigterm_as_interrupt():
        code: int
        error: AssembleError | None = None
        try:
            if command is not None and command not in COMMAND_MODULES:
                raise _unknown_command(command)
            args = build_parser(command if command in COMMAND_MODULES and command != "completion"
                                else None).parse_args(words)
            _configure(args)
            from assembler.cli.common import resolve_paths

            resolve_paths(args)  # against -C DIR or the caller's directory, before any command changes directory
            as_json = getattr(args, "format", None) == "json"
            args.json = as_json
            code = int(args.handler(args))
        except AssembleError as failure:
            error, code = failure, int(failure.exit_code)
        except BrokenPipeError:  # the reader went away (`assemble patches | head`): nothing to report, as for git
            _silence_stdout()
            return 1
        except OSError as failure:
            if debug:
                raise
            error = from_os_error(failure)
            code = int(error.exit_code)
        except KeyboardInterrupt as interrupt:
            what = "terminated" if isinstance(interrupt, Terminated) else "interrupted"
            hint = _interrupt_hint(command)
            error = AssembleError(what, hint=hint)
            code = 143 if isinstance(interrupt, Terminated) else 130
            print(f"{what}; {hint}", file=sys.stderr)
            _finish(session, as_json, code, error)
            return code
        except Exception as failure:
            if debug:
                raise
            error = AssembleError(f"internal error: {type(failure).__name__}: {failure}".splitlines()[0][:500],
                                  hint="this is a bug in assemble: re-run with --debug and report the traceback")
            code = int(ExitCode.INTERNAL)
        if error is not None:
            _report(error)
        _finish(session, as_json, code, error)
        return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so what is still buffered does not fail again at exit."""
    import contextlib
    import os

    with contextlib.suppress(AttributeError, ValueError, OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _configure(args: argparse.Namespace) -> None:
    from assembler.report import output

    output.configure(color=args.color, verbosity=args.verbose - args.quiet)


def _finish(session: Any, as_json: bool, code: int, error: AssembleError | None) -> None:
    """Write the command's JSON inside the envelope (or the failure alone), when JSON was asked."""
    from assembler.report import output

    if session.emitted and not as_json:  # a command whose only output is a JSON document
        output.write_json(session.document)
        return
    if not as_json:
        return
    if session.command == "plan" and session.emitted and error is None:
        output.write_json(session.document)  # a strategy.matrix document: GitHub reads every key as a matrix axis
        return
    detail = None if error is None else {**error.to_json(), "exit_code": code}
    output.write_json(output.envelope(session.command, session.document, code, detail))


def _report(error: AssembleError) -> None:
    """``error: MESSAGE`` and ``hint: HINT`` on stderr (report.table.write_error): one line each
    off a terminal, wrapped between words on one; red when colour is on."""
    from assembler.report.table import write_error

    write_error(error.message, error.hint)
