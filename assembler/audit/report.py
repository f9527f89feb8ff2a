"""Audit reports for people: one table per PATH (report.table: boxes on a terminal, plain columns
piped, an object's path broken only after a ``/``); offending symbols and DT_NEEDED with ``-v``.

Columns: shim = stable C-shim symbols imported, unst = unstable LibTorch C++ symbols imported,
min torch (``+?``: also uses shim symbols the table does not know), abi3 = limited API only and
within the wheel's abi3 tag, min py = the Python that added the newest limited-API symbol used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from assembler.audit.gate import PYTHON_FULL, PYTHON_LIMITED, Verdict, floor_findings, is_allowed
from assembler.audit.model import AuditReport, ElfReport
from assembler.report.table import Cell, TextTable, clean

if TYPE_CHECKING:
    from rich.console import Console

VERDICT_STYLE: dict[Verdict, str] = {
    Verdict.STABLE: "green", Verdict.UNSTABLE: "bold red", Verdict.NO_TORCH: "dim",
    Verdict.ABI3: "green", Verdict.NON_ABI3: "bold red", Verdict.ABI3_MISMATCH: "yellow", Verdict.NO_PYTHON: "dim",
    Verdict.CLEAN: "green", Verdict.NOT_LIMITED: "bold red", Verdict.INCOMPLETE: "yellow",
    Verdict.NO_EXTENSIONS: "dim", Verdict.FLOOR_TOO_LOW: "bold red", Verdict.UNRESOLVED: "bold red",
    Verdict.UNSAFE_PATH: "bold red",
}


def verdict_style(verdict: str) -> str:
    """rich style of a verdict as printed: one verdict, several joined by ``+`` (styled by the
    first), one let through by --allow-unstable (yellow), or "-" for none."""
    if is_allowed(verdict):
        return "yellow"
    first = verdict.split("+")[0]
    try:
        return VERDICT_STYLE[Verdict(first)]
    except ValueError:
        return "dim" if verdict == "-" else "red"


def _styled(text: str, style: str) -> Cell:
    """A table cell in a rich-style string's words ("bold red")."""
    return Cell(text, *style.split())


def _abi3_cell(e: ElfReport) -> Cell:
    if e.python_api == PYTHON_FULL:
        return Cell("full API", "dim")  # built for one CPython: no limited-API floor to report
    if e.abi3_violations:
        return Cell(f"no ({len(e.abi3_violations)})", "bold", "red")
    if e.newer_than_tag:
        return Cell("too new", "yellow")
    return Cell("yes", "green") if e.python_api == PYTHON_LIMITED and e.min_python else Cell("-", "dim")


def _details(e: ElfReport) -> list[str]:
    lines = []

    def add(label: str, items: list[str] | tuple[str, ...]) -> None:
        if items:
            lines.append(f"  [bold]{escape(e.path)}[/] {label}: " + escape(", ".join(items)))

    if e.error is not None:
        lines.append(f"  [bold]{escape(e.path)}[/] [yellow]not audited[/]: " + escape(e.error))
    add("[red]unstable[/]", e.unstable_symbols)
    add("[red]unresolved[/]", [f"{s} (in {lib})" for s, lib in e.unresolved.items()])
    add(f"min torch {e.min_torch} set by", e.min_torch_symbols)
    add("[yellow]shim symbols unknown to the table[/]", e.unknown_shim_symbols)
    add("[red]outside the limited API[/]", e.abi3_violations)
    add("[yellow]newer than the abi3 tag[/]", [f"{n} ({v})" for n, v in e.newer_than_tag.items()])
    if not e.newer_than_tag:
        add(f"min Python {e.min_python} set by", e.min_python_symbols)
    add("needs", e.needed)
    return lines


def render(report: AuditReport, console: Console, verbose: bool = False) -> None:
    torch = f"[{VERDICT_STYLE[report.torch_abi]}]{report.torch_abi}[/]"
    if report.min_torch:
        torch += f" (min torch {report.min_torch})"
    cpython = f"[{VERDICT_STYLE[report.cpython_abi]}]{report.cpython_abi}[/]"
    tag = f"abi3 tag {report.abi3_floor}" if report.abi3_floor else "no abi3 tag"
    py = f", needs {report.min_python}" if report.min_python else ""
    console.print(f"[bold]{escape(clean(report.path))}[/]", soft_wrap=True, highlight=False)
    console.print(f"torch {torch}   CPython {cpython} ({tag}{py})", highlight=False)
    # The object's path is free text broken only after a "/", so no name is split; the rest never wrap.
    table = TextTable("object", "kind", "torch", "shim", "unst", "min torch", "abi3", "min py", text=("object",),
                      right=("shim", "unst"))
    for e in report.extensions:
        min_torch = (e.min_torch or "-") + ("+?" if e.unknown_shim_symbols else "")
        table.add_row(
            e.path,
            "ext" if e.kind == "extension" else "lib" if e.kind == "library" else "?",
            _styled(Verdict.UNRESOLVED, VERDICT_STYLE[Verdict.UNRESOLVED]) if e.unresolved else _styled(e.torch_abi, VERDICT_STYLE[e.torch_abi]),
            str(e.stable_shim),
            Cell(str(e.unstable), "red") if e.unstable else "0",
            min_torch,
            _abi3_cell(e),
            e.min_python or "-",
        )
    if not report.extensions:
        console.print("  no ELF shared objects found")
        for name in report.unsafe_names:
            console.print(f"  [{VERDICT_STYLE[Verdict.UNSAFE_PATH]}]{Verdict.UNSAFE_PATH}[/]: {escape(name)}", soft_wrap=True)
        return
    table.print(console.file)
    for name in report.unsafe_names:
        console.print(f"  [{VERDICT_STYLE[Verdict.UNSAFE_PATH]}]{Verdict.UNSAFE_PATH}[/]: {escape(name)}", soft_wrap=True)
    if report.not_elf:
        console.print(f"  [dim]not ELF, not audited: {escape(', '.join(report.not_elf))}[/]", soft_wrap=True)
    for finding in floor_findings(report):
        console.print(f"  [{VERDICT_STYLE[Verdict.FLOOR_TOO_LOW]}]{Verdict.FLOOR_TOO_LOW}[/]: {escape(finding.line)}", soft_wrap=True)
    details = [line for e in report.extensions for line in _details(e)] if verbose else []
    for line in details:
        console.print(line, soft_wrap=True)
    unknown = sum(1 for e in report.extensions if e.unknown_shim_symbols)
    if unknown and not verbose:
        console.print(
            f"  [yellow]{unknown} object(s) use shim symbols the torch table does not know[/] "
            "(min torch marked +?; -v lists them; `assemble audit --refresh-torch-table` updates the table)",
            soft_wrap=False,  # prose: wrapped between words where a width is known (a terminal, COLUMNS)
        )
    if verbose:
        for name, source in report.sources.items():
            console.print(f"  [dim]{name} data: {escape(source)}[/]", soft_wrap=True)
