"""What a newcomer read on an 80-column terminal (issue 30's minors): the build's size line (111
columns), every --help page and its epilog (the exit codes and variables ran to 175), error and
hint lines, and one table style per output (review drew boxes, then plain columns where one
table could not be boxed). Each is drawn by the function the command calls, on a real
pseudo-terminal 80 columns wide or piped with COLUMNS=80; the commands' own runs are tested
elsewhere."""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from assembler.builder.outcome import BuildOutcome
from assembler.builder.pipeline import BuildReport, DepReport
from assembler.cli import COMMAND_MODULES, build_parser, main
from assembler.cli.build import _emit
from assembler.report import output
from assembler.report.table import cell_width
from tests.conftest import run_assemble
from tests.example import EXAMPLE
from tests.test_table_reports import on_a_terminal, piped

BOX = re.compile("[\u2500-\u257f]")
SGR = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(autouse=True)
def fresh_consoles() -> Iterator[None]:
    output.configure()
    yield
    output.configure()


def too_wide(lines: list[str], columns: int = 80) -> list[str]:
    """The lines wider than ``columns``, but a line of one word (a wheel's path: never cut)."""
    return [f"{cell_width(line):3} {line}" for line in lines if cell_width(line) > columns and len(line.split()) > 1]


def sized_report() -> BuildReport:
    """A build of five dependencies with a size budget: the size line names each with its size."""
    names = ["vecadd", "scalekit", "rowsum", "flash-attention-3", "deep-gemm"]
    deps = [DepReport(name, "b89ec77f0b891aa438086f6cfc0bfe8446ddc81b", "h", "k", 3, BuildOutcome.BUILT, 2.0,
                      ["sm_90a"], "2.10", None, None, verdict="STABLE", min_torch="2.10") for name in names]
    size = {"size": 48_200_000, "budget": 400_000_000,
            "deps": [{"name": name, "compressed": 9_600_000 + index, "budget": 100_000_000}
                     for index, name in enumerate(names)],
            "archs": [{"arch": arch, "size": 12_000_000} for arch in ("sm_80", "sm_90a", "sm_100a", "sm_120")]}
    return BuildReport("stable-abi-example", "13.2", "13.2.86", "path", Path("/usr/local/cuda"), "2.13.0", deps=deps,
                       size=size, wheel=Path("dist/stable_abi_example-0.1.0+cu132-cp39-abi3-manylinux_2_28_x86_64.whl"))


def test_the_build_size_line_wraps_within_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """`build`'s "size ...: dep N MB (budget ...), ..." line was printed whole (111 columns)."""
    draw = lambda: _emit(sized_report(), as_json=False)  # noqa: E731
    for lines in (piped(draw, 80, monkeypatch), [SGR.sub("", line) for line in on_a_terminal(draw, 80, monkeypatch)]):
        assert too_wide(lines) == [], "\n".join(lines)
        start = next(index for index, line in enumerate(lines)
                     if line.startswith("size 48.2 MB (budget 400.0 MB): vecadd"))
        # the rest under it, indented
        assert lines[start + 1].startswith("  ") and not lines[start + 1].startswith("   ")
        words = " ".join(lines).split()
        assert " ".join(words).count("deep-gemm 9.6 MB (budget 100.0 MB)") == 1  # nothing lost in the wrapping
    whole = piped(draw, None, monkeypatch)  # no width to fit (a pipe, a CI log): one line, as before
    assert any(line.startswith("size 48.2 MB") and line.endswith("deep-gemm 9.6 MB (budget 100.0 MB)")
               for line in whole)


@pytest.mark.parametrize("command", [None, *COMMAND_MODULES])
def test_every_help_page_fits_80_columns(command: str | None) -> None:
    """Every line of every --help page, `assemble --help`'s exit codes, variables and JSON note
    included (its epilog was printed as written: up to 175 columns), and the usage lines (rebase's
    group of exclusive options ran to 86)."""
    words = ["--help"] if command is None else [command, "--help"]
    page = run_assemble(*words, env={"COLUMNS": "80"}).stdout
    assert too_wide(page.splitlines()) == [], page


def test_the_top_level_epilog_keeps_its_items_apart() -> None:
    """Wrapped to the width, each exit code and variable still starts its own line, its text
    indented under it: the wrapping joins no two items."""
    page = run_assemble("--help", env={"COLUMNS": "80"}).stdout
    epilog = page.split("\nexit codes:\n", 1)[1]
    codes = [int(line.split()[0]) for line in epilog.split("\n\n")[0].splitlines() if not line.startswith("      ")]
    assert codes == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 70, 130, 143], epilog
    gate = " ".join(epilog.split("\n  2 ")[0].split("\n  1 ")[1].split())
    assert gate == ("a gate said no (audit --check, a verify FAIL, a size budget, check not CLEAN, a rebase --dry-run "
                    "that would conflict)")
    assert "\n  ASSEMBLE_CACHE\n      the shared cache" in epilog
    assert '"error": {message, hint, exit_code} on failure.' in " ".join(epilog.split())
    wide = run_assemble("--help", env={"COLUMNS": "200"}).stdout
    assert ("\n  1   a gate said no (audit --check, a verify FAIL, a size budget, check not CLEAN, a rebase --dry-run "
            "that would conflict)\n" in wide)


