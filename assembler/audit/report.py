"""Audit reports for people, drawn with report.table alone (no rich markup): one table per PATH
(boxes on a terminal, plain columns piped), a legend for its abbreviations, a one-line summary
of what each ``--check`` would say, and a next step for every failing verdict; offending symbols
and DT_NEEDED with ``-v``. Everything fits the width (COLUMNS, the terminal's): free text wraps
between words with its indentation kept, and a table whose object paths cannot fit numbers its
rows and puts each path on a line of its own under its row (as `assemble patches` does at 80
columns), never cut.

Columns: shim = stable C-shim symbols imported, unst = unstable LibTorch C++ symbols imported,
min torch (``+?``: also uses shim symbols the table does not know), abi3 = limited API only and
within the wheel's abi3 tag, min py = the Python that added the newest limited-API symbol used
(``LEGEND`` is what a person reads).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

from assembler.audit import gate
from assembler.audit.gate import (
    PYTHON_FULL,
    PYTHON_LIMITED,
    VERDICT_STYLE,
    CheckKind,
    Finding,
    GateVerdict,
    Verdict,
    findings,
)
from assembler.audit.model import AuditReport, ElfReport
from assembler.report.table import Cell, TextTable, clean, is_terminal, layout, paint, paragraph, wrap, write

if TYPE_CHECKING:
    from rich.console import Console

HANG = "    "  # the indentation of a wrapped line under an indented one

# What each abbreviation of the table means: the column headers, then the cells that are not words.
LEGEND: dict[str, str] = {
    "#": "the object's number; its path is the line under its row",
    "kind": "ext: a Python extension (PyInit_*), lib: another shared library",
    "shim": "stable C-shim symbols (aoti_torch_*) it imports",
    "unst": "unstable LibTorch C++ symbols (at::, c10::, torch::) it imports",
    "min torch": "the oldest torch whose shim has every symbol it uses",
    "+?": "also uses shim symbols the torch table does not know (-v)",
    "abi3": "whether it keeps to the limited API within the wheel's abi3 tag",
    "yes": "limited API only, within the tag",
    "no (N)": "N symbols outside the limited API (-v lists them)",
    "too new": "limited API, but newer than the abi3 tag",
    "full API": "built for one CPython (no limited-API floor to report)",
    "min py": "the Python that added the newest limited-API symbol it uses",
}


def verdict_style(verdict: GateVerdict | Verdict | None) -> str:
    """Style words of a verdict as printed ("bold red"): a gate verdict by its first check (yellow
    when --allow-unstable let it through), one verdict by its own, "dim" for none."""
    if verdict is None:
        return "dim"
    if isinstance(verdict, GateVerdict):
        if verdict.allowed:
            return "yellow"
        verdict = verdict.first
    return VERDICT_STYLE.get(verdict, "red")


def _styled(text: str, style: str) -> Cell:
    """A table cell in a style's words ("bold red")."""
    return Cell(text, *style.split())


def _abi3_cell(e: ElfReport) -> Cell:
    if e.python_api == PYTHON_FULL:
        return Cell("full API", "dim")  # built for one CPython: no limited-API floor to report
    if e.abi3_violations:
        return Cell(f"no ({len(e.abi3_violations)})", "bold", "red")
    if e.newer_than_tag:
        return Cell("too new", "yellow")
    return Cell("yes", "green") if e.python_api == PYTHON_LIMITED and e.min_python else Cell("-", "dim")


