"""C++ source text with comments removed and string contents blanked, positions kept: what the
rules match on, and what review compares token by token."""

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


def _blank(text: str, strings: bool) -> str:
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
            i = end
        elif c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            blank(i, end)
            i = end
        elif c == "R" and (raw := _RAW_STRING.match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
                                                                  or text[i - 1] in "uU8L"):
            close = text.find(f"){raw.group(1)}\"", raw.end())
            end = n if close < 0 else close
            if strings:
                blank(raw.end(), end)
            i = n if close < 0 else close + len(raw.group(1)) + 2
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            k = i + 1
            while k < n and text[k] != c and text[k] != "\n":
                k += 2 if text[k] == "\\" else 1
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
