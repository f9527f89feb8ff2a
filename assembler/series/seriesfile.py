"""The ``series`` file: one patch file name per line, '#' comments, order is apply order."""

from __future__ import annotations


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
