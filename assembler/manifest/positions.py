"""Where each key, table and array item of a TOML text is: a scanner that reads TOML's own
grammar (basic, literal and multi-line strings, comments, arrays, inline tables, dotted keys,
``[table]`` and ``[[array of tables]]`` headers), so a ``[`` inside a string is never a header.

tomllib keeps no positions and tomlkit keeps none either, so this runs only when an error is
reported (never on the start-up path of a valid manifest): the first pass of a valid text
(which tomllib already accepted) maps each key path to its line and column; on a text tomllib
refused it names what was left open, the string, array or inline table, and where it began.

A path is a tuple of keys and array indices: ``("deps", "x", "build", "extensions", 1, "name")``
is the ``name`` of the second ``[[deps.x.build.extensions]]`` block."""

from __future__ import annotations

import bisect
import contextlib
from typing import NamedTuple

Path = tuple[str | int, ...]
_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_SCALAR_END = frozenset(",]}#\n")


class Unclosed(Exception):
    """A string, array or inline table that the text never closes (what tomllib reports as an
    illegal character or at "end of document")."""

    def __init__(self, what: str, offset: int, closer: str) -> None:
        super().__init__(what)
        self.what, self.offset, self.closer = what, offset, closer


class _Stop(Exception):
    """Text the scanner does not read as TOML: it stops there (tomllib says why)."""


class Spot(NamedTuple):
    line: int  # 1-based
    column: int  # 1-based, in characters


