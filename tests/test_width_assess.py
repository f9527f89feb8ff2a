"""`assemble assess` read on an 80-column terminal (issue 30's minors), on the example's
unmigrated normkit with the real build environment: its summary lines ran to 161 columns, it
printed one table in boxes and the next in plain columns (which still ran to 223), and one cell
(the stable equivalent of <torch/extension.h>) was split over 12 lines of a narrow column.

assembler/cli/assess.py now wraps its summary (report.table.paragraph), draws its tables in one
style (report.table.texts_for) and puts a row's stable equivalent and uses under it, across the
table."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from assembler.report.table import cell_width
from tests.build_support import example_copy, sharing_toolchains

pytestmark = pytest.mark.integration

SGR = re.compile(r"\x1b\[[0-9;]*m")
CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def assess_on_a_terminal(ws: Path, cache: Path, columns: int) -> list[str]:
    """stdout of `assemble assess normkit` when it is a pseudo-terminal ``columns`` wide."""
    import termios

    leader, follower = os.openpty()
    termios.tcsetwinsize(follower, (50, columns))
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    env.update(ASSEMBLE_CACHE=str(cache), NO_COLOR="1")
    try:
        process = subprocess.Popen([sys.executable, "-m", "assembler", "-C", str(ws), "-q", "assess", "normkit"],
                                   stdout=follower, stderr=subprocess.PIPE, env=env)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other side closed: all read
                break
            if not chunk:
                break
            chunks.append(chunk)
        _, stderr = process.communicate(timeout=600)
    finally:
        os.close(leader)
    assert process.returncode == 0, stderr.decode()[-3000:]
    return [CONTROL.sub("", SGR.sub("", line)) for line in b"".join(chunks).decode("utf-8").split("\n")]


@pytest.fixture(name="assessed", scope="module")
def assessed_fixture(tmp_path_factory: pytest.TempPathFactory, toolchains: Path) -> list[str]:
    root = tmp_path_factory.mktemp("assess80")
    ws = example_copy(root / "ws") / "migrate"
    return assess_on_a_terminal(ws, sharing_toolchains(root / "cache", toolchains), 80)


def test_every_line_fits_80_columns(assessed: list[str]) -> None:
    wide = [f"{cell_width(line):3} {line}" for line in assessed if cell_width(line) > 80 and len(line.split()) > 1]
    assert wide == [], "\n".join(assessed)


def test_one_table_style_and_no_cell_over_many_lines(assessed: list[str]) -> None:
    text = "\n".join(assessed)
    headers = [line for line in assessed if re.match(r"[┃ ]*API +[┃ ]*uses", line)]
    assert len(headers) == 5, text  # headers, registration, types, checks, calls
    boxed = text.count("\u250f")
    assert boxed in (0, len(headers)), text  # all boxed or none
    run = longest = 0
    for line in assessed:  # a row's continuation lines: an empty first cell
        run = run + 1 if re.match(r"(│ {3,}│|\s{8,}\S)", line) else 0
        longest = max(longest, run)
    assert longest <= 6, text
