"""`assemble rebase` on the command line as git users expect (issue 22, items 11 and 13): a dry
run that would conflict exits 1 (as `git merge-tree`), `--drop` takes a patch's number, and
`--skip` alone skips the patch the rebase stopped at (as `git rebase --skip`)."""

from __future__ import annotations

import json

from tests.conftest import KERNEL_V1, GitWorkspace
from tests.rebase_scenarios import patch_files


def conflicting_upstream(ws: GitWorkspace) -> None:
    """Upstream rewrites the lines patch 0001 changes: 0001 conflicts at the tip."""
    ws.upstream.commit("Rename the argument",
                       {"csrc/kern.cpp": KERNEL_V1.replace("const at::Tensor& x", "const at::Tensor& input")
                                               .replace("x + 1", "input.add(1)")})


def test_a_dry_run_that_would_conflict_exits_1(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    conflicting_upstream(ws)
    dry = ws.assemble("rebase", "kern", "--dry-run", "--json")
    assert dry.returncode == 1, dry.stderr  # was 0
    document = json.loads(dry.stdout)
    assert document["ok"] is False and document["conflicts"] and document["error"]["exit_code"] == 1
    assert "would stop" in document["error"]["message"]
    text = ws.assemble("rebase", "kern", "--dry-run")
    assert text.returncode == 1 and "--onto horizon" in text.stderr


def test_drop_by_number_and_skip_without_an_argument(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    first = patch_files(ws)[0].name
    conflicting_upstream(ws)
    for words in (("--drop", "1"), ("--skip",)):  # were: "no patch '1' left", "expected one argument"
        assert ws.assemble("rebase", "kern").returncode == 5  # stops at 0001
        result = ws.assemble("rebase", "kern", *words, "--json")
        assert result.returncode == 0, (words, result.stderr)
        report = json.loads(result.stdout)
        assert [d["file"] for d in report["dropped"] if d["how"] == "dropped-by-you"] == [first]
        assert ws.assemble("rebase", "kern", "--undo").returncode == 0
    not_stopped = ws.assemble("rebase", "kern", "--skip")
    assert not_stopped.returncode == 2 and "no rebase" in not_stopped.stderr
