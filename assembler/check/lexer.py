"""The project's one C++ lexer: source text with comments removed and string contents blanked,
positions kept (what the migration rules match on, what review compares token by token), and
the directive lines of a file for check's scan sharing (:func:`directives`), which must give up
(:class:`Unsure`) wherever this lexer could read the file otherwise than the compiler."""

from __future__ import annotations

import re
from collections.abc import Iterable

_RAW_STRING = re.compile(r'R"([^()\\ \t\n]{0,16})\(')
_MAY_START = re.compile(r"[/\"'R]")  # a comment, a string, a character literal, a raw string
TOKEN = re.compile(
    r"""[A-Za-z_]\w*                      # identifiers and keywords
      | \d[\w.']*(?:[eEpP][+-]\d+)?\w*     # numbers (digit separators, exponents, suffixes)
      | \.\d[\w.']*                        # .5
      | "(?:[^"\\\n]|\\.)*"               # string literals (contents kept)
      | '(?:[^'\\\n]|\\.)+'               # character literals
      | ::|->\*?|\+\+|--|<<=|>>=|<=>|&&|\|\||[-+*/%&|^!=<>]=|\.\.\.|\#\#
      | \S                                 # any other punctuator
    """,
    re.X,
)


def blank_comments_and_strings(text: str) -> str:
    """``text`` with every comment replaced by spaces and the contents of every string and
    character literal by spaces (the quotes stay), newlines kept: offsets and line numbers
    are those of the original."""
    return _blank(text, strings=True)


def strip_comments(text: str) -> str:
    """``text`` with its comments replaced by spaces (literals kept), for comparing code token
    by token."""
    return _blank(text, strings=False)


class Unsure(ValueError):
    """The text holds something this lexer may read otherwise than the compiler (an
    unterminated comment or literal, a raw string, a trigraph, a splice after whitespace, ...)."""


