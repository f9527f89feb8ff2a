"""`assemble status` while a ``git am`` or ``git rebase`` is stopped in the checkout says what is
true (#29 item 21: it said "3 of 3 patches applied" while a rebase was stopped at 0001): how
many patches are applied now, which one it stopped at, and nothing the last checkout's record
says of a branch that has moved since (upstream's commits as "not exported", the series as
"already in the pin"). Real git sessions: an `assemble rebase` at a conflict, `assemble
checkout` stopped by ``git am``, and the user's own ``git rebase -i`` at an ``edit``."""

from __future__ import annotations

import json

import pytest

from tests.conftest import KERNEL_V1, GitWorkspace
from tests.gitrepo import git
from tests.rebase_scenarios import patch_files


def status(ws: GitWorkspace) -> tuple[dict[str, object], str]:
    """(the dependency's JSON object, the text report)."""
    result = ws.assemble("status", "--json")
    assert result.returncode == 0, result.stderr
    (dep,) = json.loads(result.stdout)["deps"]
    text = ws.assemble("status")
    assert text.returncode == 0, text.stderr
    return dep, text.stdout


def test_a_rebase_stopped_at_the_first_patch(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    first, _ = patch_files(ws)
    assert ws.assemble("checkout").returncode == 0
    renamed = KERNEL_V1.replace("const at::Tensor& x", "const at::Tensor& input").replace("x + 1", "input.add(1)")
    ws.upstream.commit("Rename the argument", {"csrc/kern.cpp": renamed})
    assert ws.assemble("rebase", "kern").returncode == 5
    dep, text = status(ws)
    assert dep["applied"] == 0
    assert dep["stopped"] == {"operation": "rebase", "onto": ws.upstream.head(), "applied": 0, "step": 1, "total": 2,
                              "patch": first.name, "commit": dep["stopped"]["commit"],  # type: ignore[index]
                              "subject": "Use stable tensor type"}
    assert dep["unexported"] == []  # upstream's "Rename the argument" is not the user's to export
    assert "2 of 2" not in text and "0 of 2 patches applied" in text and f"stopped at {first.name} (1 of 2)" in text
    assert "`assemble rebase kern --continue`" in text
    assert "commit them, then `assemble export kern`" not in text, text  # a conflict is resolved and continued


def test_a_checkout_stopped_by_git_am_at_the_second_patch(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    _, second = patch_files(ws)
    # its context is not in the pin
    second.write_text(second.read_text().replace("   return x + 1;", "   return x + 2;"))
    assert ws.assemble("checkout").returncode == 5
    dep, text = status(ws)
    assert dep["checkout"] == "stopped" and dep["applied"] == 1
    stopped = dep["stopped"]
    assert isinstance(stopped, dict)
    found = (stopped["operation"], stopped["patch"], stopped["step"], stopped["total"], stopped["applied"])
    assert found == ("am", second.name, 2, 2, 1)
    # 0001 is the series, applied: neither in the pin nor the user's to export
    assert dep["already_applied"] == [] and dep["unexported"] == []
    assert "1 of 2 patches applied" in text and f"stopped at {second.name} (2 of 2)" in text
    assert "git am --continue" in text
    assert "already in the pin" not in text and "not exported" not in text, text


@pytest.mark.parametrize("action", ["edit", "conflict"])
def test_the_users_own_rebase_stopped_in_the_series(git_workspace: GitWorkspace, monkeypatch: pytest.MonkeyPatch,
                                                    action: str) -> None:
    """``git rebase -i`` stopped at 0001: at an ``edit`` (0001 applied) or at a conflict with
    the tree rebased onto (nothing applied yet)."""
    ws = git_workspace
    first, _ = patch_files(ws)
    assert ws.assemble("checkout").returncode == 0
    if action == "edit":
        monkeypatch.setenv("GIT_SEQUENCE_EDITOR", "sed -i '1s/^pick/edit/'")
        git(ws.fork, "rebase", "-q", "-i", ws.base)
        applied, onto = 1, ws.base
    else:
        git(ws.fork, "checkout", "-q", "-b", "elsewhere", ws.base)
        (ws.fork / "csrc" / "kern.cpp").write_text(KERNEL_V1.replace("x + 1", "x.add(1)"))
        git(ws.fork, "commit", "-qam", "Elsewhere")
        onto = git(ws.fork, "rev-parse", "HEAD")
        git(ws.fork, "checkout", "-q", "assemble/kern")
        git(ws.fork, "rebase", "-q", onto, check=False)
        applied = 0
    dep, text = status(ws)
    assert dep["applied"] == applied and dep["operation"] == "rebase"
    stopped = dep["stopped"]
    assert isinstance(stopped, dict)
    assert (stopped["patch"], stopped["step"], stopped["total"], stopped["onto"]) == (first.name, 1, 2, onto)
    assert "2 of 2" not in text and f"{applied} of 2 patches applied" in text
    assert f"stopped at {first.name} (1 of 2)" in text
    assert "git rebase --continue" in text
    if action == "conflict":
        assert "not exported" not in text and "Elsewhere" not in text, text  # what it rebases onto is not the user's


def test_a_damaged_fork_is_reported_not_read_as_nothing_to_export(git_workspace: GitWorkspace) -> None:
    """Commits the user made since the checkout are what `export` would write: when git cannot
    list them (a commit object lost), `status` names the fork and git's reason, never "nothing
    to export"."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    (ws.fork / "notes.txt").write_text("one\n")
    git(ws.fork, "add", "notes.txt")
    git(ws.fork, "commit", "-qm", "My first fix")
    lost = git(ws.fork, "rev-parse", "HEAD")
    (ws.fork / "notes.txt").write_text("two\n")
    git(ws.fork, "commit", "-qam", "My second fix")
    (ws.fork / ".git" / "objects" / lost[:2] / lost[2:]).unlink()
    result = ws.assemble("status", "--json")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert str(ws.fork) in result.stderr and "git log failed" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
