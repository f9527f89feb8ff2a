"""Escape sequences from data never reach the terminal raw: a patch's message body and diff in
`show`, `#error` text and file names in `check`'s report, a migration's diff in `migrate
--dry-run`. One function (report.output.clean_block) keeps line breaks and tabs and escapes the
rest; the JSON output keeps the data as it is."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

from assembler.builder.units import TranslationUnit
from assembler.check import compilers
from assembler.check.run import CheckReport, DepCheck
from assembler.check.unit_scan import Reader, UnitResult, classify, run_pass
from assembler.report.output import clean_block
from tests.conftest import GitWorkspace

ESC = "\x1b]0;owned\x07\x1b[2J\x1b[31m"  # set the title, clear the screen, turn red


def _poison_first_patch(ws: GitWorkspace) -> Path:
    patch = sorted(ws.patches.glob("0001-*.patch"))[0]
    text = patch.read_text()
    text = text.replace("Switch at::Tensor", f"Switch {ESC}at::Tensor", 1).replace("+#include",
                                                                                   f"+// {ESC}\n+#include", 1)
    patch.write_text(text)
    return patch


def test_show_escapes_the_body_and_the_diff(git_workspace: GitWorkspace) -> None:
    _poison_first_patch(git_workspace)
    for args in (("show", "kern", "1"), ("show", "kern")):
        result = git_workspace.assemble(*args)
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout, args
    shown = git_workspace.assemble("show", "kern", "1").stdout
    assert "\\x1b[2J" in shown and "\n" in shown  # visible, and still one line per line of the patch
    assert ESC in git_workspace.assemble("show", "kern", "1", "--json").stdout.encode().decode("unicode_escape")


def test_clean_block_keeps_lines_and_tabs() -> None:
    assert clean_block("a\tb\nc") == "a\tb\nc"
    assert clean_block(f"x{ESC}\r\n") == "x\\x1b]0;owned\\x07\\x1b[2J\\x1b[31m\\r\n"
    assert clean_block("\u202eevil") == "\\u202eevil"


def test_check_report_escapes_compiler_text_and_names(tmp_path: Path) -> None:
    directory = tmp_path / "src"
    directory.mkdir()
    source = directory / f"unit{ESC[:5]}.cpp"
    source.write_text(f'#error "{ESC}"\n')
    unit = TranslationUnit(source, source.name, "cxx")
    flags = compilers.Flags((), (), tmp_path)
    output = run_pass(compilers.cxx_pass(shutil.which("g++") or "g++", flags, unit, "c++17"), directory)
    result = UnitResult(unit.source, unit.language, None, unit.origin)
    classify(unit, [output], Reader(directory, [tmp_path / "torch"], tmp_path), result)
    result.decide()
    assert any("\x1b" in line for line in result.lines())  # g++ passed the bytes through
    report = CheckReport(torch="2.13.0", cxx="g++")
    report.deps.append(DepCheck("kern", units=[result]))
    from assembler.cli.check import _text

    buffer = io.StringIO()
    buffer.write(_text(report, buffer))
    assert "\x1b" not in buffer.getvalue() and "\\x1b" in buffer.getvalue(), buffer.getvalue()