class Positions:
    """The positions of a TOML text's keys (``spot``) and of its array items' string values."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._starts = [0, *(i + 1 for i, char in enumerate(text) if char == "\n")]
        self.spots: dict[Path, int] = {}  # path -> offset of its key, header or array item
        self.strings: dict[Path, str] = {}  # path of an array item -> its value, when a string
        self._last: dict[Path, int] = {}  # an array of tables -> the index of its last block
        self._at = 0

    def spot(self, offset: int) -> Spot:
        line = bisect.bisect_right(self._starts, offset)
        return Spot(line, offset - self._starts[line - 1] + 1)

    def scan(self) -> Positions:
        """Read the whole text; raises Unclosed for a string, array or inline table left open.
        Anything else that is not TOML ends the scan quietly (the positions read so far stay)."""
        with contextlib.suppress(_Stop):
            self._document()
        return self

    def find(self, path: Path) -> Spot:
        """The position of ``path``, else of its nearest ancestor that has one (a missing key
        is named at its table's header), else 1:1."""
        for end in range(len(path), 0, -1):
            offset = self.spots.get(path[:end])
            if offset is not None:
                return self.spot(offset)
        return Spot(1, 1)

    def find_string(self, path: Path, value: str) -> Spot:
        """The position of the item ``value`` in the array at ``path`` (else of the array's key)."""
        index = 0
        while (*path, index) in self.spots:
            if self.strings.get((*path, index)) == value:
                return self.spot(self.spots[(*path, index)])
            index += 1
        return self.find(path)

    # the grammar

    def _peek(self, count: int = 1) -> str:
        return self.text[self._at:self._at + count]

    def _blank(self, newlines: bool) -> None:
        """Skip spaces, tabs and comments (and line breaks when ``newlines``)."""
        text = self.text
        while self._at < len(text):
            char = text[self._at]
            if char in " \t\r" or (newlines and char == "\n"):
                self._at += 1
            elif char == "#":
                end = text.find("\n", self._at)
                self._at = len(text) if end < 0 else end
            else:
                return

    def _document(self) -> None:
        table: Path = ()
        while True:
            self._blank(newlines=True)
            if self._at >= len(self.text):
                return
            start = self._at
            if self._peek(2) == "[[":
                self._at += 2
                keys = self._key_parts()
                self._expect("]]")
                table = (*self._resolve(keys[:-1]), keys[-1])
                index = self._last.get(table, -1) + 1
                self._last[table] = index
                self._mark(table, start)
                table = (*table, index)
                self.spots[table] = start
            elif self._peek() == "[":
                self._at += 1
                keys = self._key_parts()
                self._expect("]")
                table = self._resolve(keys)
                self._mark(table, start)
                self.spots[table] = start
            else:
                self._pair(table)

    def _resolve(self, keys: list[str]) -> Path:
        """A header's keys as a path: each array of tables on the way is its last block."""
        path: Path = ()
        for key in keys:
            path = (*path, key)
            if path in self._last:
                path = (*path, self._last[path])
        return path

    def _mark(self, path: Path, offset: int) -> None:
        """``offset`` for ``path`` and for each ancestor not yet placed (tables made implicitly)."""
        for end in range(1, len(path) + 1):
            self.spots.setdefault(path[:end], offset)

    def _expect(self, closer: str) -> None:
        self._blank(newlines=False)
        if self._peek(len(closer)) != closer:
            raise _Stop
        self._at += len(closer)

    def _key_parts(self) -> list[str]:
        """A dotted key: bare, "basic" or 'literal' parts."""
        parts = []
        while True:
            self._blank(newlines=False)
            char = self._peek()
            if char in ('"', "'"):
                start = self._at
                self._string_token(multiline=False)
                parts.append(_decode(self.text[start:self._at]))
            else:
                start = self._at
                while self._at < len(self.text) and self.text[self._at] in _BARE:
                    self._at += 1
                if self._at == start:
                    raise _Stop
                parts.append(self.text[start:self._at])
            self._blank(newlines=False)
            if self._peek() != ".":
                return parts
            self._at += 1

    def _pair(self, table: Path) -> None:
        """``key = value`` in ``table`` (dotted keys make the tables between)."""
        start = self._at
        path = (*table, *self._key_parts())
        self._mark(path, start)
        self._expect("=")
        self._blank(newlines=False)
        self._value(path)

    def _value(self, path: Path) -> str | None:
        """Skip one value; returns it when it is a string."""
        char = self._peek()
        if char in ('"', "'"):
            start = self._at
            self._string_token(multiline=True)
            return _decode(self.text[start:self._at])
        if char == "[":
            self._array(path)
        elif char == "{":
            self._inline_table(path)
        else:
            start = self._at
            while self._at < len(self.text) and self.text[self._at] not in _SCALAR_END:
                self._at += 1
            if not self.text[start:self._at].strip():
                raise _Stop
        return None

    def _array(self, path: Path) -> None:
        opened = self._at
        self._at += 1
        index = 0
        while True:
            self._blank(newlines=True)
            if self._at >= len(self.text):
                raise Unclosed("array", opened, "]")
            if self._peek() == "]":
                self._at += 1
                return
            item = (*path, index)
            self.spots[item] = self._at
            value = self._value(item)
            if value is not None:
                self.strings[item] = value
            index += 1
            self._blank(newlines=True)
            if self._peek() == ",":
                self._at += 1
            elif self._peek() != "]":
                if self._at >= len(self.text):
                    raise Unclosed("array", opened, "]")
                raise _Stop

    def _inline_table(self, path: Path) -> None:
        opened = self._at
        self._at += 1
        while True:
            self._blank(newlines=False)
            if self._at >= len(self.text) or self._peek() == "\n":
                raise Unclosed("inline table", opened, "}")
            if self._peek() == "}":
                self._at += 1
                return
            self._pair(path)
            self._blank(newlines=False)
            if self._peek() == ",":
                self._at += 1
            elif self._peek() != "}":
                if self._at >= len(self.text) or self._peek() == "\n":
                    raise Unclosed("inline table", opened, "}")
                raise _Stop

    def _string_token(self, multiline: bool) -> None:
        """Move past one string; Unclosed when its line (or, multi-line, the text) ends first."""
        text, opened = self.text, self._at
        quote = text[opened]
        if multiline and text.startswith(quote * 3, opened):
            self._at += 3
            while True:
                if self._at >= len(text):
                    raise Unclosed("multi-line string", opened, quote * 3)
                if quote == '"' and text[self._at] == "\\":
                    self._at += 2
                elif text.startswith(quote * 3, self._at):
                    self._at += 3
                    for _ in range(2):  # up to two quotes of the content may touch the closing ones
                        if self._peek() == quote:
                            self._at += 1
                    return
                else:
                    self._at += 1
        self._at += 1
        while True:
            if self._at >= len(text) or text[self._at] == "\n":
                raise Unclosed("string", opened, quote)
            if quote == '"' and text[self._at] == "\\":
                self._at += 2 if text[self._at + 1:self._at + 2] != "\n" else 1
            elif text[self._at] == quote:
                self._at += 1
                return
            else:
                self._at += 1


def _decode(token: str) -> str:
    """The value of a string token (escapes decoded by tomllib itself, never by hand)."""
    if token[:3] in ('"""', "'''"):
        body = token[3:-3]
        body = body[1:] if body.startswith("\n") else body[2:] if body.startswith("\r\n") else body
        if token[0] == "'" or "\\" not in body:
            return body
    elif token[0] == "'" or "\\" not in token:
        return token[1:-1]
    import tomllib

    try:
        return str(tomllib.loads(f"v = {token}")["v"])
    except tomllib.TOMLDecodeError:
        return token


def unclosed_problem(text: str) -> tuple[Spot, str, str] | None:
    """The first string, array or inline table ``text`` leaves open: (where it opens, what is
    wrong, the fix); None when nothing is."""
    positions = Positions(text)
    try:
        positions.scan()
    except Unclosed as exc:
        spot = positions.spot(exc.offset)
        if exc.what == "string":
            inner = 'write a " inside it as \\"' if exc.closer == '"' else "a ' inside it needs a \"basic\" string"
            return (spot, f"unterminated string: the {exc.closer} that opens it is not closed on its line",
                    f"end the string with {exc.closer} on line {spot.line} (a string of several lines goes between "
                    f"{exc.closer * 3} and {exc.closer * 3}; {inner})")
        opener = {"array": "[", "inline table": "{"}.get(exc.what, exc.closer)
        inline = exc.what == "inline table"
        before = "the end of its line (an inline table is one line)" if inline else "the end of the file"
        return (spot, f"unterminated {exc.what}: the {opener} that opens it is not closed before {before}",
                f"close it with {exc.closer}" + (", or write a [table] for more lines" if inline else ""))
    return None
