"""Edits to deps.toml through tomlkit, so comments, key order and formatting survive."""

from __future__ import annotations

from pathlib import Path

import tomlkit

from assembler.errors import ManifestError
from assembler.fsutil import atomic_write_if_changed


def update_dependency(path: Path, name: str, values: dict[str, str | None], note: str | None = None) -> bool:
    """Set (or, for None, remove) keys of [deps.<name>], and add ``note`` as a comment line at
    the end of the table (a rebase records the fork it moved off); returns whether the file changed."""
    text = path.read_text(encoding="utf-8")
    document = tomlkit.parse(text)
    try:
        table = document["deps"][name]
    except KeyError:
        raise ManifestError(f"{path}: no [deps.{name}] table to update") from None
    for key, value in values.items():
        if value is None:
            if key in table:
                del table[key]
        else:
            table[key] = value
    if note is not None:
        table.add(tomlkit.comment(note.replace("\n", " ")))
    return atomic_write_if_changed(path, tomlkit.dumps(document))
