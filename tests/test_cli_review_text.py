"""`assemble review`'s text for a hunk that only moved tokens (issue 30's minor): its row read
`FLAGGED  in  in`, the same tokens under "removed" and "added" with nothing saying why that is a
change. The example's vecadd series with two names swapped in its port, reviewed by the
command's own functions and drawn as the command draws it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from assembler.cli.review import render
from assembler.migration.review import HunkVerdict, run_review
from assembler.workspace import open_workspace
from tests.example import EXAMPLE
from tests.test_review import PORT


def test_a_hunk_that_only_moved_tokens_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one row per hunk: the width of the runner's terminal is not the subject
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLE, ws,
                    ignore=shutil.ignore_patterns("forks", "upstreams", ".assemble", "dist", "__pycache__"))
    patch = ws / "patches" / "vecadd" / PORT
    text = patch.read_text()
    for old, new in (("+  const float* xp = x.const_data_ptr<float>();",
                      "+  const float* xp = y.const_data_ptr<float>();"),
                     ("+  const float* yp = y.const_data_ptr<float>();",
                      "+  const float* yp = x.const_data_ptr<float>();")):
        assert text.count(old) == 1
        text = text.replace(old, new)
    patch.write_text(text)
    dep = open_workspace(ws).manifest.select(["vecadd"])[0]
    report = run_review(dep.name, dep.patches_dir, dep.series, [PORT])
    report.compile.reason = "not asked to (--no-compile)"
    (hunk,) = [hunk for hunk in report.patches[0].hunks if hunk.verdict is HunkVerdict.FLAGGED]
    # what printed `FLAGGED  x y  y x`
    assert hunk.reordered and sorted(hunk.removed_tokens) == sorted(hunk.added_tokens)
    lines = render(report, markdown=False).splitlines()
    (row,) = [line for line in lines if line.startswith(f"{hunk.id} ")]
    removed = " ".join(hunk.removed_tokens)
    assert row.split()[2:] == ["FLAGGED", *removed.split(), "(the", "same", "tokens,", "in", "another", "order)"], row
