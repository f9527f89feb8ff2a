"""Plain-text tables for the everyday commands (`assemble deps`, `assemble patches`), without rich.

Why our own code: start-up has a 100 ms budget end to end (issue 12), and importing
``rich.console`` + ``rich.table`` + ``rich.markup`` costs ~39 ms of wall time on top of what
`assemble` already loads (~57 ms from a bare interpreter; `python -X importtime` counts ~60 ms)
on the lead machine, while `assemble deps` as a whole took ~180 ms. The developers' guide allows
our own code in place of a library only where a benchmark shows the library is the bottleneck:
benchmarks/startup.py is that benchmark. This module imports nothing beyond what is already
loaded (``unicodedata`` only for non-ASCII cells) and draws what rich's default Table drew
(box.HEAVY_HEAD), so the output looks as before.

Cells are data, never markup: a control character (an escape sequence in a commit subject, a
newline) is shown escaped (``\\x1b``) or as a space, so no cell can drive the terminal.

Columns are identifiers (SHAs, paths, URLs, names, numbers: never wrapped nor cut) or free
text (subjects, evidence, a source: wrapped between words to fit the width). A word in free text
(a URL inside evidence) is kept whole while the table can fit by wrapping words alone; when only
breaking long words makes it fit, a word breaks after a ``/`` so every path component stays whole;
nothing is ever cut inside a name. Without a terminal there is no width to fit (unless COLUMNS says
one), so a CI log gets each row on one line.

On a terminal a table is drawn in boxes; elsewhere (a pipe, a file, a CI log) it is plain columns,
as uv, pip and cibuildwheel print them: a header row, then the rows, columns two spaces apart, no
box characters, so ``grep``/``awk`` read it as they read ``pip list``.

Every command's table is a TextTable (rich draws only progress): a title of one or more lines
(wrapped between words when a width is known), numbers right-aligned (``right=``), and lines
under a row (``add_row(..., notes=[...])``) that span from the ``notes_at`` column to the right
edge: what `assemble patches` uses at 80 columns, where a patch file name (up to 64 characters,
git format-patch's limit) cannot share a line with its subject and evidence.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING

from assembler.report.output import clean as clean  # re-exported: cells and the commands that draw them

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import IO

# SGR codes of the styles a cell may carry.
STYLES = {"bold": "1", "dim": "2", "italic": "3", "red": "31", "green": "32", "yellow": "33", "blue": "34"}
RESET = "\x1b[0m"

# rich's box.HEAVY_HEAD: a heavy top and header, a light body.
TOP = ("┏", "━", "┳", "┓")
HEAD = ("┃", "┃", "┃")  # left edge, between columns, right edge
HEAD_RULE = ("┡", "━", "╇", "┩")
BODY = ("│", "│", "│")
BOTTOM = ("└", "─", "┴", "┘")
GAP = "  "  # between the plain (piped) form's columns

# A word's pieces, each ending after its run of slashes: where a too-long URL or path may break.
PATH_PIECE = re.compile(r"[^/]*/+|[^/]+")


def cell_width(text: str) -> int:
    """Columns ``text`` takes on a terminal: wide (East Asian W/F) characters take two,
    combining marks none."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def paint(text: str, *styles: str) -> str:
    """``text`` in ``styles`` (names in STYLES) as SGR escapes; ``text`` as is without styles."""
    if not styles:
        return text
    return f"\x1b[{';'.join(STYLES[style] for style in styles)}m{text}{RESET}"


class Cell:
    """A cell's text and the styles it is drawn in when colour is on."""

    __slots__ = ("styles", "text")

    def __init__(self, text: str, *styles: str) -> None:
        unknown = [style for style in styles if style not in STYLES]
        if unknown:
            raise ValueError(f"unknown style {unknown[0]!r} (known: {', '.join(STYLES)})")
        self.text = clean(text)
        self.styles = styles


