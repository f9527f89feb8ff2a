"""What several commands share: argument types, and opening the workspace so that waiting for
its lock is said on stderr."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from assembler.workspace import Workspace


def non_negative_int(text: str) -> int:
    """argparse type for counts where 0 means "choose for me" (a negative count would never run)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative (0 means one per CPU)")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not above 0")
    return value


def say_waiting(root: Path) -> None:
    """The workspace lock is held by another assemble process: say so once, on stderr."""
    from assembler.report.output import err_console

    err_console.print(f"waiting for another assemble process on {root} ...")


def open_workspace(args: argparse.Namespace) -> Workspace:
    """The workspace of ``--workspace`` (else the nearest one up from the cwd)."""
    from assembler.workspace import open_workspace as open_at

    return open_at(args.workspace, on_lock_wait=say_waiting)
