"""One C++ lexer in the project (issue #27 item 1): check's scan sharing reads a unit's
directives with the same blanking the migration rules and review use, and gives up where
that reading could differ from the compiler's."""

from __future__ import annotations

from pathlib import Path

import pytest

from assembler.check import lexer
from assembler.check.share import skeleton
from assembler.migration import lexer as migration_lexer


def test_migration_and_check_share_one_lexer() -> None:
    assert migration_lexer.blank_comments_and_strings is lexer.blank_comments_and_strings
    assert migration_lexer.directives is lexer.directives


def test_directives_keep_their_raw_text_and_first_line(tmp_path: Path) -> None:
    text = '#include <a.h>\nint x; // #define NOT\nconst char* s = "#define NOR";\n#define X \\\n  1 /* one */\n'
    assert lexer.directives(text) == [(1, "#include <a.h>", "#include <a.h>"),
                                      (4, "#define X \\\n  1 /* one */", "#define X   1")]
    unit = tmp_path / "u.cpp"
    unit.write_text(text)
    assert skeleton(unit) == ((1, "#include <a.h>"), (4, "#define X \\\n  1 /* one */"))


@pytest.mark.parametrize("text", [
    "/* a\n b */ #define X 1\n", "#define X /* a\n b */ 1\n", "int c = u'\"';\n#include <a.h>\n",
    "#include <a//b.h>\n", "int a = x \\ y;\n",
])
def test_directives_give_up_where_the_compiler_could_read_otherwise(text: str) -> None:
    with pytest.raises(lexer.Unsure):
        lexer.directives(text)
