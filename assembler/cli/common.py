"""What several commands share: argument types, the output options, and opening the workspace
so that waiting for its lock is said on stderr."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Mapping

    from assembler.errors import AssembleError
    from assembler.workspace import Workspace


CUDA_VERSION_RE = re.compile(r"^\d+\.\d+$")
# A torch release as pip names it: 2.13.0, 2.11.0+cu130, 2.14.0rc1, 2.15.0.dev20260101.
TORCH_VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?((a|b|rc)\d+|\.post\d+|\.dev\d+)*(\+[A-Za-z0-9.]+)?$")

N = TypeVar("N", int, float)  # what number() reads


def add_format(parser: argparse.ArgumentParser, markdown: bool = False) -> None:
    """``--format table|json`` (and ``markdown`` where it makes sense) with ``--json`` as its
    alias: the output contract every command shares (JSON documented in the README)."""
    choices = ("table", "markdown", "json") if markdown else ("table", "json")
    parser.add_argument("--format", choices=choices, default="table",
                        help="table for people (default), json for machines (one document on stdout, schema in the README)"
                        + (", markdown for a release note" if markdown else ""))
    parser.add_argument("--json", dest="format", action="store_const", const="json", help="same as --format json")


def cuda_version(text: str) -> str:
    """argparse type for --cuda: X.Y, checked before anything is fetched (``--cuda 13`` is exit 2 at once)."""
    if not CUDA_VERSION_RE.match(text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a CUDA version: expected MAJOR.MINOR (X.Y), e.g. 13.2")
    return text


def torch_version(text: str) -> str:
    """argparse type for --torch: a torch release (X.Y.Z, optionally +local), checked before anything is fetched."""
    if not TORCH_VERSION_RE.match(text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a torch version: expected X.Y.Z, e.g. 2.13.0 or 2.11.0+cu130")
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


def open_workspace(args: argparse.Namespace) -> Workspace:
    """The workspace of ``--workspace`` (else the nearest one up from the cwd)."""
    from assembler.workspace import open_workspace as open_at

    return open_at(args.workspace, on_lock_wait=say_waiting)


def print_failures(failures: Mapping[str, AssembleError]) -> None:
    """Keep going: each dependency's failure as ``error: DEP: ...`` (and ``hint: ...``) on
    stderr, also with --json (whose document lists them too, see failures_json)."""
    from assembler.report.output import clean

    for name, error in failures.items():
        message = error.message.removeprefix(f"{name}: ")  # an error that names its dependency already: once
        print(f"error: {name}: {clean(message)}" + (f"\nhint: {clean(error.hint)}" if error.hint else ""), file=sys.stderr)


def failures_json(failures: Mapping[str, AssembleError]) -> list[dict[str, str | int | None]]:
    """The ``failures`` list of a keep-going command's JSON document."""
    return [{"name": name, **error.to_json()} for name, error in failures.items()]
