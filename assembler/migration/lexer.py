"""The project's one C++ lexer lives in ``assembler/check/lexer.py`` (check is the lower layer
and reads directives with it); the migration modules import it from here."""

from __future__ import annotations

from assembler.check.lexer import (
    TOKEN,
    Unsure,
    blank_comments_and_strings,
    continued_lines,
    directives,
    matching_close,
    split_top_level,
    strip_comments,
    tokens,
    top_level_spans,
)

__all__ = ["TOKEN", "Unsure", "blank_comments_and_strings", "continued_lines", "directives", "matching_close",
           "split_top_level", "strip_comments", "tokens", "top_level_spans"]
