"""`assemble rebase` on real repositories: patches landing upstream verbatim or squashed, a
rewritten patch (conflict, --continue, --abort byte for byte), a rename upstream, a switch of
repository, kill -9 in the middle, the horizon, and the refusals that keep work safe."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import filelock
import pytest

from tests.conftest import KERNEL_V1, ROOT, GitWorkspace, run_assemble
from tests.example import EXAMPLE, make_upstreams
from tests.gitrepo import Repo, git
from tests.rebase_scenarios import (
    STABLE_ALL,
    land_verbatim,
    patch_files,
    snapshot,
    wide_workspace,
)


def rebase_json(ws: GitWorkspace, *args: str) -> tuple[int, dict]:
    result = ws.assemble("rebase", *args, "--json")
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def test_verbatim_patch_is_dropped_and_the_rest_reapplied(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    first, second = patch_files(ws)
    second_bytes = second.read_bytes()
    landed = land_verbatim(ws, first)
    manifest_before = ws.manifest.read_text()
    code, report = rebase_json(ws, "kern")
    assert code == 0, report
    tip = ws.upstream.head()
    assert report["status"] == "done" and report["new_base"] == tip and report["old_base"] == ws.base
    assert report["upstream_commits_crossed"] == 2
    assert report["applied"] == [second.name]
    assert report["dropped"] == [{"file": first.name, "subject": "Use stable tensor type", "how": "patch-id",
                                  "commit": landed, "commit_subject": "Use stable tensor type"}]
    assert report["patches"] == {"written": [], "unchanged": [second.name], "removed": [first.name]}
    # deps.toml: only the commit changed, comments intact; series keeps its comment header
    assert ws.manifest.read_text() == manifest_before.replace(ws.base, tip)
    assert (ws.patches / "series").read_text() == f"# migration to the Stable ABI\n{second.name}\n"
    assert second.read_bytes() == second_bytes and not first.exists()
    assert git(ws.fork, "rev-parse", "HEAD~1") == tip
    assert "ready" in ws.assemble("deps").stdout
    assert not (ws.root / ".assemble" / "rebase" / "kern").exists()
    # a second run has nothing to do
    code, again = rebase_json(ws, "kern")
    assert code == 0 and again["status"] == "up-to-date"


def test_user_git_config_and_hooks_stay_out(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    """A global git config that signs commits, strips diff prefixes, autostashes and points
    at hooks that fail: the replay, the export and the status layers ignore all of it."""
    ws = git_workspace
    first, second = patch_files(ws)
    second_bytes = second.read_bytes()
    landed = land_verbatim(ws, first)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("pre-rebase", "pre-commit", "commit-msg", "post-rewrite", "pre-applypatch", "post-checkout"):
        (hooks / name).write_text("#!/bin/sh\necho hook ran >&2\nexit 1\n")
        (hooks / name).chmod(0o755)
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\thooksPath = {hooks}\n[commit]\n\tgpgSign = true\n[diff]\n\tnoprefix = true\n"
                      "[rebase]\n\tautoStash = true\n\tmissingCommitsCheck = error\n[format]\n\tsignOff = true\n")
    env = {"ASSEMBLE_CACHE": str(ws.cache), "GIT_CONFIG_GLOBAL": str(config)}
    status = run_assemble("-C", str(ws.root), "patches", "--format", "json", env=env)
    assert status.returncode == 0, status.stderr
    assert [p["status"] for p in json.loads(status.stdout)["deps"][0]["patches"]] == ["upstream", "local"]
    result = run_assemble("-C", str(ws.root), "rebase", "kern", "--json", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["applied"] == [second.name] and [d["commit"] for d in report["dropped"]] == [landed]
    assert second.read_bytes() == second_bytes and "hook ran" not in result.stderr


def test_squash_merged_pair_is_dropped(git_workspace: GitWorkspace) -> None:
    """Both patches land upstream as one squashed commit with an extra tweak: no patch-id
    matches, the replay finds both empty."""
    ws = git_workspace
    squash = ws.upstream.commit("Port to the stable ABI (#12)", {"csrc/kern.cpp": "// ported\n" + STABLE_ALL})
    code, report = rebase_json(ws, "kern")
    assert code == 0, report
    assert report["applied"] == []
    assert {(d["file"][:4], d["how"], d["commit"]) for d in report["dropped"]} == {
        ("0001", "applies-empty", squash), ("0002", "applies-empty", squash)}
    assert sorted(p.name for p in ws.patches.iterdir()) == ["series"]
    assert git(ws.fork, "rev-parse", "HEAD") == squash


def test_dependent_squash_reverse_applies(tmp_path: Path) -> None:
    """Patch 2 rewrites the line patch 1 wrote; upstream squashed them: patch 1 conflicts in
    a three-way merge, and is recognised because it reverse-applies once patch 2 is taken out."""
    root = tmp_path / "ws"
    upstream = Repo(root / "remotes" / "kern")
    base = upstream.commit("Initial", {"csrc/kern.cpp": KERNEL_V1})
    upstream.git("checkout", "-q", "-b", "ours")
    upstream.commit("Add two\n\nForwarded: no\n", {"csrc/kern.cpp": KERNEL_V1.replace("x + 1", "x + 2")})
    upstream.commit("Add three\n\nForwarded: no\n", {"csrc/kern.cpp": KERNEL_V1.replace("x + 1", "x + 3")})
    patches = root / "patches" / "kern"
    upstream.git("format-patch", "-q", "--no-signature", "--zero-commit", "--no-numbered", "--full-index", "-o",
                 str(patches), f"{base}..ours")
    (patches / "series").write_text("".join(f"{p.name}\n" for p in sorted(patches.glob("*.patch"))))
    upstream.git("checkout", "-q", "main")
    squash = upstream.commit("Add three (squashed)", {"csrc/kern.cpp": KERNEL_V1.replace("x + 1", "x + 3")})
    from tests.conftest import MANIFEST

    (root / "deps.toml").write_text(MANIFEST.format(base=base))
    ws = GitWorkspace(root, upstream, base, tmp_path / "cache")
    status = json.loads(ws.assemble("patches", "--format", "json").stdout)["deps"][0]["patches"]
    assert [(p["status"], p["evidence"]["how"], p["evidence"].get("commit")) for p in status] == [
        ("upstream", "reverse-applies", squash), ("upstream", "applies-empty", squash)]
    code, report = rebase_json(ws, "kern")
    assert code == 0, report
    assert [(d["how"], d["commit"]) for d in report["dropped"]] == [("reverse-applies", squash)] * 2
    assert git(ws.fork, "rev-parse", "HEAD") == squash


def _rewrite_upstream(ws: GitWorkspace) -> str:
    ws.upstream.commit("Docs", {"docs/more.md": "more\n"})
    rewritten = KERNEL_V1.replace("const at::Tensor& x", "const at::Tensor& input").replace("x + 1", "input.add(1)")
    return ws.upstream.commit("Rename the argument", {"csrc/kern.cpp": rewritten})


def test_conflict_then_abort_restores_everything_byte_for_byte(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    before = snapshot(ws)
    _rewrite_upstream(ws)
    result = ws.assemble("rebase", "kern")
    assert result.returncode == 5, result.stderr
    assert "patch 0001-Use-stable-tensor-type.patch conflicts with main in csrc/kern.cpp" in result.stderr
    assert f"git -C {ws.fork} add csrc/kern.cpp" in result.stdout
    assert "rebase --continue kern" in result.stdout and "rebase --abort kern" in result.stdout
    assert "<<<<<<<" in (ws.fork / "csrc" / "kern.cpp").read_text()
    # a new start is refused while this one is open; other commands see a stopped checkout
    again = ws.assemble("rebase", "kern")
    assert again.returncode == 5 and "already in progress" in again.stderr
    aborted = ws.assemble("rebase", "--abort", "kern")
    assert aborted.returncode == 0, aborted.stderr
    assert snapshot(ws) == before
    assert not (ws.root / ".assemble" / "rebase" / "kern").exists()


def test_abort_keeps_edits_made_while_stopped(git_workspace: GitWorkspace) -> None:
    """The rebase had not written deps.toml or patches/ when it stopped: --abort must not put
    back over what the user edited meanwhile; it keeps it and says so."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    before = snapshot(ws)
    _rewrite_upstream(ws)
    assert ws.assemble("rebase", "kern").returncode == 5
    edited_manifest = ws.manifest.read_text() + "# pin kern until the 1.0 release\n"
    ws.manifest.write_text(edited_manifest)
    first = patch_files(ws)[0]
    edited_patch = first.read_text().replace("Switch at::Tensor", "Switch every at::Tensor")
    first.write_text(edited_patch)
    result = ws.assemble("rebase", "--abort", "kern")
    assert result.returncode == 0, result.stderr
    assert f"warning: {ws.manifest} was changed during the rebase; left as it is" in " ".join(result.stderr.split())
    assert f"{ws.patches} was changed during the rebase" in " ".join(result.stderr.split())
    assert ws.manifest.read_text() == edited_manifest and first.read_text() == edited_patch
    after = snapshot(ws)
    assert {k: v for k, v in after.items() if k not in ("deps.toml", "patches")} == {
        k: v for k, v in before.items() if k not in ("deps.toml", "patches")}
    assert not (ws.root / ".assemble" / "rebase" / "kern").exists()