class _Text:
    """The report's lines for one stream: wrapped to its width with a hanging indent, verdict
    words painted after wrapping (so an escape never counts toward a line's width)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.width, self.colour = layout(stream)
        self.parts: list[str] = []

    def line(self, text: str, hang: str = HANG, paint_words: Sequence[tuple[str, str]] = ()) -> None:
        """``text`` wrapped (``hang`` before each line after the first); each of ``paint_words``
        (word, style words), found as a whole word, painted where it first appears."""
        block = paragraph(text, self.width, hang=hang)
        if self.colour:
            for word, style in paint_words:
                pattern = re.compile(rf"(?<![\w-]){re.escape(clean(word))}(?![\w-])")
                block = pattern.sub(paint(clean(word), *style.split()).replace("\\", "\\\\"), block, count=1)
        self.parts.append(block)

    def raw(self, text: str) -> None:
        self.parts.append(text)

    def text(self) -> str:
        return "".join(self.parts)


def _details(e: ElfReport) -> list[tuple[str, str, str]]:
    """(line, its label, the label's style) per -v detail of one object."""
    lines: list[tuple[str, str, str]] = []

    def add(label: str, items: Sequence[str], style: str = "") -> None:
        if items:
            lines.append((f"  {e.path} {label}: " + ", ".join(items), label, style))

    if e.error is not None:
        lines.append((f"  {e.path} not audited: {e.error}", "not audited", "yellow"))
    add("unstable", e.unstable_symbols, "red")
    add("unresolved", [f"{s} (in {lib})" for s, lib in e.unresolved.items()], "red")
    add(f"min torch {e.min_torch} set by", e.min_torch_symbols)
    add("shim symbols unknown to the table", e.unknown_shim_symbols, "yellow")
    add("outside the limited API", e.abi3_violations, "red")
    add("newer than the abi3 tag", [f"{n} ({v})" for n, v in e.newer_than_tag.items()], "yellow")
    if not e.newer_than_tag:
        add(f"min Python {e.min_python} set by", e.min_python_symbols)
    add("needs", e.needed)
    return lines


def _table(report: AuditReport, width: int | None) -> tuple[TextTable, bool]:
    """The objects' table, and whether it is the narrow form: when an object's path (broken only
    after a ``/``) cannot share a line with the other columns even as plain columns, rows are
    numbered and :func:`_narrow_lines` puts each path on a line of its own under its row, whole."""
    headers = ("kind", "torch", "shim", "unst", "min torch", "abi3", "min py")
    wide = TextTable("object", *headers, text=("object",), right=("shim", "unst"))
    narrow = TextTable("#", *headers, right=("#", "shim", "unst"))
    for number, e in enumerate(report.extensions, start=1):
        cells = (
            "ext" if e.kind == "extension" else "lib" if e.kind == "library" else "?",
            _styled(Verdict.UNRESOLVED, VERDICT_STYLE[Verdict.UNRESOLVED]) if e.unresolved
            else _styled(e.torch_abi, VERDICT_STYLE[e.torch_abi]),
            str(e.stable_shim),
            Cell(str(e.unstable), "red") if e.unstable else "0",
            (e.min_torch or "-") + ("+?" if e.unknown_shim_symbols else ""),
            _abi3_cell(e),
            e.min_python or "-",
        )
        wide.add_row(e.path, *cells)
        narrow.add_row(str(number), *cells)
    if wide.fits(width, plain=True, breaking=True):  # boxed where boxes fit too (report_text decides)
        return wide, False
    return narrow, True


def _narrow_lines(table: TextTable, report: AuditReport, out: _Text) -> None:
    """The narrow table as plain columns (a row is one line: no column wraps), each row followed
    by its object's path, indented to the second column and broken only after a ``/`` when it is
    wider than the width."""
    header, *rows = table.render(out.width, out.colour, plain=True).splitlines()
    indent = " " * (len(str(len(rows))) + 2)
    out.raw(header + "\n")
    for row, e in zip(rows, report.extensions, strict=True):
        out.raw(row + "\n")
        room = None if out.width is None else max(1, out.width - len(indent))
        for line in wrap(clean(e.path), room) if room is not None else [clean(e.path)]:
            out.raw(indent + (paint(line, "bold") if out.colour else line) + "\n")


def _legend(report: AuditReport, narrow: bool) -> list[tuple[str, str]]:
    """The abbreviations this report's table shows, with what they mean."""
    shown = {"kind", "shim", "unst", "min torch", "abi3", "min py"} | ({"#"} if narrow else set())
    cells = {_abi3_cell(e).text for e in report.extensions}
    shown |= {"yes", "too new", "full API"} & cells
    if any(cell.startswith("no (") for cell in cells):
        shown.add("no (N)")
    if any(e.unknown_shim_symbols for e in report.extensions):
        shown.add("+?")
    return [(term, meaning) for term, meaning in LEGEND.items() if term in shown]


def _torch_counts(report: AuditReport) -> str:
    counts: dict[str, int] = {}
    for e in report.extensions:
        verdict = Verdict.UNRESOLVED.value if e.unresolved else str(e.torch_abi)
        counts[verdict] = counts.get(verdict, 0) + 1
    return ", ".join(f"{count} {verdict}" for verdict, count in counts.items())


def _tally(found: Sequence[Finding]) -> str:
    counts: dict[str, int] = {}
    for finding in found:
        counts[finding.verdict.value] = counts.get(finding.verdict.value, 0) + 1
    return ", ".join(f"{count} {verdict}" for verdict, count in counts.items())


def summary_line(report: AuditReport) -> str:
    """One line: how many objects and their torch verdicts, and what `--check torch` and
    `--check abi3` would say of this PATH (printed whether --check was given or not)."""
    count = len(report.extensions)
    objects = f"{count} object{'s' * (count != 1)}" + (f" ({_torch_counts(report)})" if count else "")
    checks = []
    for kind in (CheckKind.TORCH, CheckKind.ABI3):
        found = findings(report, kind)
        checks.append(f"--check {kind} " + (f"fails ({_tally(found)})" if found else "passes"))
    return f"summary: {objects}; {'; '.join(checks)}"


def _count(items: Sequence[object], noun: str) -> str:
    return f"{len(items)} {noun}{'s' * (len(items) != 1)}"


def next_steps(report: AuditReport) -> list[tuple[Verdict, str]]:
    """What to do about each failing verdict of ``report`` (every check kind): (the verdict, its line)."""
    found = findings(report, CheckKind.ALL)
    by_verdict: dict[tuple[Verdict, bool], list[Finding]] = {}
    for finding in found:
        by_verdict.setdefault((finding.verdict, finding.member is None), []).append(finding)
    steps: list[tuple[Verdict, str]] = []
    for (verdict, whole), group in by_verdict.items():
        step: str | None = None
        objects = _count(group, "object")
        if verdict == Verdict.UNSTABLE:
            declared = f"; it declares {report.requires_torch}" if report.requires_torch else ""
            step = (f"{verdict} ({objects}): it loads only on the exact torch it was built against: pin that "
                    f"torch (torch==X in Requires-Dist{declared}), or port it to the Stable ABI "
                    "(`assemble assess DEP`, then `assemble migrate DEP`)")
        elif verdict == Verdict.UNRESOLVED:
            step = (f"{verdict} ({objects}): link the library that defines each symbol, or build it against "
                    "the torch it runs with (`--torch-lib DIR` audits against that torch; -v lists the symbols)")
        elif verdict == Verdict.NON_ABI3 and whole:
            python = next((tag.split("-")[0] for tag in report.tags if tag.startswith("cp")), "one CPython")
            step = (f"{verdict} (the wheel): it is built for {python} alone: use `--check torch` to gate only "
                    "its torch ABI, or build it for the limited API (python-abi in [bundle] of deps.toml) "
                    "and tag it abi3")
        elif verdict == Verdict.NON_ABI3:
            step = (f"{verdict} ({objects}): replace the calls outside the limited API (-v lists them) with "
                    "limited-API ones, or ship a wheel per Python and gate it with `--check torch`")
        elif verdict == Verdict.ABI3_MISMATCH:
            step = (f"{verdict} ({objects}): tag the wheel abi3 for Python {report.min_python} "
                    f"(python-abi = \"{report.min_python}\" in [bundle] of deps.toml), or stop using the "
                    "newer symbols (-v lists them)")
        elif verdict == Verdict.FLOOR_TOO_LOW and whole:
            needed = max((v for v in (report.min_python, report.abi3_floor) if v), key=_version, default="?")
            step = (f"{verdict} (Requires-Python): declare Requires-Python >={needed}")
        elif verdict == Verdict.FLOOR_TOO_LOW:
            step = (f"{verdict} (Requires-Dist): declare torch>={report.min_torch}, the oldest torch "
                    "with every shim symbol it uses")
        elif verdict == Verdict.UNSAFE_PATH:
            step = (f"{verdict} ({_count(group, 'member')}): rebuild the wheel with every member inside its "
                    "install directory: pip refuses it as it is")
        elif verdict == Verdict.INCOMPLETE:
            step = (f"{verdict} ({objects}): it could not be read (the reason is in the FAIL line, or -v): "
                    "check the file is whole, or rebuild it")
        if step is not None:
            steps.append((verdict, step))
    return steps


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def report_text(report: AuditReport, stream: IO[str], verbose: bool = False, legend: bool = True) -> str:
    """What :func:`render` writes for ``report`` on ``stream``."""
    from assembler.report.output import settings

    out = _Text(stream)
    path = clean(report.path)  # an identifier: whole on its own line, never wrapped
    out.raw((paint(path, "bold") if out.colour else path) + "\n")
    torch = f"torch {report.torch_abi}" + (f" (min torch {report.min_torch})" if report.min_torch else "")
    if report.cpython_abi == Verdict.NO_PYTHON:  # no CPython symbol: any Python loads it, whatever the tags
        cpython = f"CPython {report.cpython_abi} (uses no CPython API)"
    else:
        tag = f"abi3 tag {report.abi3_floor}" if report.abi3_floor else "no abi3 tag"
        cpython = f"CPython {report.cpython_abi} ({tag}{f', needs {report.min_python}' if report.min_python else ''})"
    verdicts = [(report.torch_abi, VERDICT_STYLE[report.torch_abi]),
                (report.cpython_abi, VERDICT_STYLE[report.cpython_abi])]
    both = f"{torch}   {cpython}"
    for text in [both] if out.width is None or len(both) <= out.width else [torch, cpython]:  # one line where it fits
        out.line(text, hang="  ", paint_words=verdicts)
    unsafe = [(f"  {Verdict.UNSAFE_PATH}: {name}", Verdict.UNSAFE_PATH) for name in report.unsafe_names]
    if not report.extensions:
        out.raw("  no ELF shared objects found\n")
        for text, verdict in unsafe:
            out.line(text, paint_words=[(verdict, VERDICT_STYLE[verdict])])
        _closing(out, report)
        return out.text()
    table, narrow = _table(report, out.width)
    if narrow:
        _narrow_lines(table, report, out)
    else:  # boxes on a terminal where they fit, else plain columns
        plain = not is_terminal(stream) or not table.fits(out.width, breaking=True)
        out.raw(table.render(out.width, out.colour, plain=plain))
    for text, verdict in unsafe:
        out.line(text, paint_words=[(verdict, VERDICT_STYLE[verdict])])
    if report.not_elf:
        out.line(f"  not ELF, not audited: {', '.join(report.not_elf)}")
    for finding in gate.floor_findings(report):
        out.line(f"  {Verdict.FLOOR_TOO_LOW}: {finding.line}", paint_words=[(Verdict.FLOOR_TOO_LOW, "bold red")])
    if verbose:
        for e in report.extensions:
            for text, label, style in _details(e):
                out.line(text, paint_words=[(label, style)] if style else ())
    unknown = sum(1 for e in report.extensions if e.unknown_shim_symbols)
    if unknown and not verbose:
        out.line(f"  {unknown} object(s) use shim symbols the torch table does not know (min torch marked +?; "
                 "-v lists them; `assemble audit --refresh-torch-table` updates the table)")
    if verbose:
        for name, source in report.sources.items():
            out.line(f"  {name} data: {source}")
    if legend and settings.verbosity >= 0:
        _legend_lines(out, _legend(report, narrow))
    _closing(out, report)
    return out.text()


def _legend_lines(out: _Text, terms: list[tuple[str, str]]) -> None:
    """``legend:`` then one term a line, its meaning wrapped beside it."""
    size = max(len(term) for term, _ in terms)
    out.raw("legend:\n")
    room = None if out.width is None else max(20, out.width - size - 4)
    for term, meaning in terms:
        lines = wrap(meaning, room) if room is not None else [meaning]
        out.raw("".join(f"  {(term if index == 0 else ''):<{size}}  {line}\n" for index, line in enumerate(lines)))


def _closing(out: _Text, report: AuditReport) -> None:
    """The summary, then a next step per failing verdict."""
    out.line(summary_line(report), hang="  ", paint_words=[("passes", "green"), ("fails", "bold red")])
    for verdict, step in next_steps(report):
        out.line(f"  next: {step}", paint_words=[(str(verdict), verdict_style(verdict))])


def render(report: AuditReport, console: Console | None = None, verbose: bool = False, legend: bool = True) -> None:
    """Print ``report`` on ``console``'s stream (stdout); ``legend``: after the table (a run
    over several PATHs prints it once, after the last)."""
    stream = console.file if console is not None else sys.stdout
    write(report_text(report, stream, verbose, legend), stream)


def print_failures(found: Sequence[Finding], stream: IO[str] | None = None) -> None:
    """`--check`'s findings on ``stream`` (stderr), ``FAIL`` and the finding, wrapped to the
    width with the lines after the first indented (a finding names a PATH, an object and up to
    three symbols: hundreds of characters)."""
    stream = stream or sys.stderr
    width, colour = layout(stream)
    label = paint("FAIL", "red") if colour else "FAIL"
    write("".join(label + paragraph(f"FAIL {finding.line}", width, hang="     ")[4:] for finding in found), stream)
