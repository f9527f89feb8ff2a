"""Error positions come from TOML's own grammar (manifest/positions.py), not from lines that
look like headers: a ``[`` inside a multi-line string is text, and a string, array or inline
table left open is named where it opens, with the fix (issue 31 item 3, issue 30's minor list)."""

from __future__ import annotations

from pathlib import Path

import pytest

from assembler.errors import ManifestError
from assembler.manifest.load import load_manifest
from tests.conftest import run_assemble

HEAD = ('[bundle]\nname = "b"\nversion = "1.0"\n\n'
        '[deps.k]\nupstream = "https://git.invalid/k"\ncommit = "' + "a" * 40 + '"\n')


def _error(tmp_path: Path, text: str) -> ManifestError:
    (tmp_path / "deps.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "deps.toml")
    return caught.value


def _line_of(text: str, fragment: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if fragment in line)


@pytest.mark.parametrize("inside", ["[not a table]", "[deps.k.verify]", "[[deps.k.build.extensions]]",
                                    "  [x]  # a comment"])
def test_a_bracket_line_inside_a_multiline_string_is_no_header(tmp_path: Path, inside: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    text = HEAD + f'\n[deps.k.verify]\nsmoke = """\nimport k\n{inside}\nprint(1)\n"""\nrequires-cuda = "yes"\n'
    error = _error(tmp_path, text)
    line = _line_of(text, "requires-cuda")
    assert error.message.startswith(f"{tmp_path / 'deps.toml'}:{line}:1: deps.k.verify.requires-cuda: "), error.message


def test_a_second_array_of_tables_block_is_named_at_its_own_key(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    block = '[[deps.k.build.extensions]]\nname = "{name}"\nsources = ["a.cpp"]\nlanguage = "{language}"\n'
    text = (HEAD + "\n" + block.format(name="_a", language="cxx") + "\n" + block.format(name="_b", language="fortran"))
    error = _error(tmp_path, text)
    assert "not a known language" in error.message
    assert error.message.startswith(f"{tmp_path / 'deps.toml'}:{_line_of(text, 'fortran')}:1: "), error.message


def test_a_string_item_is_named_at_its_own_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    text = HEAD + '\n[deps.k.install]\n"[z-a]*" = "pkg/"\n'
    error = _error(tmp_path, text)
    where = f"{tmp_path / 'deps.toml'}:{_line_of(text, '[z-a]')}:1"
    assert error.message.startswith(f"{where}: deps.k.install: "), error.message


UNCLOSED = [
    # (what is written, where it opens: line, column; what the error says, what the fix says)
    ('track = "main\n', 8, 9, 'unterminated string: the " that opens it is not closed on its line',
     'end the string with "'),
    ("track = 'main\n", 8, 9, "unterminated string: the ' that opens it", "end the string with '"),
    ('[deps.k.verify]\nsmoke = """\nimport k\n', 9, 9, 'unterminated multi-line string: the """', 'close it with """'),
    ('submodules = ["a",\n"b"\n', 8, 14, "unterminated array: the [ that opens it", "close it with ]"),
    ('install = { "*.so" = "pkg/"\n', 8, 11, "unterminated inline table: the { that opens it", "close it with }"),
]


@pytest.mark.parametrize(("written", "line", "column", "message", "fix"), UNCLOSED,
                         ids=[u[3].split(":")[0] for u in UNCLOSED])
def test_what_is_left_open_is_named_where_it_opens(tmp_path: Path, written: str, line: int, column: int, message: str,
                                                   fix: str) -> None:
    """tomllib says "Illegal character '\\n'" at the line's end, or gives no line at all ("at
    end of document"): the error names the string, array or table, its line and column, and the fix."""
    (tmp_path / "deps.toml").write_text(HEAD + written, encoding="utf-8")
    result = run_assemble("-C", str(tmp_path), "deps", env={"ASSEMBLE_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 2, result.stderr
    assert f"deps.toml:{line}:{column}: TOML syntax error: {message}" in result.stderr, result.stderr
    assert "Illegal character" not in result.stderr and "end of document" not in result.stderr
    assert f"hint: {fix}" in result.stderr and "Traceback" not in result.stderr