def test_git_failures_are_input_errors_and_a_bad_journal_is_named(git_workspace: GitWorkspace) -> None:
    """A git refusal (a lock left by another git) exits 2, not 5 (conflict), with git's own
    line; an unreadable journal is named with the way out, never a traceback."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    before = snapshot(ws)
    _rewrite_upstream(ws)
    (ws.fork / ".git" / "index.lock").write_text("")
    locked = ws.assemble("rebase", "kern")
    assert locked.returncode == 2, locked.stderr
    assert "git rebase failed" in locked.stderr and "index.lock" in locked.stderr and "Traceback" not in locked.stderr
    assert ws.assemble("rebase", "--abort").returncode == 0
    assert snapshot(ws) == before
    assert ws.assemble("rebase", "kern").returncode == 5
    journal = ws.root / ".assemble" / "rebase" / "kern" / "journal.json"
    for damage in ("{not json",
                   json.dumps({k: v for k, v in json.loads(journal.read_text()).items() if k != "planned"})):
        journal.write_text(damage)
        result = ws.assemble("rebase", "--abort", "kern")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert f"{journal}: cannot read the journal of the rebase of kern" in " ".join(result.stderr.split())
        assert "backup.tar" in result.stderr


def test_scratch_git_failures_are_assemble_errors(git_workspace: GitWorkspace) -> None:
    from assembler.errors import ExitCode
    from assembler.git.process import GitFailed
    from assembler.git.scratch import Scratch

    with Scratch([ws_path := git_workspace.upstream.path]) as scratch:
        with pytest.raises(GitFailed) as failed:
            scratch.out("cat-file", "-p", "0" * 40)
        assert failed.value.exit_code == ExitCode.BAD_INPUT and "git cat-file failed" in failed.value.message
        assert str(ws_path) in failed.value.message
        with pytest.raises(GitFailed) as failed:
            scratch.pipe(["-c", "core.quotePath=false", "log", "-p", "no-such-revision"], ["patch-id", "--stable"])
        assert "git log failed: fatal: ambiguous argument 'no-such-revision'" in failed.value.message


def test_conflict_then_continue(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    new_tip = _rewrite_upstream(ws)
    assert ws.assemble("rebase", "kern").returncode == 5
    kern = ws.fork / "csrc" / "kern.cpp"
    unresolved = ws.assemble("rebase", "--continue", "kern")
    assert unresolved.returncode == 5 and "still unresolved: csrc/kern.cpp" in unresolved.stderr
    kern.write_text(KERNEL_V1.replace("at::Tensor", "torch::stable::Tensor").replace("Tensor& x", "Tensor& input")
                    .replace("x + 1", "input.add(1)"))
    unstaged = ws.assemble("rebase", "--continue")
    assert unstaged.returncode == 5, unstaged.stderr  # the file is still marked conflicted until `git add`
    git(ws.fork, "add", "csrc/kern.cpp")
    code, report = rebase_json(ws, "--continue")
    assert code == 0, report
    assert report["applied"] == ["0001-Use-stable-tensor-type.patch", "0002-Register-with-STABLE_TORCH_LIBRARY.patch"]
    assert report["patches"]["written"] == report["applied"]
    first = (ws.patches / "0001-Use-stable-tensor-type.patch").read_text()
    assert "+torch::stable::Tensor add_one(const torch::stable::Tensor& input) {" in first
    assert "Forwarded: https://git.invalid/kern/pull/7" in first
    assert f'commit = "{new_tip}"' in ws.manifest.read_text()
    # the exported series reproduces the resolved checkout exactly
    head_tree = git(ws.fork, "rev-parse", "HEAD^{tree}")
    shutil.rmtree(ws.fork)
    assert ws.assemble("checkout").returncode == 0
    assert git(ws.fork, "rev-parse", "HEAD^{tree}") == head_tree


def test_continue_after_the_user_finished_with_git(git_workspace: GitWorkspace) -> None:
    """The user resolves and runs `git rebase --continue` themselves: --continue takes the
    result as is and exports it."""
    ws = git_workspace
    new_tip = _rewrite_upstream(ws)
    assert ws.assemble("rebase", "kern").returncode == 5
    (ws.fork / "csrc" / "kern.cpp").write_text(
        KERNEL_V1.replace("at::Tensor", "torch::stable::Tensor").replace("Tensor& x", "Tensor& input").replace(
            "x + 1", "input.add(1)"))
    git(ws.fork, "add", "csrc/kern.cpp")
    subprocess.run(["git", "-c", "core.editor=true", "rebase", "--continue"], cwd=ws.fork, check=True,
                   capture_output=True)
    code, report = rebase_json(ws, "--continue", "kern")
    assert code == 0, report
    assert report["applied"] == [p.name for p in patch_files(ws)] and report["patches"]["written"] == report["applied"]
    assert git(ws.fork, "rev-parse", "HEAD~2") == new_tip and f'commit = "{new_tip}"' in ws.manifest.read_text()


def test_rename_upstream_is_followed(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    ws.upstream.git("mv", "csrc/kern.cpp", "csrc/kernel.cpp")
    ws.upstream.commit("Rename kern.cpp to kernel.cpp", {})
    dry = ws.assemble("rebase", "kern", "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["conflicts"] == []
    assert not ws.fork.exists(), "a dry run creates nothing"
    code, report = rebase_json(ws, "kern")
    assert code == 0, report
    assert len(report["applied"]) == 2 and report["patches"]["written"] == report["applied"]
    assert "STABLE_TORCH_LIBRARY(kern" in (ws.fork / "csrc" / "kernel.cpp").read_text()
    assert all("diff --git a/csrc/kernel.cpp b/csrc/kernel.cpp" in p.read_text() for p in patch_files(ws))


def test_switch_to_a_fork_repository(git_workspace: GitWorkspace) -> None:
    """DeepGEMM-style move: follow another repository (a fork that already carries patch 1)."""
    ws = git_workspace
    first, second = patch_files(ws)
    fork_repo = Repo(ws.root / "remotes" / "kern-fork")
    fork_repo.git("pull", "-q", str(ws.upstream.path), "main")
    fork_repo.git("am", "-q", str(first))
    fork_tip = fork_repo.commit("Fork: CI for the stable ABI", {"ci.yml": "build: stable\n"})
    ws.upstream.commit("Upstream moves on elsewhere", {"README.md": "kern 2\n"})
    url = "https://git.invalid/kern-fork"
    code, report = rebase_json(ws, "kern", "--upstream", url)
    assert code == 0, report
    assert report["url"] == url and report["new_base"] == fork_tip
    assert [d["file"] for d in report["dropped"]] == [first.name]
    text = ws.manifest.read_text()
    assert f'upstream = "{url}"  # the upstream' in text and f'commit = "{fork_tip}"' in text
    assert "source" not in text and "# Test workspace: comments must survive edits." in text
    listing = json.loads(ws.assemble("deps", "--json").stdout)["deps"][0]
    assert listing["upstream"] == url and listing["checkout"] == "ready"
    assert (ws.patches / "series").read_text().splitlines()[1:] == [second.name]
    # the fork owns the followed repository's objects (linked in, never borrowed): it outlives the cache
    assert not (ws.fork / ".git" / "objects" / "info" / "alternates").exists()
    assert ws.assemble("cache", "clean").returncode == 0
    assert (subprocess.run(["git", "-C", str(ws.fork), "fsck", "--connectivity-only"], capture_output=True).returncode
            == 0)
    assert git(ws.fork, "rev-parse", "HEAD~1") == fork_tip


def _start_and_kill(ws: GitWorkspace, delay: float, group: bool) -> bool:
    """Start a rebase, kill -9 it ``delay`` s after its journal appears (with ``group``, its
    git children too, as a terminal would); True if it was still running."""
    journal = ws.root / ".assemble" / "rebase" / "kern" / "journal.json"
    env = {**os.environ, "ASSEMBLE_CACHE": str(ws.cache)}
    proc = subprocess.Popen([sys.executable, "-m", "assembler", "-C", str(ws.root), "rebase", "kern"], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while not journal.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(delay)
    running = proc.poll() is None
    if group:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    return running and journal.exists()


@pytest.mark.integration
def test_kill_9_mid_rebase_is_recoverable(tmp_path: Path) -> None:
    template = wide_workspace(tmp_path / "template")
    assert template.assemble("checkout").returncode == 0
    reference = _copy(template, tmp_path / "reference")
    assert reference.assemble("rebase", "kern").returncode == 0
    expected_manifest = reference.manifest.read_bytes()
    expected_patches = {p.name: p.read_bytes() for p in reference.patches.iterdir()}
    expected_head = git(reference.fork, "rev-parse", "HEAD")
    interrupted = 0
    cases = [(0.0, "--abort", False), (0.02, "--continue", True), (0.06, "--abort", True), (0.12, "--continue", False)]
    for number, (delay, recovery, group) in enumerate(cases):
        ws = _copy(template, tmp_path / f"case{number}")
        before = snapshot(ws)
        if not _start_and_kill(ws, delay, group):
            continue
        interrupted += 1
        result = ws.assemble("rebase", recovery, "kern")
        assert result.returncode == 0, (delay, recovery, result.stderr)
        assert not (ws.root / ".assemble" / "rebase" / "kern").exists()
        if recovery == "--abort":
            assert snapshot(ws) == before, (delay, recovery)
        else:
            assert ws.manifest.read_bytes() == expected_manifest
            assert {p.name: p.read_bytes() for p in ws.patches.iterdir()} == expected_patches
            assert git(ws.fork, "rev-parse", "HEAD") == expected_head
            assert git(ws.fork, "status", "--porcelain") == ""
    assert interrupted >= 2


def _copy(ws: GitWorkspace, target: Path) -> GitWorkspace:
    """The workspace (with its upstream under remotes/ and its checkout) and its cache, copied
    (the checkout keeps borrowing objects from the original cache, which stays)."""
    shutil.copytree(ws.root, target / "ws", symlinks=True)
    shutil.copytree(ws.cache, target / "cache", symlinks=True)
    upstream = Repo.__new__(Repo)
    upstream.path, upstream.clock = target / "ws" / "remotes" / "kern", ws.upstream.clock
    return GitWorkspace(target / "ws", upstream, ws.base, target / "cache")


def test_horizon_finds_the_breaking_merge(git_workspace: GitWorkspace) -> None:
    """Twelve first-parent commits; the 7th merges a pull request that renames the
    registration macro, which breaks patch 2. Bisection must say: horizon = 6th, broken by 7th."""
    ws = git_workspace
    up = ws.upstream
    chain = []
    for n in range(1, 13):
        if n == 7:
            up.git("checkout", "-q", "-b", "pr7")
            up.commit("Rename the registration macro",
                      {"csrc/kern.cpp": KERNEL_V1.replace("TORCH_LIBRARY(kern", "KERN_LIBRARY(kern")})
            up.git("checkout", "-q", "main")
            up.git("merge", "-q", "--no-ff", "-m", "Merge pull request #7", "pr7")
            chain.append(up.head())
        else:
            chain.append(up.commit(f"Docs {n}", {"docs/usage.md": f"call torch.ops.kern.add_one ({n})\n"}))
    code, report = rebase_json(ws, "kern", "--dry-run")
    assert code == 1, report  # it would conflict: exit 1, as git merge-tree (issue 22, item 11)
    assert [c["file"][:4] for c in report["conflicts"]] == ["0002"]
    assert (report["horizon"]["commit"] == chain[5] and report["horizon"]["position"] == 6
            and report["horizon"]["total"] == 12)
    assert report["horizon"]["breaks"] == [{"patch": "0002-Register-with-STABLE_TORCH_LIBRARY.patch",
                                            "commit": chain[6],
                                            "subject": "Merge pull request #7", "files": ["csrc/kern.cpp"]}]
    assert not ws.fork.exists() and f'commit = "{ws.base}"' in ws.manifest.read_text()
    up.git("tag", "v0.5", chain[4])
    for ref, expected in (("v0.5", chain[4]), (chain[2][:10], chain[2])):
        code, report = rebase_json(ws, "kern", "--onto", ref, "--dry-run")
        assert code == 0 and report["new_base"] == expected and report["conflicts"] == [] and report["onto"] == ref
    # the real run stops at the tip with the same horizon; --abort, then --onto horizon
    stopped = ws.assemble("rebase", "kern", "--json")
    assert stopped.returncode == 5 and json.loads(stopped.stdout)["horizon"]["commit"] == chain[5]
    assert ws.assemble("rebase", "--abort").returncode == 0
    code, report = rebase_json(ws, "kern", "--onto", "horizon")
    assert code == 0, report
    assert report["new_base"] == chain[5] and len(report["applied"]) == 2
    assert f'commit = "{chain[5]}"' in ws.manifest.read_text()


def test_refuses_a_dirty_checkout_and_waits_for_the_lock(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    land_verbatim(ws, patch_files(ws)[0])
    assert ws.assemble("checkout").returncode == 0
    (ws.fork / "scratch.txt").write_text("my notes\n")
    result = ws.assemble("rebase", "kern")
    assert result.returncode == 4 and "uncommitted changes (scratch.txt)" in result.stderr
    (ws.fork / "scratch.txt").unlink()
    (ws.root / ".assemble").mkdir(exist_ok=True)
    with filelock.FileLock(ws.root / ".assemble" / "lock"):
        locked = subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws.root), "rebase", "kern"], cwd=ROOT,
                                env={**os.environ, "ASSEMBLE_CACHE": str(ws.cache), "ASSEMBLE_LOCK_TIMEOUT": "0.2"},
                                capture_output=True, text=True)
    assert locked.returncode == 8, locked.stderr
    assert f'commit = "{ws.base}"' in ws.manifest.read_text()


def test_crash_after_export_is_recoverable(git_workspace: GitWorkspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash after patches/ and deps.toml were rewritten (the journal's last step fails, as
    if the process died there): --abort puts both back byte for byte; --continue finishes."""
    from assembler.upstreaming import journal, rebase
    from assembler.workspace import open_workspace

    ws = git_workspace
    land_verbatim(ws, patch_files(ws)[0])
    assert ws.assemble("checkout").returncode == 0
    before = snapshot(ws)
    monkeypatch.setenv("ASSEMBLE_CACHE", str(ws.cache))
    finish = journal.finish

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    for recovery, edit in (("--abort", False), ("--abort", True), ("--continue", False)):
        monkeypatch.setattr(journal, "finish", crash)
        workspace = open_workspace(ws.root)
        with pytest.raises(KeyboardInterrupt):
            rebase.start(workspace, workspace.manifest.deps["kern"])
        monkeypatch.setattr(journal, "finish", finish)
        assert snapshot(ws)["deps.toml"] != before["deps.toml"] and snapshot(ws)["patches"] != before["patches"]
        if edit:  # the user edits deps.toml after the crash: the abort must not revert that
            ws.manifest.write_text(ws.manifest.read_text() + "# edited after the crash\n")
            edited = ws.manifest.read_bytes()
        result = ws.assemble("rebase", recovery)
        assert result.returncode == 0, result.stderr
        if edit:
            assert ws.manifest.read_bytes() == edited and "deps.toml was changed during the rebase" in result.stderr
            assert ({k: v for k, v in snapshot(ws).items() if k != "deps.toml"}
                    == {k: v for k, v in before.items() if k != "deps.toml"})
            ws.manifest.write_bytes(before["deps.toml"])  # type: ignore[arg-type]
        elif recovery == "--abort":
            assert snapshot(ws) == before
        else:
            assert f'commit = "{ws.upstream.head()}"' in ws.manifest.read_text()
            assert "ready" in ws.assemble("deps").stdout
        assert not (ws.root / ".assemble" / "rebase" / "kern").exists()


