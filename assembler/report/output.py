"""Shared consoles and JSON emitter so every command prints the same way.

``console`` and ``err_console`` are created on first use (module ``__getattr__``): importing
rich costs ~30 ms, which a ``--json`` run or a no-op should not pay.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    console: Console
    err_console: Console


@functools.cache
def _console(stderr: bool) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def __getattr__(name: str) -> Console:
    if name in ("console", "err_console"):
        return _console(name == "err_console")
    raise AttributeError(name)


def emit_json(data: Any) -> None:
    """JSON goes to stdout alone (progress and notes go to stderr), so CI can pipe it."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def short(sha: str | None) -> str:
    return sha[:12] if sha else "-"
