"""The build summary and the verify matrix are report.table tables (#22 item 5): a long verify
reason wraps between words instead of widening the table (238 columns before), and at 60
columns no dependency name or verdict is cut (rich cut `vecadd` to `veca` and dropped the
verdict column); piped they are plain columns, on a terminal boxes.

The reports are the real dataclasses the pipeline fills, drawn by the real functions the
commands call (cli.build._emit, VerifyReport.render); only the build and the verify runs that
would fill them are left out (tests/test_build.py and tests/test_verify.py run those).
"""

from __future__ import annotations

import io
import os
import re
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

from assembler.builder.outcome import BuildOutcome
from assembler.builder.pipeline import BuildReport, DepReport
from assembler.cli.build import _emit
from assembler.report import output
from assembler.report.table import cell_width
from assembler.verify.report import Cell, Check, Status, TorchInfo, VerifyReport

SGR = re.compile(r"\x1b\[[0-9;]*m")
BOX = re.compile("[\u2500-\u257f]")
LONG = ("expected tensor([2., 4., 6.]) from vecadd.add_scaled(x, y, 2.0) on torch 2.14.1+cu130, "
        "got tensor([3., 5., 7.]) (max abs diff 1.0)")  # longer than the 113-character cell
SYMBOL = "_ZN5torch6stable6detail19from_ivalue_helperIlE4callERKN3c106IValueE"


@pytest.fixture(autouse=True)
def fresh_consoles() -> Iterator[None]:
    output.configure()
    yield
    output.configure()


def verify_report(reason: str = LONG) -> VerifyReport:
    torch = [TorchInfo("2.13.0", "2.13.0+cpu", None, False, "/env/a"),
             TorchInfo("2.14.1", "2.14.1+cu130", "13.0", False, "/env/b")]
    cells = {}
    for dep in ("vecadd", "scalekit-long-name"):
        cells[(dep, "2.13.0")] = Cell(dep, "2.13.0", [Check("load", "vecadd/_C.abi3.so", Status.PASS)])
        cells[(dep, "2.14.1")] = Cell(dep, "2.14.1", [Check("smoke", "", Status.FAIL, reason)])
    return VerifyReport("dist/stable_abi_example-0.1.0-cp310-abi3-linux_x86_64.whl", torch,
                        ["vecadd", "scalekit-long-name"], cells, seconds=1.5)


def build_report() -> BuildReport:
    deps = [
        DepReport("vecadd", "b89ec77f0b891aa438086f6cfc0bfe8446ddc81b", "h", "k", 3, BuildOutcome.BUILT, 12.25,
                  ["sm_80", "sm_90a", "sm_100a", "sm_120"], "2.10", None, None, verdict="STABLE", min_torch="2.10"),
        DepReport("scalekit", "1e779d163455aaaaaaaaaaaaaaaaaaaaaaaaaaaa", "h", "k", 3, BuildOutcome.FAILED, 1.0,
                  [], "2.10", None, None, verdict="UNSTABLE+NON_ABI3"),
    ]
    return BuildReport("stable-abi-example", "13.0", "13.0.48", "path", Path("/usr/local/cuda"), "2.13.0", deps=deps,
                       verified=verify_report())


def on_a_terminal(draw: object, columns: int, monkeypatch: pytest.MonkeyPatch, stream: str = "stdout") -> list[str]:
    """What ``draw()`` writes to ``stream`` (stdout or stderr; the other goes to a buffer) when that
    stream is a real pseudo-terminal ``columns`` wide."""
    monkeypatch.delenv("COLUMNS", raising=False)
    leader, follower = os.openpty()
    try:
        termios.tcsetwinsize(follower, (24, columns))
        with open(follower, "w", encoding="utf-8", closefd=False) as terminal:
            monkeypatch.setattr(sys, stream, terminal)
            monkeypatch.setattr(sys, "stderr" if stream == "stdout" else "stdout", io.StringIO())
            output.configure(color="never")
            draw()  # type: ignore[operator]
            terminal.flush()
        monkeypatch.undo()
        os.set_blocking(leader, False)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        os.close(follower)
    return b"".join(chunks).decode("utf-8").replace("\r\n", "\n").splitlines()


def piped(draw: object, columns: int | None, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buffer)
    output.configure()
    draw()  # type: ignore[operator]
    monkeypatch.undo()
    return buffer.getvalue().splitlines()


