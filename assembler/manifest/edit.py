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


def add_dependency(path: Path, name: str, values: dict[str, str], comment: str | None = None) -> None:
    """Append a [deps.<name>] table (keys in the order given, ``comment`` above them) to the
    manifest at ``path``, keeping every other byte but a ``#:schema`` first line added when the
    file names no schema; ManifestError if it is there already."""
    document = tomlkit.parse(path.read_text(encoding="utf-8"))
    deps = document.get("deps")
    if deps is None:
        deps = tomlkit.table(is_super_table=True)
        document["deps"] = deps
    if name in deps:
        raise ManifestError(f"{path}: [deps.{name}] is already there",
                            hint=f"edit it in deps.toml, or `assemble rebase {name} --onto SHA` to move its pin")
    table = tomlkit.table()
    if comment is not None:
        table.add(tomlkit.comment(comment.replace("\n", " ")))
    for key, value in values.items():
        table[key] = value
    deps[name] = table
    text = tomlkit.dumps(document)
    from assembler.manifest.schema import directive, has_directive

    if not has_directive(text):  # editors find the schema by this line (taplo's #:schema); one already there stays
        text = f"{directive(path)}\n{text}"
    atomic_write_if_changed(path, text)


def new_manifest(name: str, version: str) -> str:
    """The text of a new workspace's deps.toml: [bundle] with the defaults spelled out and
    commented, no dependency yet (`assemble add` appends them)."""
    document = tomlkit.document()
    document.add(tomlkit.comment("The workspace manifest: every pin, series, recipe and wheel placement "
                                 "(docs/reference/deps-toml.md)."))
    bundle = tomlkit.table()
    bundle["name"] = name
    bundle["name"].comment("distribution name of the merged wheel")
    bundle["version"] = version
    bundle["version"].comment("+cuXYZ is added at build time")
    bundle["python-abi"] = "3.9"
    bundle["python-abi"].comment("Py_LIMITED_API floor -> cp39-abi3")
    bundle["torch-target"] = "2.10"
    bundle["torch-target"].comment("TORCH_TARGET_VERSION floor; a dependency may raise it")
    document["bundle"] = bundle
    return tomlkit.dumps(document)