def _blank(text: str, strings: bool, comments: list[tuple[int, int]] | None = None, strict: bool = False) -> str:
    """The blanking itself; ``comments`` collects each comment's span; ``strict`` raises
    :class:`Unsure` at an unterminated comment or literal."""
    out = list(text)
    i, n = 0, len(text)

    def blank(start: int, end: int) -> None:
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            while end < n and text[end - 1] == "\\":  # a line comment continued with a backslash
                nxt = text.find("\n", end + 1)
                end = n if nxt < 0 else nxt
            blank(i, end)
            if comments is not None:
                comments.append((i, end))
            i = end
        elif c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0 and strict:
                raise Unsure("an unterminated comment")
            end = n if end < 0 else end + 2
            blank(i, end)
            if comments is not None:
                comments.append((i, end))
            i = end
        elif c == "R" and (raw := _RAW_STRING.match(text, i)) and (
                i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_") or text[i - 1] in "uU8L"):
            close = text.find(f"){raw.group(1)}\"", raw.end())
            end = n if close < 0 else close
            if strings:
                blank(raw.end(), end)
            i = n if close < 0 else close + len(raw.group(1)) + 2
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            k = i + 1
            while k < n and text[k] != c and text[k] != "\n":
                k += 2 if text[k] == "\\" else 1
            if strict and (k >= n or text[k] != c):
                raise Unsure("an unterminated literal")
            if strings:
                blank(i + 1, min(k, n))
            i = k + 1
        else:  # nothing starts here: on to the next character that could start something
            found = _MAY_START.search(text, i + 1)
            i = n if found is None else found.start()
    return "".join(out)


def tokens(code: str) -> list[str]:
    """The C++ tokens of ``code`` (comments must already be gone)."""
    return TOKEN.findall(code)


def continued_lines(code: str, active: Iterable[int]) -> set[int]:
    """``active`` (1-based line numbers) and every line a backslash continues from one of them.
    The preprocessor prints a multi-line ``#define`` as one line, so the body's later lines are
    blank in its output and would not count as compiled; they are the macro's code all the same
    (a ``TORCH_CHECK`` there is a use). ``code`` has its comments blanked, so a backslash ending
    a comment continues nothing new (the comment's next line is blanked too)."""
    lines = code.split("\n")
    result = set(active)
    for number in sorted(result):
        while 0 < number < len(lines) and lines[number - 1].rstrip(" \t\r").endswith("\\") and number + 1 not in result:
            number += 1
            result.add(number)
    return result


_TRIGRAPH = re.compile(r"\?\?[=/'()!<>\-]")
_SPLICE_AFTER_SPACE = re.compile(r"\\[ \t\f\v]+\n")
_PREFIXED_CHARACTER = re.compile(r"(?<![\w])(?:u8|[uUL])'")
_INCLUDE_WITH_COMMENT = re.compile(r"\s*#\s*include(?:_next)?\s*<[^>\n]*(?://|/\*)")
# names whose use in a file's text the preprocessor expands or diagnoses, or that name the main file
TEXT_NAMES = frozenset({"_Pragma", "__VA_ARGS__", "__VA_OPT__", "__has_include", "__has_include_next",
                        "__FILE__", "__BASE_FILE__", "__FILE_NAME__", "__TIMESTAMP__"})


def directives(text: str) -> list[tuple[int, str, str]]:
    """(first line, raw text, comment-free text) of each preprocessor directive of ``text``.
    Raises :class:`Unsure` on what could make this reading differ from the compiler's: a raw
    string, a trigraph, a lone CR, a splice after whitespace, an unterminated comment or
    literal, a directive after a comment or going on inside one past its line, a digraph
    directive, a comment inside an include's <name>, a character literal with a prefix, a
    stray backslash, or a name of :data:`TEXT_NAMES` anywhere in the code."""
    text = text.replace("\r\n", "\n")
    if "\r" in text or _TRIGRAPH.search(text) or _SPLICE_AFTER_SPACE.search(text) or _PREFIXED_CHARACTER.search(text):
        raise Unsure("a character sequence read differently in translation phases 1-2")
    for prefix in _RAW_STRING.finditer(text):
        before = text[prefix.start() - 1] if prefix.start() else ""
        if not before or not (before.isalnum() or before == "_") or before in "uU8L":
            raise Unsure("a raw string")
    comments: list[tuple[int, int]] = []
    clean = _blank(text, strings=False, comments=comments, strict=True)
    code = _blank(text, strings=True)
    if not TEXT_NAMES.isdisjoint(re.findall(r"[A-Za-z_$][\w$]*", code)):
        raise Unsure("a name the preprocessor expands in the text")
    if re.search(r"\\(?!\n)", code) or code.endswith("\\"):
        raise Unsure("a stray backslash or a universal character name")
    raw_lines, clean_lines = text.split("\n"), clean.split("\n")
    starts = [0]
    for line in raw_lines:
        starts.append(starts[-1] + len(line) + 1)
    found: list[tuple[int, str, str]] = []
    number = 0
    while number < len(raw_lines):
        first = number
        joined = clean_lines[number]
        while joined.endswith("\\") and number + 1 < len(raw_lines):
            number += 1
            joined = joined[:-1] + clean_lines[number]
        number += 1
        stripped = joined.strip()
        if stripped.startswith("%:"):
            raise Unsure("a digraph directive")
        if not stripped.startswith("#"):
            continue
        raw = "\n".join(raw_lines[first:number])
        if raw.lstrip(" \t\f\v")[:1] != "#":
            raise Unsure("a directive after a comment")
        end = starts[number] - 1
        if any(start < end < stop for start, stop in comments):
            raise Unsure("a directive that goes on inside a comment past its line")
        if _INCLUDE_WITH_COMMENT.match(raw):
            raise Unsure("a comment marker inside an include's name")
        found.append((first + 1, raw, stripped))
    return found


def top_level_spans(code: str, start: int, end: int, opens: str = "([{", closes: str = ")]}") -> list[tuple[int, int]]:
    """The (start, end) of each comma-separated item of ``code[start:end]`` outside any bracket
    of ``opens``/``closes`` (a call's arguments; a template's with ``<``/``>``); blank ones left out."""
    items, depth, first = [], 0, start
    for index in range(start, end):
        char = code[index]
        if char in opens:
            depth += 1
        elif char in closes:
            depth -= 1
        elif char == "," and depth == 0:
            items.append((first, index))
            first = index + 1
    items.append((first, end))
    return [(a, b) for a, b in items if code[a:b].strip()]


def split_top_level(text: str, opens: str = "([{", closes: str = ")]}") -> list[str]:
    """``text``'s top-level items (:func:`top_level_spans`), each stripped."""
    return [text[a:b].strip() for a, b in top_level_spans(text, 0, len(text), opens, closes)]


def matching_close(code: str, opening: int, opens: str = "([{", closes: str = ")]}", stop: str = "",
                   limit: int | None = None) -> int | None:
    """The index of the bracket that closes ``code[opening]`` (one of ``opens``), or None when
    another kind closes it, a character of ``stop`` comes first at any depth, or none does
    within ``limit`` characters."""
    want = closes[opens.index(code[opening])]
    depth = 0
    end = len(code) if limit is None else min(len(code), opening + limit)
    for index in range(opening, end):
        char = code[index]
        if char in opens:
            depth += 1
        elif char in closes:
            depth -= 1
            if depth == 0:
                return index if char == want else None
        elif char in stop:
            return None
    return None
