"""`assemble status` and `assemble show` (issue 22, items 10, 21 and 22): what a fork holds
that the series does not, a rebase in progress, a patch's diff, the last rebase's full
range-diff, and editing a patch in the middle of a series as the README says."""

from __future__ import annotations

import json

import pytest

from tests.conftest import KERNEL_V1, GitWorkspace
from tests.gitrepo import git
from tests.rebase_scenarios import patch_files


def status(ws: GitWorkspace) -> dict[str, object]:
    result = ws.assemble("status", "--json")
    assert result.returncode == 0, result.stderr
    (dep,) = json.loads(result.stdout)["deps"]
    assert isinstance(dep, dict)
    return dep


def test_status_lists_edits_and_unexported_commits_like_git(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    assert status(ws)["checkout"] == "absent"
    assert ws.assemble("checkout").returncode == 0
    clean = status(ws)
    assert clean["checkout"] == "ready" and clean["branch"] == "assemble/kern" and clean["applied"] == 2
    assert clean["edits"] == [] and clean["unexported"] == [] and clean["rebase"] is None
    assert clean["migrated_on_fork"] == "not checked" and clean["check"] is None and clean["build"] is None

    (ws.fork / "docs" / "usage.md").write_text("edited\n")
    git(ws.fork, "commit", "-qam", "Document add_one")
    (ws.fork / "README.md").write_text("dirty\n")
    (ws.fork / "notes.txt").write_text("new\n")
    found = status(ws)
    assert found["edits"] == [{"code": "M", "path": "README.md"}, {"code": "??", "path": "notes.txt"}]
    assert [c["subject"] for c in found["unexported"]] == ["Document add_one"]  # type: ignore[union-attr]
    text = ws.assemble("status").stdout
    assert "    M  README.md\n" in text and "    ?? notes.txt\n" in text
    assert "Document add_one" in text and "`assemble export kern`" in text
    assert max(len(line) for line in text.splitlines()) <= 80, text


def test_status_shows_a_rebase_stopped_at_a_conflict(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    ws.upstream.commit("Rename the argument",
                       {"csrc/kern.cpp": KERNEL_V1.replace("const at::Tensor& x", "const at::Tensor& input")
                                               .replace("x + 1", "input.add(1)")})
    assert ws.assemble("rebase", "kern").returncode == 5
    rebase = status(ws)["rebase"]
    assert isinstance(rebase, dict)
    assert rebase["phase"] == "stopped" and rebase["stopped_at"] == patch_files(ws)[0].name
    assert rebase["conflicts"] == ["csrc/kern.cpp"]
    assert "`assemble rebase kern --continue`, or `--abort`" in ws.assemble("status").stdout


def test_show_prints_a_patch_by_number_or_name_and_the_series(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    first, second = patch_files(ws)
    for wanted in ("2", "0002", second.name, "Register-with"):
        result = ws.assemble("show", "kern", wanted)
        assert result.returncode == 0, result.stderr
        assert result.stdout == second.read_text()
    document = json.loads(ws.assemble("show", "kern", "1", "--json").stdout)
    assert document["patch"] == first.name and document["text"] == first.read_text()
    assert document["subject"] == "Use stable tensor type"
    listing = ws.assemble("show", "kern").stdout
    assert first.name in listing and "Register with STABLE_TORCH_LIBRARY" in listing
    missing = ws.assemble("show", "kern", "9")
    assert missing.returncode == 2 and "no patch '9'" in missing.stderr
    ambiguous = ws.assemble("show", "kern", "patch")
    assert ambiguous.returncode == 2 and "several" in ambiguous.stderr


def test_show_range_diff_prints_the_last_rebase_in_full(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    none = ws.assemble("show", "kern", "--range-diff")
    assert none.returncode == 2 and "no rebase recorded" in none.stderr
    ws.upstream.commit("Docs", {"docs/more.md": "more\n"})
    rebased = ws.assemble("rebase", "kern", "--json")
    assert rebased.returncode == 0, rebased.stderr
    shown = ws.assemble("show", "kern", "--range-diff")
    assert shown.returncode == 0, shown.stderr
    journal = json.loads((ws.root / ".assemble" / "rebase" / ".undo" / "kern" / "journal.json").read_text())
    assert shown.stdout.rstrip("\n") == journal["range_diff"].rstrip("\n") and "Use stable tensor type" in shown.stdout


def test_editing_a_patch_in_the_middle_of_a_series_as_the_readme_says(git_workspace: GitWorkspace,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`git rebase -i` in forks/DEP, `edit` on the patch, amend, continue, `assemble export`:
    the edited patch keeps its file name, the later one is unchanged byte for byte."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    first, second = patch_files(ws)
    monkeypatch.setenv("GIT_SEQUENCE_EDITOR", "sed -i '1s/^pick/edit/'")  # `edit` on the first patch
    git(ws.fork, "rebase", "-q", "-i", ws.base)
    second_bytes = second.read_bytes()
    # a file 0002 leaves alone
    (ws.fork / "docs" / "usage.md").write_text("call torch.ops.kern.add_one on a stable tensor\n")
    git(ws.fork, "commit", "-q", "-a", "--amend", "--no-edit")
    git(ws.fork, "rebase", "--continue")
    exported = ws.assemble("export", "kern", "--json")
    assert exported.returncode == 0, exported.stderr
    (dep,) = json.loads(exported.stdout)["deps"]
    assert dep["written"] == [first.name]
    assert "+call torch.ops.kern.add_one on a stable tensor" in ws.assemble("show", "kern", "1").stdout
    assert second.read_bytes() == second_bytes
    assert [p.name for p in patch_files(ws)] == [first.name, second.name]


def test_a_no_op_checkout_lists_the_edits_it_keeps_like_git_checkout(git_workspace: GitWorkspace) -> None:
    """Item 10: a dirty fork, then `checkout`, printed "up-to-date" and said nothing of the edit."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    quiet = ws.assemble("checkout", "--json")
    assert json.loads(quiet.stdout)["deps"][0]["edits"] == []
    (ws.fork / "README.md").write_text("edited\n")
    (ws.fork / "docs" / "usage.md").unlink()
    result = ws.assemble("checkout")
    assert result.returncode == 0, result.stderr
    assert ("up-to-date" in result.stdout and "  M README.md\n" in result.stdout
            and "  D docs/usage.md\n" in result.stdout)
    assert (json.loads(ws.assemble("checkout", "--json").stdout)["deps"][0]["edits"]
            == ["M README.md", "D docs/usage.md"])
    assert (ws.fork / "README.md").read_text() == "edited\n"  # kept