def table_lines(lines: list[str], title: str) -> list[str]:
    """The table's lines: from its title up to the first line after it that is not part of it (a
    title wider than the width wraps between its words)."""
    start = next(index for index, line in enumerate(lines) if line.startswith(title) or (
        title.startswith(line) and " ".join(lines[index:index + 2]).startswith(title)))
    end = next((index for index, line in enumerate(lines) if index > start and (
        re.match(r"\d+ PASS", line) or line.startswith(("load failures", "wheel:", "no wheel", "specs:", "verify "))
        or line == "verify")), len(lines))
    if not lines[start].startswith(title):  # the title's two lines as one
        return [" ".join(lines[start:start + 2]), *lines[start + 2:end]]
    return lines[start:end]


def test_verify_matrix_wraps_the_long_reason_and_is_plain_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    draw = lambda: verify_report().render(output.console)  # noqa: E731
    for columns in (80, 60):
        lines = piped(draw, columns, monkeypatch)
        table = table_lines(lines, "verify dist/")
        assert not BOX.search("\n".join(lines))
        assert max(cell_width(line) for line in table[1:]) <= columns, "\n".join(table)
        assert re.match(r"dependency +torch", table[1])
        rows = [line.split()[0] for line in table if line[:1] not in (" ", "")
                and not line.startswith(("verify", "dependency"))]
        assert rows == ["vecadd", "scalekit-long-name"], "\n".join(table)  # names whole, each once
        words = " ".join(table).split()
        assert " ".join(words).count(f"FAIL smoke: {LONG}") == 2  # wrapped between words, nothing lost
        assert words.count("FAIL") == 2 and words.count("PASS") == 2
        assert lines[-1] == "2 PASS, 2 FAIL, 0 SKIPPED in 1.5 s"
    unfitted = table_lines(piped(draw, None, monkeypatch), "verify dist/")  # no width to fit: a row a line
    assert len(unfitted) == 4 and LONG in unfitted[2]
    symbol = lambda: verify_report(f"load vecadd/_C.abi3.so: undefined symbol {SYMBOL}").render(output.console)  # noqa: E731
    assert SYMBOL in " ".join(piped(symbol, 60, monkeypatch)).split()  # wider than the room: whole on a line of its own
    boxed = table_lines(on_a_terminal(draw, 80, monkeypatch), "verify dist/")
    assert boxed[1].startswith("┏") and boxed[-1].startswith("└") and max(cell_width(line) for line in boxed[1:]) <= 80


def test_build_summary_at_60_columns_cuts_no_name_nor_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    draw = lambda: _emit(build_report(), as_json=False)  # noqa: E731
    title = "stable-abi-example for CUDA 13.0, torch 2.13.0"
    boxed = table_lines(on_a_terminal(draw, 100, monkeypatch), title)  # boxes take 22 of seven columns
    assert boxed[1].startswith("┏") and boxed[-1].startswith("└") and max(cell_width(line) for line in boxed) <= 100
    text = "\n".join(boxed)
    cells = [cell.strip() for line in boxed for cell in SGR.sub("", line).split("│")]
    assert "vecadd" in cells and "scalekit" in cells and "b89ec77f0b89" in cells, text
    assert "STABLE" in cells and "UNSTABLE+NON_ABI3" in cells, text  # the verdict column is there, whole
    assert {"failed", "sm_100a"} <= set(" ".join(cells).split())  # the archs wrap between words
    # 60 columns are too few for them (rich cut `vecadd` to `veca`; the least boxed is 88): plain columns
    # on the terminal too, every name and verdict whole
    narrow = table_lines(on_a_terminal(draw, 60, monkeypatch), title)
    assert (not BOX.search("\n".join(narrow))
            and {"vecadd", "scalekit", "b89ec77f0b89", "STABLE", "UNSTABLE+NON_ABI3", "sm_100a"}
            <= set(" ".join(SGR.sub("", line) for line in narrow).split())), "\n".join(narrow)
    plain = table_lines(piped(draw, 60, monkeypatch), title)
    assert not BOX.search("\n".join(plain))
    assert re.match(r"dep +commit +patches +build +archs +min torch +verdict$", plain[1]), "\n".join(plain)
    words = " ".join(plain).split()
    assert {"vecadd", "scalekit", "STABLE", "UNSTABLE+NON_ABI3", "sm_100a"} <= set(words)
    assert plain[2].split()[0] == "vecadd" and plain[2].split()[-1] == "STABLE"
