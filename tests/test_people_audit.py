"""`assemble audit` read by a person (#30 item 5): at COLUMNS=80 every line fits, object paths
whole; a legend for the table's abbreviations; a one-line summary without --check; a next step
for each failing verdict; no abi3 remark about objects that use no CPython; --check's FAIL lines
wrapped with their indentation kept.

The wheels hold the audit fixtures' g++/gcc-compiled objects (tests/audit_fixtures) under the
long names a per-Python wheel gives them (``.cpython-311-x86_64-linux-gnu.so``), which made the
table 111-116 columns wide on main.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from assembler.report import output
from assembler.report.table import cell_width
from tests.audit_fixtures.build import Objects, Wheels, audit_build_fixture, make_wheel  # noqa: F401 - fixture
from tests.conftest import run_assemble
from tests.test_table_reports import on_a_terminal

NARROW = {"COLUMNS": "80"}
FLASH = "flashy/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"
PLAIN = "flashy/nonlimited_extension.cpython-311-x86_64-linux-gnu.so"


@pytest.fixture(scope="module")
def cp311(audit_build: tuple[Objects, Wheels], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A per-Python (cp311, not abi3) wheel: an unstable torch extension and a full-API one."""
    objects = audit_build[0]
    return make_wheel(tmp_path_factory.mktemp("people") / "flashy-1.0-cp311-cp311-linux_x86_64.whl",
                      {FLASH: objects.unstable, PLAIN: objects.nonlimited})


@pytest.fixture(scope="module")
def torch_ops(audit_build: tuple[Objects, Wheels], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A py3-none wheel of a torch operator library: shim calls, no CPython symbol."""
    return make_wheel(tmp_path_factory.mktemp("people") / "ops-1.0-py3-none-linux_x86_64.whl",
                      {"ops/libshim_helper.so": audit_build[0].helper})


def within(text: str, columns: int = 80) -> None:
    wide = [line for line in text.splitlines() if cell_width(line) > columns]
    assert not wide, "\n".join(f"{cell_width(line):3} {line}" for line in text.splitlines())


@pytest.mark.integration
def test_a_per_python_wheel_fits_80_columns_with_every_path_whole(cp311: Path) -> None:
    done = run_assemble("audit", str(cp311), env=NARROW)
    assert done.returncode == 0, done.stderr
    within(done.stdout.replace(str(cp311), ""))  # the PATH itself is an identifier on its own line
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert FLASH in lines and PLAIN in lines, done.stdout  # under their rows, never cut
    assert re.search(r"^#  +kind +torch +shim +unst +min torch +abi3 +min py$", done.stdout, re.M), done.stdout
    wide = run_assemble("audit", str(cp311), env={"COLUMNS": "200"})  # room enough: a path per row, as before
    assert any(line.startswith(FLASH) and "UNSTABLE" in line for line in wide.stdout.splitlines()), wide.stdout


def test_on_an_80_column_terminal_the_table_fits(cp311: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from assembler.audit import audit_paths
    from assembler.audit.report import render

    [report] = audit_paths([cp311])
    lines = on_a_terminal(lambda: render(report, output.console), 80, monkeypatch)
    within("\n".join(line for line in lines if line != str(cp311)))
    assert FLASH in [line.strip() for line in lines], "\n".join(lines)


def test_the_legend_explains_every_abbreviation_shown(cp311: Path, audit_build: tuple[Objects, Wheels]) -> None:
    done = run_assemble("audit", str(cp311), env=NARROW)
    legend = done.stdout.split("legend:\n", 1)[1].split("summary:")[0]
    terms = {line.split("  ")[1].strip() for line in legend.splitlines() if not line.startswith("   ")}
    assert {"#", "kind", "shim", "unst", "min torch", "abi3", "full API", "min py"} <= terms, done.stdout
    good = run_assemble("audit", str(audit_build[1].good), env=NARROW)
    legend = good.stdout.split("legend:\n", 1)[1]
    assert re.search(r"^  \+\? +also uses shim symbols", legend, re.M), good.stdout  # min torch 2.9.0+?
    assert re.search(r"^  too new +limited API, but newer than the abi3 tag", legend, re.M), good.stdout
    quiet = run_assemble("-q", "audit", str(cp311), env=NARROW)
    assert "legend:" not in quiet.stdout and "summary:" in quiet.stdout


def test_a_summary_and_next_steps_without_check(cp311: Path, audit_build: tuple[Objects, Wheels]) -> None:
    done = run_assemble("audit", str(cp311), env=NARROW)
    assert done.returncode == 0, done.stderr  # no --check: a report, not a gate
    text = " ".join(done.stdout.split())  # wrapped lines joined
    assert "summary: 2 objects (1 UNSTABLE, 1 NO-TORCH); --check torch fails (1 UNSTABLE); " \
           "--check abi3 fails (2 NON-ABI3)" in text, done.stdout
    assert "next: UNSTABLE (1 object): it loads only on the exact torch it was built against: pin that torch" in text
    assert "port it to the Stable ABI (`assemble assess DEP`, then `assemble migrate DEP`)" in text
    assert "next: NON-ABI3 (the wheel): it is built for cp311 alone: use `--check torch`" in text, done.stdout
    good = " ".join(run_assemble("audit", str(audit_build[1].good), env=NARROW).stdout.split())
    assert "--check torch passes; --check abi3 fails (1 ABI3-MISMATCH)" in good
    assert 'next: ABI3-MISMATCH (1 object): tag the wheel abi3 for Python 3.11 (python-abi = "3.11"' in good


def test_an_object_without_cpython_gets_no_abi3_remark(torch_ops: Path) -> None:
    done = run_assemble("audit", str(torch_ops), env=NARROW)
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[1]
    assert "NO-PYTHON" in header and "abi3" not in header, done.stdout  # main: "NO-PYTHON (no abi3 tag)"
    assert "summary: 1 object (1 STABLE); --check torch passes; --check abi3 passes" in done.stdout
    assert "next:" not in done.stdout


def test_fail_lines_wrap_with_their_indentation(cp311: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """print_failures, as `audit --check` prints its findings: each finding whole, over lines of
    at most 80 columns, the lines after ``FAIL`` indented (main: one line of 281 columns)."""
    from assembler.audit import audit_paths
    from assembler.audit.gate import findings
    from assembler.audit.report import print_failures

    [report] = audit_paths([cp311])
    found = findings(report, "all")
    stream = io.StringIO()
    monkeypatch.setenv("COLUMNS", "80")
    print_failures(found, stream)
    within(stream.getvalue())
    blocks = re.split(r"^(?=FAIL\b)", stream.getvalue(), flags=re.M)[1:]
    assert ["".join(block.split()) for block in blocks] == ["FAIL" + "".join(f.line.split()) for f in found]
    assert all(line.startswith("     ") for block in blocks for line in block.splitlines()[1:])


def test_check_fail_lines_fit_80_columns(cp311: Path) -> None:
    done = run_assemble("audit", "--check", "all", str(cp311), env=NARROW)
    assert done.returncode == 1
    within(done.stderr.replace(str(cp311), ""))
    assert "c10::detail::torchCheckFail" in done.stderr

