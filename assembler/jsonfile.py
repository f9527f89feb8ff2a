"""Reading JSON data files: one place that turns what the parser cannot take into a one-line error.

Data files (a wheel's assembler.json or SBOM, a checkout's state, a rebase journal, evidence and
check results in the cache) are input, never trusted. ``json.loads`` of ``[[[[...]]]]`` a few
thousand levels deep raises RecursionError, which reached the CLI as exit 70; a document that
parses but nests hundreds of levels deep can still exhaust the stack of code that walks it.
Here both are an ``InputError`` (exit 2) naming the file, as is text that is not JSON.

``JsonFileError`` is also a ``ValueError``, so a reader that treats a corrupt cache record as
absent (``except ValueError``) keeps doing so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from assembler.errors import InputError

MAX_DEPTH = 200  # arrays and objects inside each other; no file assemble reads nests a tenth of that


class JsonFileError(InputError, ValueError):
    """A data file that is not JSON, or nests deeper than ``MAX_DEPTH``."""


def loads(data: str | bytes, where: object, hint: str | None = None) -> Any:
    """The JSON value of ``data`` (the contents of ``where``, which messages name)."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise JsonFileError(f"{where}: JSON nested too deeply to read (more than {MAX_DEPTH} levels)",
                            hint=hint) from None
    except UnicodeDecodeError as error:
        raise JsonFileError(f"{where}: not JSON (not UTF-8 text: {error.reason} at byte {error.start})",
                            hint=hint) from None
    except ValueError as error:
        raise JsonFileError(f"{where}: not JSON ({error})", hint=hint) from None
    if _opens(data) > MAX_DEPTH and depth(value) > MAX_DEPTH:
        raise JsonFileError(f"{where}: JSON nested more than {MAX_DEPTH} levels deep", hint=hint)
    return value


def load(path: Path, hint: str | None = None, where: object | None = None) -> Any:
    """The JSON value of the file at ``path``; OSError as the file system raised it (the caller
    knows whether a missing file is an error)."""
    return loads(path.read_bytes(), path if where is None else where, hint)


def depth(value: Any) -> int:
    """How many arrays and objects are nested at the deepest point of ``value`` (walked without
    recursion: the value may be deeper than the stack)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _opens(data: str | bytes) -> int:
    """An upper bound of the nesting depth, at C speed: every ``[`` and ``{`` (strings included)."""
    if isinstance(data, bytes):
        return data.count(b"[") + data.count(b"{")
    return data.count("[") + data.count("{")