def stderr_on_a_terminal(words: list[str], columns: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    """(exit code, the lines ``assemble WORDS`` writes to stderr) with stderr a pseudo-terminal ``columns`` wide."""
    codes: list[int] = []
    lines = on_a_terminal(lambda: codes.append(main(["--color", "never", *words])), columns, monkeypatch, "stderr")
    return codes[0], lines


def test_error_and_hint_lines_wrap_on_an_80_column_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error naming a path and a commit ran to 180 columns, broken by the terminal wherever the
    edge fell; on a terminal it wraps between words, each continuation under the text of its
    ``error:`` or ``hint:``. Piped it stays one line each (a CI log, grep)."""
    deep = tmp_path / ("a-rather-long-directory-name-" * 3) / "workspace"
    deep.mkdir(parents=True)
    (deep / "deps.toml").write_text('[bundle]\nname = "x"\nversion = "0.1.0"\ntrack = "main\n')
    words = ["-C", str(deep), "deps"]
    code, lines = stderr_on_a_terminal(words, 80, monkeypatch)
    assert code == 2, lines
    assert too_wide(lines) == [], "\n".join(lines)
    assert lines[0].startswith("error: ") and lines[1].startswith("       ") and lines[1].strip(), lines
    hint = next(index for index, line in enumerate(lines) if line.startswith("hint: "))
    assert all(line.startswith("       ") for line in lines[1:hint])
    assert all(line.startswith("      ") for line in lines[hint + 1:]) and len(lines) > hint + 1, lines
    piped_run = run_assemble(*words)
    one = [line for line in piped_run.stderr.splitlines() if line.startswith(("error:", "hint:"))]
    assert len(one) == 2, piped_run.stderr  # piped: one line each
    # the same text: wrapped between words, a path wider than a line broken after a '/'
    assert "".join("".join(lines[:hint]).split()) == "".join(one[0].split())
    assert " ".join(line.strip() for line in lines[hint:]) == one[1]


@pytest.mark.parametrize("words", [["build"], ["checkout"], ["verify", "x.whl"]], ids=lambda words: words[0])
def test_an_interrupt_offers_continue_and_abort_only_to_rebase(words: list[str], monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C in `build` suggested `--continue / --abort`, which only `rebase` has; every other
    command is re-run. The interrupt is raised where the command's handler runs."""
    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    def parser_with_interrupt(only: str | None = None) -> argparse.ArgumentParser:
        parser = build_parser(only)
        for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
            for sub in action.choices.values():  # type: ignore[union-attr]
                sub.set_defaults(handler=interrupted)
        return parser

    monkeypatch.setattr("assembler.cli.build_parser", parser_with_interrupt)
    assert main(words) == 130
    err = capsys.readouterr().err
    assert (err.startswith("interrupted; re-run the same command") and "--continue" not in err
            and "--abort" not in err), err
    assert main(["rebase", "kern", "--continue"]) == 130
    assert "`assemble rebase --continue`" in capsys.readouterr().err


def test_review_draws_its_tables_in_one_style(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's vecadd series with a planted change to a name too long for a boxed table at
    80 columns: review drew 0001's table in boxes and 0002's as plain columns in one output. Now
    every table of the output is plain when one cannot be boxed, and boxed when all can."""
    from assembler.cli.review import render
    from assembler.migration.review import run_review
    from assembler.workspace import open_workspace
    from tests.test_review import PORT

    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLE, ws,
                    ignore=shutil.ignore_patterns("forks", "upstreams", ".assemble", "dist", "__pycache__"))

    def draw_review() -> None:
        dep = open_workspace(ws).manifest.select(["vecadd"])[0]
        report = run_review(dep.name, dep.patches_dir, dep.series, [])
        report.compile.reason = "not asked to (--no-compile)"
        sys.stdout.write(render(report, markdown=False))

    boxed = "\n".join(on_a_terminal(draw_review, 80, monkeypatch))
    assert boxed.count("\u250f") == 2 and too_wide(boxed.splitlines()) == [], boxed  # both tables boxed, within 80
    patch = ws / "patches" / "vecadd" / PORT
    long_name = "a_scratch_tensor_whose_name_is_far_longer_than_any_column_of_a_boxed_table_at_80"
    old = "torch::stable::Tensor out = torch::stable::empty_like(x);"
    assert patch.read_text().count(old) == 1
    patch.write_text(patch.read_text().replace(old, old.replace("(x)", f"({long_name})")))
    lines = [SGR.sub("", line) for line in on_a_terminal(draw_review, 80, monkeypatch)]
    text = "\n".join(lines)
    assert not BOX.search(text), text  # 0002's table cannot be boxed: neither is 0001's
    headers = [line for line in lines if re.match(r"hunk +verdict +removed", line)]
    assert len(headers) == 2 and long_name in text.split(), text
    assert too_wide([line for line in lines if long_name not in line]) == [], text
