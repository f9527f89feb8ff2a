"""The ``series`` file: one patch file name per line, '#' comments, order is apply order."""

from __future__ import annotations

from collections.abc import Sequence


def parse_series(text: str) -> list[tuple[int, str]]:
    """(line number, file name) for every entry of a series' text; options after the name
    (quilt's -p1) are ignored."""
    entries = []
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.split("#", 1)[0].strip()
        if stripped:
            entries.append((number, stripped.split()[0]))
    return entries


def render_series(names: list[str], previous: str | None = None) -> str:
    """The new series text; leading comment lines of the previous file are kept."""
    header = []
    if previous:
        for line in previous.splitlines():
            if line.startswith("#") or not line.strip():
                header.append(line)
            else:
                break
    return "\n".join([*header, *names]) + "\n"


def find_patch(names: Sequence[str], wanted: str) -> str | None:
    """The patch of ``names`` that ``wanted`` names: its file name, its number (``0002`` or
    ``2``), or a prefix or part of its name found in one patch only (``Port-add``), as quilt
    and gbp pq let you name one; None when none or several match."""
    if wanted in names:
        return wanted
    if wanted.isdigit():
        numbered = [name for name in names if name.split("-", 1)[0].isdigit()
                    and int(name.split("-", 1)[0]) == int(wanted)]
        return numbered[0] if len(numbered) == 1 else None
    for matches in ([n for n in names if n.startswith(wanted)], [n for n in names if wanted.lower() in n.lower()]):
        if len(matches) == 1:
            return matches[0]
        if matches:
            return None
    return None


def patch_label(names: Sequence[str], name: str) -> str:
    """How a narrow table names patch ``name`` of ``names``: its number (``0002``) when that
    names it alone (what `assemble show DEP 0002` and `rebase --drop 0002` take), else its file
    name."""
    number = name.split("-", 1)[0]
    return number if number.isdigit() and "-" in name and find_patch(names, number) == name else name
