"""`assemble check` read by a person (#30 minors): the header fits 80 columns, and a dependency
without a build recipe is an error naming the missing table and the fix, not "0 of 0
translation units clean" with exit 0 (it proves nothing). Real git, the real torch 2.13.0
build environment and g++."""

from __future__ import annotations

import json
from pathlib import Path

from assembler.report.table import cell_width
from tests.build_support import HERMETIC_CUDA
from tests.conftest import GitWorkspace, run_assemble

TORCH = "2.13.0"


def with_torch(ws: GitWorkspace) -> GitWorkspace:
    """The conftest workspace (deps.kern with no [deps.kern.build]) with a torch to check against."""
    ws.manifest.write_text(ws.manifest.read_text().replace('python-abi = "3.9"\n',
                                                           f'python-abi = "3.9"\ntorch = "{TORCH}"\n'))
    return ws


def test_check_of_a_dependency_without_a_recipe_is_an_error(git_workspace: GitWorkspace) -> None:
    ws = with_torch(git_workspace)
    done = ws.assemble("check", "kern")
    assert done.returncode == 2, done.stdout + done.stderr  # main: exit 0, "0 of 0 translation units clean"
    assert "0 of 0" not in done.stdout + done.stderr
    text = " ".join(done.stdout.split())
    assert "deps.toml:" in text and "deps.kern has no build recipe ([deps.kern.build])" in text, done.stdout
    assert "hint: add [[deps.kern.build.extensions]]" in text, done.stdout
    assert not (ws.root / "forks" / "kern").exists()  # refused before any checkout
    document = json.loads(ws.assemble("check", "kern", "--json").stdout)
    assert document["ok"] is False and document["deps"][0]["error"]["exit_code"] == 2


def test_check_report_fits_80_columns(example_ws: Path, private_cache: Path) -> None:
    """The example's CUDA dependency checked with the hermetic nvcc: the header names torch, the
    host compiler and nvcc (93 columns on main), each line within 80."""
    done = run_assemble("-C", str(example_ws), "check", "scalekit", "--cuda", HERMETIC_CUDA,
                        env={"ASSEMBLE_CACHE": str(private_cache), "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("assemble check: torch") and "nvcc" in done.stdout, done.stdout
    assert max(cell_width(line) for line in lines) <= 80, "\n".join(f"{cell_width(line):3} {line}" for line in lines)
    assert "scalekit: CLEAN 1 of 1 translation units clean" in " ".join(done.stdout.split())