def test_example_workspace_follows_its_advancing_upstream(tmp_path: Path) -> None:
    """The issue's demo: after examples/stable-abi's upstream advances (it merged our first
    vecadd patch), rebase drops that patch, re-applies the rest and updates deps.toml with
    its comments intact; `patches --format json` gives every status with its evidence."""
    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble", "build"))
    heads = make_upstreams(root / "upstreams", advance=True)
    ws = GitWorkspace(root, Repo.__new__(Repo), "", tmp_path / "cache")
    landed = git(root / "upstreams" / "vecadd.git", "rev-parse", "main~1")
    names = sorted(p.name for p in (root / "patches" / "vecadd").glob("*.patch"))

    before = {d["name"]: d for d in json.loads(ws.assemble("patches", "--format", "json").stdout)["deps"]}
    vecadd = before["vecadd"]
    assert ([(p["file"], p["status"]) for p in vecadd["patches"]]
            == list(zip(names, ["upstream", "forwarded", "not-needed"], strict=True)))
    assert vecadd["patches"][0]["evidence"]["commit"] == landed
    assert vecadd["patches"][1]["evidence"]["url"] == "https://example.invalid/stable-abi/vecadd/pull/2"
    assert vecadd["base"]["behind"] == 2 and vecadd["migrated_upstream"] == "in progress"
    scalekit = before["scalekit"]
    assert scalekit["base"]["on"] == "fork" and scalekit["base"]["own_commits"] == 2
    assert [p["status"] for p in scalekit["patches"]] == ["local", "local", "not-needed"]

    manifest = (root / "deps.toml").read_text()
    old = re.search(r'\[deps\.vecadd\]\n(?:.*\n)*?commit = "([0-9a-f]{40})"', manifest).group(1)  # type: ignore[union-attr]
    code, report = rebase_json(ws, "vecadd")
    assert code == 0, report
    assert report["new_base"] == heads["vecadd"] and report["applied"] == names[1:]
    assert [(d["file"], d["how"], d["commit"]) for d in report["dropped"]] == [(names[0], "patch-id", landed)]
    assert (root / "deps.toml").read_text() == manifest.replace(old, heads["vecadd"])
    assert (root / "patches" / "vecadd" / "series").read_text().splitlines()[-2:] == names[1:]
    after = json.loads(ws.assemble("patches", "vecadd", "--format", "json").stdout)["deps"][0]
    assert after["base"]["behind"] == 0 and [p["status"] for p in after["patches"]] == ["forwarded", "not-needed"]


