"""What several commands share: argument types, the output options, and opening the workspace
so that waiting for its lock is said on stderr."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Mapping

    from assembler.errors import AssembleError
    from assembler.workspace import Workspace


CUDA_VERSION_RE = re.compile(r"^\d+\.\d+$")

N = TypeVar("N", int, float)  # what number() reads


def add_format(parser: argparse.ArgumentParser, markdown: bool = False) -> None:
    """``--format table|json`` (and ``markdown`` where it makes sense) with ``--json`` as its
    alias: the output contract every command shares (JSON shapes: docs/reference/json.md)."""
    choices = ("table", "markdown", "json") if markdown else ("table", "json")
    parser.add_argument("--format", choices=choices, default="table",
                        help="table for people (default), json for machines (one document on stdout, schemas: "
                             "docs/reference/json.md)"
                        + (", markdown for a release note" if markdown else ""))
    parser.add_argument("--json", dest="format", action="store_const", const="json", help="same as --format json")


def shard_count(text: str) -> int:
    """--shards N (plan --matrix, ci): 1 to 1000 runners."""
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of shards: expected 1 to 1000")
    return int(text)


def cuda_version(text: str) -> str:
    """argparse type for --cuda: X.Y, checked before anything is fetched (``--cuda 13`` is exit 2 at once)."""
    if not CUDA_VERSION_RE.match(text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a CUDA version: expected MAJOR.MINOR (X.Y), e.g. 13.2")
    return text


def torch_version(text: str) -> str:
    """argparse type for --torch: a torch release (X.Y.Z, optionally +local), checked before
    anything is fetched (manifest.values.torch_release_problem, the rule deps.toml follows too)."""
    from assembler.manifest.values import torch_release_problem

    problem = torch_release_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{problem[0]}; {problem[1]}")
    return text


def number(text: str, parse: Callable[[str], N], what: str) -> N:
    """``text`` read by ``parse`` (int or float) for an argparse type; else the error says it is not ``what``."""
    try:
        return parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def non_negative_int(text: str) -> int:
    """argparse type for counts where 0 means "choose for me" (a negative count would never run)."""
    value = number(text, int, "a whole number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative (0 means one per CPU)")
    return value


def positive_float(text: str) -> float:
    value = number(text, float, "a number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not above 0")
    return value


def say_waiting(root: Path) -> None:
    """The workspace lock is held by another assemble process: say so once, on stderr."""
    from assembler.report.output import note
    from assembler.workspace import lock_holder

    note(f"waiting for the workspace lock of {root}, held by {lock_holder(root) or 'another assemble process'} ...")


def resolve_paths(args: argparse.Namespace) -> None:
    """Make every path argument absolute before any command runs, as git's ``-C DIR`` does:
    relative paths are read against DIR (``-C``/``--workspace``), else the caller's directory,
    so a command that later works in another directory (verify installs from a scratch
    directory) still finds ``dist/X.whl``. ``args.directory`` is that base; ``args.workspace``
    stays None when -C was not given (commands such as ``size`` read a workspace only then)."""
    caller = Path.cwd()
    base = caller if args.workspace is None else caller / args.workspace
    if args.workspace is not None and not base.is_dir():
        from assembler.errors import InputError

        raise InputError(f"-C {args.workspace}: no such directory",
                         hint="pass an existing directory (-C works like git's -C)")
    args.directory = base
    if args.workspace is not None:
        args.workspace = base
    for key, value in vars(args).items():
        if key in ("workspace", "directory"):
            continue
        if isinstance(value, Path):
            setattr(args, key, base / value)
        elif isinstance(value, list) and value and all(isinstance(item, Path) for item in value):
            setattr(args, key, [base / item for item in value])


def open_workspace(args: argparse.Namespace) -> Workspace:
    """The workspace found upward from ``-C DIR`` (else from the cwd), like git finds ``.git``."""
    from assembler.workspace import open_workspace as open_at

    return open_at(args.workspace, on_lock_wait=say_waiting)


def print_failures(failures: Mapping[str, AssembleError]) -> None:
    """Keep going: each dependency's failure as ``error: DEP: ...`` (and ``hint: ...``) on
    stderr, also with --json (whose document lists them too, see failures_json)."""
    from assembler.report.table import write_error

    for name, error in failures.items():
        message = error.message.removeprefix(f"{name}: ")  # an error that names its dependency already: once
        write_error(f"{name}: {message}", error.hint)


def failures_json(failures: Mapping[str, AssembleError]) -> list[dict[str, str | int | None]]:
    """The ``failures`` list of a keep-going command's JSON document."""
    return [{"name": name, **error.to_json()} for name, error in failures.items()]
