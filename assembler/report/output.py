"""Shared console and JSON emitters so every command prints the same way."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def emit_json(data: Any) -> None:
    """JSON goes to stdout alone (progress and notes go to stderr), so CI can pipe it."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def short(sha: str | None) -> str:
    return sha[:12] if sha else "-"
