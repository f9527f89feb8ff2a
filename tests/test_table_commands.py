"""One table module for every command (#22 item 5): `audit`, `merge`, `sbom`, `size`, `cache
info` and `plan` draw with report.table, as `deps`, `patches`, the build summary and `verify`
do. Piped they are plain columns without box characters, at COLUMNS=80 every line fits 80
columns, and no identifier is cut: dependency names, SHAs, patch and object file names appear
whole. On main these commands drew rich tables: boxes in a pipe, and file names folded.

The wheel is the merge tests' (real gcc-built objects, a real merge); `audit`, `sbom` and `size`
read it through the real CLI. `plan` needs a build environment to plan with, so its table is
drawn from plan entries by the function the command calls (tests/test_matrix.py runs the plan).
`patches` at 80 columns puts the patch file name on a line of its own under its number.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from assembler.report import output
from assembler.report.table import cell_width
from assembler.series.seriesfile import parse_series
from tests.conftest import GitWorkspace, run_assemble
from tests.test_sbom import PATCHES, sbom_ws  # noqa: F401  (fixture)
from tests.test_table_reports import on_a_terminal, piped
from tests.test_wheel_merge import OPS_SHA, VECADD_SHA, built, workspace  # noqa: F401  (fixtures)

BOX = re.compile("[\u2500-\u257f]")


@pytest.fixture(autouse=True)
def fresh_consoles() -> Iterator[None]:
    output.configure()
    yield
    output.configure()


def fits(text: str, columns: int = 80) -> None:
    """No box characters, and every line within ``columns`` but one that is a single word (an
    identifier wider than the room, never cut: a wheel's path)."""
    assert not BOX.search(text), text
    assert max(cell_width(line) for line in text.splitlines() if len(line.split()) > 1) <= columns, "\n".join(
        f"{cell_width(line):3} {line}" for line in text.splitlines())


def first_column(lines: list[str]) -> list[str]:
    """The first column's cells, a path broken after a ``/`` (the table's only break in a name)
    joined with its next line's piece."""
    cells: list[str] = []
    joining = False
    for line in lines:
        first = line.split()[0] if line.strip() and not line.startswith(" ") else ""
        if joining and first:
            cells[-1] += first
        elif first:
            cells.append(first)
        joining = bool(first) and first.endswith("/")
    return cells


def words(text: str) -> list[str]:
    """The words of ``text``, a colon or comma after one left off."""
    return [word.rstrip(":,") for word in text.split()]


@pytest.fixture
def wheel(sbom_ws: Path) -> Path:  # noqa: F811
    """The merge tests' workspace (vecadd carrying four patches) merged by `assemble merge`."""
    merged = run_assemble("-C", str(sbom_ws), "merge", str(sbom_ws / "artifacts" / "ops"),
                          str(sbom_ws / "artifacts" / "vecadd"),
                          "--out", str(sbom_ws / "dist"), "--json", env={"ASSEMBLE_CACHE": str(sbom_ws / "cache")})
    assert merged.returncode == 0, merged.stderr
    return Path(json.loads(merged.stdout)["wheel"])


def test_merge_table_is_plain_and_fits_80_columns(sbom_ws: Path) -> None:  # noqa: F811
    merged = run_assemble("-C", str(sbom_ws), "merge", str(sbom_ws / "artifacts" / "ops"),
                          str(sbom_ws / "artifacts" / "vecadd"),
                          "--out", str(sbom_ws / "dist"),
                          env={"ASSEMBLE_CACHE": str(sbom_ws / "cache"), "COLUMNS": "80"})
    assert merged.returncode == 0, merged.stderr
    table = merged.stdout.split("merged in")[0]
    fits(table)
    assert re.match(r"dependency +commit +patches +archs +files", table.splitlines()[0]), table
    assert {"vecadd", "ops", VECADD_SHA[:12], OPS_SHA[:12], "9.0a"} <= set(words(table)), table


def test_audit_is_plain_and_fits_80_columns_with_object_names_whole(wheel: Path) -> None:
    audit = run_assemble("audit", str(wheel), env={"COLUMNS": "80"})
    assert audit.returncode == 0, audit.stderr
    fits(audit.stdout)
    assert str(wheel) in audit.stdout.splitlines()  # the wheel's path whole, on its own line
    table = audit.stdout.splitlines()[2:]
    assert re.match(r"object +kind +torch +shim +unst +min torch +abi3 +min py$", table[0]), audit.stdout
    objects = [cell for cell in first_column(table[1:]) if "abi3" in cell]
    assert sorted(objects) == ["merge_demo/ops/_ops_C.abi3.so", "merge_demo/vecadd/_vecadd_C.abi3.so"], audit.stdout


def test_sbom_is_plain_and_fits_80_columns_with_patch_file_names_whole(wheel: Path) -> None:
    sbom = run_assemble("sbom", str(wheel), env={"COLUMNS": "80"})
    assert sbom.returncode == 0, sbom.stderr
    fits(sbom.stdout)
    for name in PATCHES:  # every patch file name whole, each once
        assert words(sbom.stdout).count(name) == 1, sbom.stdout
    assert {"vecadd", "ops", VECADD_SHA[:12], OPS_SHA[:12], "0001", "0004"} <= set(words(sbom.stdout)), sbom.stdout
    assert "https://github.com/owner/vecadd/pull/7" in words(sbom.stdout)
    wide = run_assemble("sbom", str(wheel), env={"COLUMNS": "200"})  # room enough: one table, a patch a row
    rows = [line for line in wide.stdout.splitlines() if "0002-Port-to-the-stable-ABI.patch" in line]
    assert not BOX.search(wide.stdout) and len(rows) == 1 and "forwarded" in rows[0], wide.stdout


def test_size_is_plain_and_fits_80_columns(wheel: Path) -> None:
    size = run_assemble("size", str(wheel), env={"COLUMNS": "80"})
    assert size.returncode == 0, size.stderr
    fits(size.stdout)
    assert re.search(r"^dependency +files +compressed +share +uncompressed +budget$", size.stdout, re.M), size.stdout
    assert {"vecadd", "ops"} <= {line.split()[0] for line in size.stdout.splitlines() if line.strip()}


def test_audit_on_a_terminal_is_boxed_where_boxes_fit(wheel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal wide enough, boxes; at 80 columns the eight columns' borders (25 columns)
    leave the object's path too little room, so it is plain columns within 80, not a table
    over the terminal's edge (rich folded the path inside its names)."""
    from assembler.audit import audit_paths
    from assembler.audit.report import render

    [report] = audit_paths([wheel])
    wide = on_a_terminal(lambda: render(report, output.console), 120, monkeypatch)
    assert any(line.startswith("┏") for line in wide) and any(line.startswith("└") for line in wide), "\n".join(wide)
    cells = [cell.strip() for line in wide for cell in line.split("│")]
    assert "merge_demo/ops/_ops_C.abi3.so" in cells, "\n".join(wide)
    narrow = on_a_terminal(lambda: render(report, output.console), 80, monkeypatch)
    fits("\n".join(narrow))
    assert "merge_demo/vecadd/_vecadd_C.abi3.so" in first_column(narrow[3:]), "\n".join(narrow)


def test_cache_info_is_plain_columns(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()
    info = run_assemble("cache", "info", env={"ASSEMBLE_CACHE": str(tmp_path / "cache"), "COLUMNS": "80"}, cwd=tmp_path)
    assert info.returncode == 0, info.stderr
    assert not BOX.search(info.stdout), info.stdout
    assert (re.search(r"^kind +entries +size$", info.stdout, re.M)
            and re.search(r"^total +0 +0 B$", info.stdout, re.M)), info.stdout


def plan_tables() -> None:
    from assembler.builder.matrix import MatrixEntry, ShardEntry
    from assembler.cli.plan import print_plan

    archs = ("8.0", "9.0a", "10.0a", "12.0")
    entries = [MatrixEntry("flash-attention-3", "f" * 32, "cmake", archs, 12, 182, False, None),
               MatrixEntry("vecadd", "e" * 32, "helper", (), 2, 0, True, False)]
    split = [ShardEntry("flash-attention-3", "f" * 32, index, 4, ("hdim128.cu",) * 40, 1234.5, "0123456789ab")
             for index in range(1, 5)]
    print_plan(entries, split, 4)


def test_plan_tables_are_plain_when_piped_and_boxed_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "\n".join(piped(plan_tables, 80, monkeypatch))
    fits(text)
    assert re.search(r"^dependency +key +archs +units +in store +est\.", text, re.M), text
    assert ({"flash-attention-3", "ffffffffffff", "eeeeeeeeeeee", "10.0a", "4/4", "0123456789ab", "unknown", "local"}
            <= set(words(text)))
    boxed = on_a_terminal(plan_tables, 80, monkeypatch)
    assert boxed[0].startswith("┏") and max(cell_width(line) for line in boxed) <= 80, "\n".join(boxed)


def test_patches_at_80_columns_cuts_no_file_name(git_workspace: GitWorkspace) -> None:
    """`assemble patches` at 80 columns (about 150 before, subjects squeezed to 15 columns): the
    patch file names (61 characters here) each whole on a line of their own, under the number
    `show` takes; piped without COLUMNS, one row per patch with the file name first."""
    ws = git_workspace
    long_subject = "Use header-only scalar types and checks in add_scaled everywhere"
    kernel = ws.root / "forks" / "kern"
    assert ws.assemble("checkout", "kern").returncode == 0
    for number, subject in enumerate((long_subject,
                                      "Port add_scaled to torch::stable::Tensor and STABLE_TORCH_LIBRARY"), 1):
        (kernel / f"file{number}.txt").write_text(subject + "\n")
        import subprocess

        subprocess.run(["git", "-C", str(kernel), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(kernel), "commit", "-qm", subject], check=True)
    exported = ws.assemble("export", "kern")
    assert exported.returncode == 0, exported.stderr
    names = [name for _, name in parse_series((ws.patches / "series").read_text())]
    assert max(len(name) for name in names) > 56, names
    env = {"ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "80"}
    narrow = run_assemble("-C", str(ws.root), "patches", "--offline", env=env)
    assert narrow.returncode == 0, narrow.stderr
    fits(narrow.stdout)
    lines = narrow.stdout.splitlines()
    for name in names:
        [line] = [line for line in lines if name in line]
        assert line.strip() == name  # a line of its own, whole
        number = name.split("-")[0]
        assert any(row.startswith(f"{number} ") for row in lines), narrow.stdout
    assert "Use header-only scalar types and checks in add_scaled" in narrow.stdout  # the subject wraps between words
    wide = run_assemble("-C", str(ws.root), "patches", "--offline",
                        env={"ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "300"})
    assert not BOX.search(wide.stdout)
    assert all(any(line.startswith(f"{name} ") for line in wide.stdout.splitlines()) for name in names), wide.stdout
    as_json = run_assemble("-C", str(ws.root), "patches", "--offline", "--json", env=env)
    assert [p["file"] for p in json.loads(as_json.stdout)["deps"][0]["patches"]] == names


def test_checkout_and_rebase_lines_fit_80_columns(git_workspace: GitWorkspace) -> None:
    """The quick tour at 80 columns: checkout names the fork relative to the workspace it runs
    in (the absolute path ran to 100 columns and more), rebase lists the applied patches a line
    each (207 columns on one line before); --json keeps the absolute path."""
    ws = git_workspace
    env = {"ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "80"}
    done = run_assemble("checkout", "kern", cwd=ws.root, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].endswith(" -> forks/kern"), done.stdout
    as_json = run_assemble("checkout", "kern", "--json", cwd=ws.root, env=env)
    assert json.loads(as_json.stdout)["deps"][0]["path"] == str(ws.fork)
    rebase = run_assemble("rebase", "kern", "--dry-run", cwd=ws.root, env=env)
    assert rebase.returncode == 0, rebase.stderr
    names = [name for _, name in parse_series((ws.patches / "series").read_text())]
    lines = rebase.stdout.splitlines()
    assert f"  applied ({len(names)}):" in lines and all(f"    {name}" in lines for name in names), rebase.stdout
    fits(done.stdout + rebase.stdout)


def test_status_lines_wrap_at_80_columns(git_workspace: GitWorkspace) -> None:
    """`assemble status` at COLUMNS=80: a line wider than 80 (an unexported commit's subject,
    a build's evidence) wraps between words under its own indent; one that fits keeps its
    spacing (`M  file`, as git status)."""
    import subprocess

    ws = git_workspace
    assert ws.assemble("checkout", "kern").returncode == 0
    subject = "Check the scale's dtype before the kernel runs, and say which dtype it was given when it is not float32"
    (ws.fork / "dtype.txt").write_text("x\n")
    subprocess.run(["git", "-C", str(ws.fork), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(ws.fork), "commit", "-qm", subject], check=True)
    (ws.fork / "dtype.txt").write_text("y\n")
    status = run_assemble("-C", str(ws.root), "status", env={"ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "80"})
    assert status.returncode == 0, status.stderr
    fits(status.stdout)
    lines = status.stdout.splitlines()
    assert "    M  dtype.txt" in lines, status.stdout
    [head] = [index for index, line in enumerate(lines) if line.startswith("    ") and subject.split()[0] in line]
    sha = lines[head].split()[0]
    assert len(sha) == 12 and lines[head + 1].startswith("      ")  # wrapped two deeper
    assert " ".join(" ".join(lines[head:head + 3]).split()[1:]).startswith(subject), status.stdout
    wide = run_assemble("-C", str(ws.root), "status", env={"ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "300"})
    assert f"    {sha} {subject}" in wide.stdout.splitlines()