def pieces(word: str) -> list[str]:
    """``word`` split after each run of ``/``: the places a URL or path may break (never inside a
    component)."""
    return PATH_PIECE.findall(word) or [word]


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` columns, broken between words (runs of spaces
    collapse); a word wider than ``width`` breaks after a ``/`` (its pieces join without a space),
    and a piece wider than ``width`` keeps a line of its own, uncut."""
    lines: list[str] = []
    line, used = "", 0
    for word in text.split():
        parts = [word] if cell_width(word) <= width else pieces(word)
        for index, part in enumerate(parts):
            gap = 0 if index else 1  # pieces of one word join without a space
            size = cell_width(part)
            if line and used + gap + size <= width:
                line, used = line + " " * gap + part, used + gap + size
                continue
            if line:
                lines.append(line)
            line, used = part, size
    lines.append(line)
    return lines


def paragraph(text: str, width: int | None, hang: str = "") -> str:
    """``text`` (cleaned) as lines of at most ``width`` columns, broken between words, the lines
    after the first indented by ``hang``; its leading spaces kept; one line, as it is, when it
    fits or there is no width (a pipe without COLUMNS). Ends in a newline."""
    text = clean(text)
    if width is None or cell_width(text) <= width:  # as it is (its spacing kept) where it fits
        return text + "\n"
    lead = text[:len(text) - len(text.lstrip(" "))]
    first, *more = wrap(text.strip(" "), max(1, width - len(lead)))
    rest = wrap(" ".join(more), max(1, width - len(hang))) if more else []  # the rest re-wrapped to its own room
    return "".join(line + "\n" for line in [lead + first, *(hang + line for line in rest)])


def narrow(widths: list[int], least: list[int], limit: int) -> list[int]:
    """``widths`` with the widest columns that may give way (wider than their ``least``) narrowed
    one column at a time until they sum to ``limit`` or none can give more."""
    widths = list(widths)
    excess = sum(widths) - limit
    while excess > 0:
        narrowable = [index for index, size in enumerate(widths) if size > least[index]]
        if not narrowable:
            break
        widest = max(narrowable, key=lambda index: widths[index])
        widths[widest] -= 1
        excess -= 1
    return widths


class TextTable:
    """A table of ``headers``: those named in ``text`` are free text and wrap between words,
    every other column holds identifiers and is never wrapped nor cut.

    ``edge=False`` draws no outer border and no padding outside the first and last columns
    (what `assemble patches` prints under each dependency)."""

    def __init__(self, *headers: str, text: Iterable[str] = (), title: str | Sequence[str] | None = None,
                 edge: bool = True,
                 right: Iterable[str] = (), notes_at: str | None = None) -> None:
        free, flush_right = set(text), set(right)
        for kind, names in (("free-text", free), ("right-aligned", flush_right), ("notes", {notes_at} - {None})):
            unknown = names - set(headers)
            if unknown:
                raise ValueError(f"{kind} columns {sorted(unknown)} "  # type: ignore[type-var]
                                 f"are not among {list(headers)}")
        self.headers = [clean(header) for header in headers]
        self.free = [header in free for header in headers]
        self.right = [header in flush_right for header in headers]
        # A title is one line, or a sequence of lines; a newline inside one is data, shown as a space.
        self.title = (None if title is None else [clean(title)] if isinstance(title, str)
                      else [clean(line) for line in title])
        self.edge = edge
        self.notes_at = 0 if notes_at is None else list(headers).index(notes_at)
        self.rows: list[list[Cell]] = []
        self.notes: list[list[Cell]] = []

    def add_row(self, *cells: str | Cell, notes: Iterable[str | Cell] = ()) -> None:
        """A row; ``notes``: lines under it from the ``notes_at`` column to the right edge, each
        wrapped as free text (a word wider than the room keeps a line of its own, whole)."""
        if len(cells) != len(self.headers):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.headers)} columns")
        self.rows.append([cell if isinstance(cell, Cell) else Cell(cell) for cell in cells])
        self.notes.append([note if isinstance(note, Cell) else Cell(note) for note in notes])

    def fits(self, width: int | None, plain: bool = False, breaking: bool = False) -> bool:
        """Whether the table fits ``width`` with free text wrapped between words only (no word
        broken, no identifier over the edge), or with ``breaking`` also with long words broken
        after a ``/``; any table fits where there is no width."""
        if width is None:
            return True
        _, by_word, by_piece = self._least()
        return sum(by_piece if breaking else by_word) <= width - self.overhead(plain)

    def widths(self, width: int | None, plain: bool = False) -> list[int]:
        """Each column's width: as wide as its content, then, when the table is wider than
        ``width``, the widest free-text columns narrowed one column at a time down to their
        longest word (their header's words count: the header wraps too); if that is not enough
        and breaking long words after a ``/`` makes the table fit, down to their longest path
        component."""
        natural, by_word, by_piece = self._least()
        if width is None:
            return natural
        limit = width - self.overhead(plain)
        widths = narrow(natural, by_word, limit)
        if sum(widths) > limit:
            broken = narrow(widths, by_piece, limit)
            if sum(broken) <= limit:  # breaking words only where that makes the table fit
                widths = broken
        return widths

    def _least(self) -> tuple[list[int], list[int], list[int]]:
        """Per column: its natural width, the least it takes wrapped between words, and the least
        with long words broken after a ``/``."""
        natural, by_word, by_piece = [], [], []
        for index, header in enumerate(self.headers):
            cells = [row[index].text for row in self.rows]
            natural.append(max([cell_width(header), *(cell_width(cell) for cell in cells)]))
            words = [word for cell in cells for word in cell.split()]
            if not self.free[index]:
                by_word.append(natural[-1])
                by_piece.append(natural[-1])
                continue
            words += header.split()  # a free-text column's header wraps too
            by_word.append(max([1, *(cell_width(word) for word in words)]))
            by_piece.append(max([1, *(cell_width(part) for word in words for part in pieces(word))]))
        return natural, by_word, by_piece

    def overhead(self, plain: bool = False) -> int:
        """Columns taken by borders and padding: one space each side of a cell, a rule between
        columns, and the outer borders (with ``edge``) or no outer padding (without); plain, only
        the gaps between columns."""
        count = len(self.headers)
        if plain:
            return len(GAP) * (count - 1)
        return 3 * count - 1 + (2 if self.edge else -2)

    def render(self, width: int | None = None, colour: bool = False, plain: bool = False) -> str:
        """The table as text, ending in a newline; fitted to ``width`` columns when given (only
        free text gives way), ANSI colour when ``colour``; ``plain``: without boxes (for a pipe)."""
        widths = self.widths(width, plain)
        lines: list[str] = []
        for title in self.title or ():
            for line in wrap(title, width) if width is not None else [title]:
                lines.append(paint(line, "italic") if colour else line)
        if self.edge and not plain:
            lines.append(self._rule(TOP, widths))
        bold: list[tuple[str, ...]] = [("bold",)] * len(self.headers)
        folded_header = [wrap(header, size) if free else [header]
                         for header, size, free in zip(self.headers, widths, self.free, strict=True)]
        for number in range(max(len(header_lines) for header_lines in folded_header)):
            texts = [header_lines[number] if number < len(header_lines) else "" for header_lines in folded_header]
            lines.append(self._line(HEAD, texts, widths, bold, colour, plain))
        if not plain:
            lines.append(self._rule(HEAD_RULE, widths))
        for row, notes in zip(self.rows, self.notes, strict=True):
            folded = [wrap(cell.text, size) if free else [cell.text]
                      for cell, size, free in zip(row, widths, self.free, strict=True)]
            for number in range(max(len(cell_lines) for cell_lines in folded)):
                texts = [cell_lines[number] if number < len(cell_lines) else "" for cell_lines in folded]
                lines.append(self._line(BODY, texts, widths, [cell.styles for cell in row], colour, plain))
            for note in notes:
                lines.extend(self._note(note, widths, colour, plain))
        if self.edge and not plain:
            lines.append(self._rule(BOTTOM, widths))
        return "\n".join(lines) + "\n"

    def _note(self, note: Cell, widths: list[int], colour: bool, plain: bool) -> list[str]:
        """The lines of a note under a row: empty cells before the ``notes_at`` column, then the
        note wrapped across the rest of the row (the rules between those columns left out)."""
        at = self.notes_at
        if plain:
            room = sum(widths[at:]) + len(GAP) * (len(widths) - at - 1)
        else:
            room = sum(widths[at:]) + 3 * (len(widths) - at - 1)
        lines = []
        for text in wrap(note.text, room):
            body = ((paint(text, *note.styles) if colour and note.styles else text)
                    + " " * max(0, room - cell_width(text)))
            if plain:
                lines.append(GAP.join([*[" " * size for size in widths[:at]], body]).rstrip(" "))
            elif self.edge:
                lines.append(BODY[0] + " " + "".join(f"{' ' * size} {BODY[1]} " for size in widths[:at]) + body + " "
                             + BODY[2])
            else:
                lines.append(f" {BODY[1]} ".join([*[" " * size for size in widths[:at]], body]).rstrip(" "))
        return lines

    def _rule(self, box: tuple[str, str, str, str], widths: list[int]) -> str:
        left, fill, cross, right = box
        if self.edge:
            return left + cross.join(fill * (size + 2) for size in widths) + right
        last = len(widths) - 1  # no outer padding: the first and last cells have a space on one side only
        return cross.join(fill * (size + (index > 0) + (index < last)) for index, size in enumerate(widths))

    def _line(self, box: tuple[str, str, str], texts: list[str], widths: list[int], styles: list[tuple[str, ...]],
              colour: bool, plain: bool = False) -> str:
        left, between, right = box
        cells = []
        for text, size, style, flush_right in zip(texts, widths, styles, self.right, strict=True):
            pad = " " * (size - cell_width(text))
            shown = paint(text, *style) if colour and text else text
            cells.append(pad + shown if flush_right else shown + pad)
        if plain:
            return GAP.join(cells).rstrip(" ")
        if self.edge:
            return left + " " + f" {between} ".join(cells) + " " + right
        return f" {between} ".join(cells).rstrip(" ")

    def print(self, stream: IO[str] | None = None) -> None:
        """Write the table to ``stream`` (stdout): boxed and fitted to a terminal (plain columns
        when boxes cannot fit it), plain columns elsewhere (fitted only when COLUMNS is set),
        coloured as --color and NO_COLOR say."""
        stream = stream or sys.stdout
        write(self.text_for(stream), stream)

    def text_for(self, stream: IO[str] | None = None) -> str:
        """What print() writes to ``stream`` (stdout), for a command that prints the table
        inside a longer text (`assemble review`, `assemble assess`)."""
        stream = stream or sys.stdout
        width, colour = layout(stream)
        # Boxes where they fit; a terminal too narrow for them (8 columns take 25 for borders,
        # plain columns 14) gets plain columns rather than a line over its edge.
        plain = not is_terminal(stream) or not self.fits(width, breaking=True)
        return self.render(width, colour, plain=plain)


def texts_for(tables: Sequence[TextTable], stream: IO[str] | None = None) -> list[str]:
    """What text_for() gives each of ``tables``, all in one style: a command printing several
    tables in one output (`assemble review`, `assemble assess`) boxes them only when every one
    fits boxed, else draws them all as plain columns (it drew boxes, then plain columns where
    one table could not be boxed)."""
    stream = stream or sys.stdout
    width, colour = layout(stream)
    plain = not is_terminal(stream) or not all(table.fits(width, breaking=True) for table in tables)
    return [table.render(width, colour, plain=plain) for table in tables]


def write(text: str, stream: IO[str] | None = None) -> None:
    """``text`` on ``stream`` (stdout), flushed. When the reader has gone (`assemble deps | head`)
    stop quietly with exit 1, as rich's console did, rather than report a broken pipe."""
    stream = stream or sys.stdout
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        import contextlib

        with contextlib.suppress(AttributeError, ValueError, OSError):  # what is still buffered would fail at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        raise SystemExit(1) from None


def is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def layout(stream: IO[str]) -> tuple[int | None, bool]:
    """(the width to fit, whether to colour) for output on ``stream``. On a terminal the width
    is COLUMNS, else the terminal's; elsewhere COLUMNS when set, else none: a piped table is as
    wide as its content, so a CI log never has a row broken. Colour: report.output.color_enabled
    (--color, NO_COLOR)."""
    from assembler.report.output import color_enabled, terminal_columns

    terminal = is_terminal(stream)
    return terminal_columns(stream) if terminal or os.environ.get("COLUMNS") else None, color_enabled(terminal)


def write_error(message: str, hint: str | None = None, stream: IO[str] | None = None) -> None:
    """``error: MESSAGE`` and ``hint: HINT`` on ``stream`` (stderr), the one way errors are shown
    to people. Off a terminal each is one line, never wrapped (a CI log, grep); on a terminal
    each wraps between words to its width, the lines after the first under the text (an error
    naming a path and a commit ran to 180 columns, broken by the terminal mid-word). Bold red
    when colour is on. Without rich (start-up): this module's wrapping and SGR codes. It lives
    here, not in report.output, which this module imports (no cycle)."""
    from assembler.report.output import color_enabled, terminal_columns

    stream = stream or sys.stderr
    terminal = is_terminal(stream)
    width = terminal_columns(stream) if terminal else None
    colour = color_enabled(terminal)
    text = ""
    for label, words, styles in (("error:", message, ("bold", "red")), ("hint:", hint, ("bold",))):
        if words is None:
            continue
        lines = paragraph(f"{label} {clean(words)}", width, hang=" " * (len(label) + 1))
        text += paint(label, *styles) + lines[len(label):] if colour else lines
    write(text, stream)