def test_fork_pinned_dependency_moves_onto_upstream(git_workspace: GitWorkspace) -> None:
    """A series on a fork's commit: rebasing onto upstream replays the fork's own commit too;
    it becomes a patch of the series and the pin moves to upstream (source goes)."""
    ws = git_workspace
    fork_repo = Repo(ws.root / "remotes" / "kern-fork")
    fork_repo.git("pull", "-q", str(ws.upstream.path), "main")
    fork_tip = fork_repo.commit("Fork: add a benchmark script\n\nForwarded: no\n", {"bench.py": "print('fast')\n"})
    text = ws.manifest.read_text().replace(ws.base, fork_tip)
    ws.manifest.write_text(text.replace('commit = "', 'source = "https://git.invalid/kern-fork"\ncommit = "', 1))
    unchanged = ws.assemble("rebase", "kern", "--json")
    # upstream has not moved
    assert unchanged.returncode == 0 and json.loads(unchanged.stdout)["status"] == "up-to-date"
    tip = ws.upstream.commit("Upstream: docs", {"docs/usage.md": "updated\n"})
    code, report = rebase_json(ws, "kern")
    assert code == 0, report
    assert report["applied"][0] == fork_tip[:12] and report["manifest"] == {"commit": tip, "source": None}
    series = (ws.patches / "series").read_text().splitlines()[1:]
    assert series[0] == "0003-Fork-add-a-benchmark-script.patch" and series[1:] == [p.name for p in patch_files(ws)[:2]]
    assert "\nsource =" not in ws.manifest.read_text() and f'commit = "{tip}"' in ws.manifest.read_text()
    assert "bench.py" in git(ws.fork, "ls-files")


def test_the_text_report_at_60_columns_says_each_thing_once_and_keeps_its_indentation(
        git_workspace: GitWorkspace) -> None:
    """#30's rebase report: ``--onto SHA`` printed ``rebased X X``; wrapped lines fell back to
    column 0; "0 dropped" was printed right under a dropped patch."""
    ws = git_workspace
    first, _ = patch_files(ws)
    land_verbatim(ws, first)
    tip = ws.upstream.head()
    result = run_assemble("-C", str(ws.root), "rebase", "kern", "--onto", tip,
                          env={"ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "60"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert (lines[0].startswith(f"kern: rebased {tip[:12]} (base")
            and tip[:12] not in lines[0][len("kern: rebased ") + 12:])
    assert all(len(line) <= 60 for line in lines), result.stdout
    dropped = next(i for i, line in enumerate(lines) if "dropped as upstream" in line)
    assert lines[dropped + 1].startswith("    ") and first.name in result.stdout  # the continuation stays in its item
    assert not any(" 0 " in line for line in lines if "range-diff" in line), result.stdout
