"""Issue 11: a kernel-fork maintainer's week on realistic histories. Same SHAs in every
workspace for any subject; honest evidence (a patch skipped by hand is not "upstream"; the
fetch time is assemble's own; a mirror path typo is a configuration error); --abort leaves no
git leftovers; range-diff, --drop/--skip and --undo."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import KERNEL_V1, GitWorkspace
from tests.gitrepo import Repo, git
from tests.rebase_scenarios import patch_files, snapshot

SUBJECTS = [
    "[FIX] Fix kernel launch bounds\n\nForwarded: no\nSigned-off-by: Dev <dev@fork.invalid>\n",
    "[Bugfix][Kernel] Füge Ünicode-Prüfung hinzu\n\nForwarded: no\n",
    "Make the launcher honour a very long subject line that goes far beyond seventy-eight columns of width\n\n"
    "Forwarded: no\nBug: https://git.invalid/kern/issues/3\n",
    "[ROCm] keep CRLF files intact\n\nForwarded: no\n",
]


def _fork_with_own_commits(ws: GitWorkspace) -> tuple[Repo, list[str]]:
    fork = Repo(ws.root / "remotes" / "kern-fork")
    fork.git("pull", "-q", str(ws.upstream.path), "main")
    shas = [fork.commit(SUBJECTS[0], {"csrc/launch.cu": "dim3 block(128);\n"}),
            fork.commit(SUBJECTS[1], {"csrc/check.cpp": "// prüfen\n"}),
            fork.commit(SUBJECTS[2], {"csrc/launch.cu": "dim3 block(256);\n"}),
            fork.commit(SUBJECTS[3], {"scripts/run.bat": "@echo off\r\nrun.exe\r\n"})]
    return fork, shas


def _series_shas(fork: Path, base: str) -> list[str]:
    return git(fork, "rev-list", "--reverse", f"{base}..HEAD").split()


def test_fresh_checkout_has_the_shas_of_the_workspace_that_rebased(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    """A fork's own commits with bracketed, non-ASCII, long and trailer-carrying subjects and
    a CRLF file become patches in a rebase; a fresh checkout elsewhere gives the same SHAs
    (git am used to strip "[FIX]" and the CRs)."""
    ws = git_workspace
    _, own = _fork_with_own_commits(ws)
    text = ws.manifest.read_text().replace(ws.base, own[-1])
    ws.manifest.write_text(text.replace('commit = "', 'source = "https://git.invalid/kern-fork"\ncommit = "', 1))
    tip = ws.upstream.commit("Upstream: docs", {"docs/usage.md": "updated\n"})
    result = ws.assemble("rebase", "kern", "--json")
    assert result.returncode == 0, result.stderr
    rebased = _series_shas(ws.fork, tip)
    assert len(rebased) == 6
    subjects = git(ws.fork, "log", "--format=%s", f"{tip}..HEAD").splitlines()
    assert "[FIX] Fix kernel launch bounds" in subjects and "[Bugfix][Kernel] Füge Ünicode-Prüfung hinzu" in subjects
    exported = "".join(p.read_text(encoding="utf-8") for p in patch_files(ws))
    assert "Subject: [PATCH] [FIX] Fix kernel launch bounds" in exported

    other = GitWorkspace(tmp_path / "other", ws.upstream, tip, ws.cache)
    shutil.copytree(ws.root, other.root, ignore=shutil.ignore_patterns("forks", ".assemble"))
    assert other.assemble("checkout").returncode == 0
    assert _series_shas(other.fork, tip) == rebased
    assert (other.fork / "scripts" / "run.bat").read_bytes() == b"@echo off\r\nrun.exe\r\n"
    # and an export of the fresh checkout changes no patch file
    exported_again = other.assemble("export", "kern", "--json")
    assert (exported_again.returncode == 0
            and json.loads(exported_again.stdout)["deps"][0]["written"] == []), exported_again.stdout


def _rewrite_upstream(ws: GitWorkspace) -> str:
    ws.upstream.commit("Docs", {"docs/more.md": "more\n"})
    rewritten = KERNEL_V1.replace("const at::Tensor& x", "const at::Tensor& input").replace("x + 1", "input.add(1)")
    return ws.upstream.commit("Rename the argument", {"csrc/kern.cpp": rewritten})


def test_a_patch_skipped_by_hand_is_not_called_upstream(git_workspace: GitWorkspace) -> None:
    """`git rebase --skip` at a conflict, then `assemble rebase --continue`: the skipped patch
    is "dropped by you" once confirmed with --drop, never "dropped as upstream"."""
    ws = git_workspace
    _rewrite_upstream(ws)
    first, second = patch_files(ws)
    assert ws.assemble("rebase", "kern").returncode == 5
    git(ws.fork, "-c", "core.editor=true", "rebase", "--skip", check=False)
    while (ws.fork / ".git" / "rebase-merge").exists():  # the next patch may conflict too: skip it as well
        git(ws.fork, "-c", "core.editor=true", "rebase", "--skip", check=False)
    result = ws.assemble("rebase", "--continue", "kern")
    assert result.returncode == 5, result.stdout + result.stderr
    said = " ".join(result.stderr.split())
    assert f"{first.name}" in said and "skipped by hand" in said and f"--drop {first.name}" in said
    assert first.exists(), "nothing is removed before the user confirms"
    confirm = [arg for name in (first, second) if name.name in said for arg in ("--drop", name.name)]
    done = ws.assemble("rebase", "kern", *confirm, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {d["file"]: d["how"] for d in report["dropped"]}[first.name] == "dropped-by-you"
    assert all(d["how"] != "applies-empty" for d in report["dropped"])
    assert not first.exists()
    text = ws.assemble("rebase", "kern", "--undo").stdout
    assert "undid the rebase" in text and first.exists()


def test_drop_at_a_conflict_goes_on_and_undo_restores_byte_for_byte(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    before = snapshot(ws)
    _rewrite_upstream(ws)
    first, second = patch_files(ws)
    stopped = ws.assemble("rebase", "kern")
    assert stopped.returncode == 5
    assert "checkout --conflict=zdiff3 csrc/kern.cpp" in stopped.stdout and "--conflict=zdiff3" in stopped.stderr
    result = ws.assemble("rebase", "kern", "--skip", first.name)
    while result.returncode == 5 and "conflicts with" in result.stderr:  # the next patch built on it
        result = ws.assemble("rebase", "kern", "--drop", second.name)
    assert result.returncode == 0, result.stderr
    assert f"dropped by you: {first.name}" in result.stdout and "dropped as upstream" not in result.stdout
    assert "range-diff of the series" in result.stdout and f"< {first.name}" in result.stdout
    kept = ws.root / ".assemble" / "rebase" / ".undo" / "kern" / "journal.json"
    journal = json.loads(kept.read_text())
    assert "Use stable tensor type" in journal["range_diff"] and first.name in journal["confirmed"]
    undone = ws.assemble("rebase", "kern", "--undo")
    assert undone.returncode == 0, undone.stderr
    assert snapshot(ws) == before
    again = ws.assemble("rebase", "kern", "--undo")
    assert again.returncode == 2 and "no finished rebase of kern to undo" in again.stderr


def test_undo_refuses_when_the_result_was_edited(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    ws.upstream.commit("Docs", {"docs/more.md": "more\n"})
    assert ws.assemble("rebase", "kern").returncode == 0
    ws.manifest.write_text(ws.manifest.read_text() + "# edited after the rebase\n")
    refused = ws.assemble("rebase", "kern", "--undo")
    assert refused.returncode == 4 and "deps.toml changed since the rebase" in refused.stderr


def test_range_diff_counts_changed_hunks(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    _rewrite_upstream(ws)
    assert ws.assemble("rebase", "kern").returncode == 5
    (ws.fork / "csrc" / "kern.cpp").write_text(
        KERNEL_V1.replace("at::Tensor", "torch::stable::Tensor").replace("Tensor& x", "Tensor& input").replace(
            "x + 1", "input.add(1)"))
    git(ws.fork, "add", "csrc/kern.cpp")
    result = ws.assemble("rebase", "--continue", "kern", "--json")
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)["range_diff"]
    assert [e["mark"] for e in entries] == ["!", "!"] and all(e["hunks"] >= 1 for e in entries)


def test_abort_leaves_no_git_or_lock_leftovers(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    orig = ws.fork / ".git" / "ORIG_HEAD"
    orig.write_text("0" * 40 + "\n")  # whatever the user's last reset left
    orig_before = orig.read_bytes()
    _rewrite_upstream(ws)
    assert ws.assemble("rebase", "kern").returncode == 5
    assert ws.assemble("rebase", "--abort", "kern").returncode == 0
    assert not (ws.fork / ".git" / "REBASE_HEAD").exists()
    assert orig.read_bytes() == orig_before
    rebase_dir = ws.root / ".assemble" / "rebase"
    assert list(rebase_dir.glob("*.running")) == []
    ws.upstream.git("reset", "-q", "--hard", "HEAD~1")
    assert ws.assemble("rebase", "kern").returncode == 0
    assert list(rebase_dir.glob("*.running")) == []


def test_offline_says_when_the_last_successful_fetch_was(git_workspace: GitWorkspace) -> None:
    """git truncates FETCH_HEAD even when a fetch fails: the age shown offline is the last
    fetch that worked."""
    ws = git_workspace
    assert ws.assemble("patches").returncode == 0
    mirror = next((ws.cache / "git").glob("*kern-*.git"))
    two_days_ago = time.time() - 2 * 86400
    for path in mirror.iterdir():
        os.utime(path, (two_days_ago, two_days_ago))
    moved = ws.upstream.path.with_name("kern-moved")
    ws.upstream.path.rename(moved)
    try:
        failed = ws.assemble("patches")
        assert failed.returncode == 2, failed.stderr  # [mirrors] points at a path that is gone
    finally:
        moved.rename(ws.upstream.path)
    (mirror / "FETCH_HEAD").touch()  # as git does when a fetch fails after it opened the file
    offline = ws.assemble("patches", "--offline")
    assert offline.returncode == 0, offline.stderr
    assert "fetched 2 d ago" in offline.stdout, offline.stdout


def test_a_mirror_path_typo_is_a_configuration_error(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    ws.manifest.write_text(ws.manifest.read_text().replace('= "remotes/"', '= "remotse/"'))
    result = ws.assemble("patches")
    assert result.returncode == 2, result.stderr
    said = " ".join(result.stderr.split())
    assert ("no such repository on this machine" in said and "remotse/kern" in said
            and "and the repository exists" not in said)
    (ws.root / "remotse" / "kern").mkdir(parents=True)  # there, but not a repository: git's own first line
    result = ws.assemble("patches")
    said = " ".join(result.stderr.split())
    assert (result.returncode == 3 and "does not appear to be a git repository" in said
            and "and the repository exists" not in said)


def test_kill_points_in_drop_and_undo(git_workspace: GitWorkspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash right after --drop saved its plan (the replay never ran) is finished by
    --continue; a crash half-way through --undo (checkout and patches put back, deps.toml
    not yet) is finished by running --undo again, byte for byte."""
    from assembler.upstreaming import journal, rebase
    from assembler.workspace import open_workspace

    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    before = snapshot(ws)
    _rewrite_upstream(ws)
    first, second = patch_files(ws)
    assert ws.assemble("rebase", "kern").returncode == 5
    monkeypatch.setenv("ASSEMBLE_CACHE", str(ws.cache))

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(rebase, "_drive", crash)
    workspace = open_workspace(ws.root)
    with pytest.raises(KeyboardInterrupt):
        rebase.drop(workspace, "kern", [first.name])
    monkeypatch.undo()
    saved = json.loads((ws.root / ".assemble" / "rebase" / "kern" / "journal.json").read_text())
    assert saved["phase"] == "replaying" and [d["name"] for d in saved["dropped"]] == [first.name]
    result = ws.assemble("rebase", "--continue", "kern")
    while result.returncode == 5 and "conflicts with" in result.stderr:
        result = ws.assemble("rebase", "kern", "--drop", second.name)
    assert result.returncode == 0, result.stderr
    assert f"dropped by you: {first.name}" in result.stdout

    restore_file = journal.Backup.restore_file

    def crash_on_manifest(self: journal.Backup, name: str, path: Path) -> None:
        if name == "deps.toml":
            raise KeyboardInterrupt
        restore_file(self, name, path)

    monkeypatch.setattr(journal.Backup, "restore_file", crash_on_manifest)
    workspace = open_workspace(ws.root)
    with pytest.raises(KeyboardInterrupt):
        rebase.undo(workspace, workspace.manifest.deps["kern"])
    monkeypatch.undo()
    assert snapshot(ws) != before
    undone = ws.assemble("rebase", "kern", "--undo")
    assert undone.returncode == 0, undone.stderr
    assert snapshot(ws) == before


def _as_github(ws: GitWorkspace) -> None:
    text = ws.manifest.read_text().replace('"https://git.invalid/" = "remotes/"',
                                           '"https://git.invalid/" = "remotes/"\n'
                                           '"https://github.com/acme/" = "remotes/"')
    ws.manifest.write_text(text.replace('upstream = "https://git.invalid/kern"',
                                        'upstream = "https://github.com/acme/kern"'))


def _open_pull_request(ws: GitWorkspace, number: int = 151) -> tuple[Path, Path]:
    """Upstream gets the fork's two patches (returned) as the commits of refs/pull/NUMBER/head, not on main."""
    first, second = patch_files(ws)
    ws.upstream.git("checkout", "-q", "-b", "pr", ws.base)
    ws.upstream.git("am", "-q", str(first), str(second))
    ws.upstream.git("update-ref", f"refs/pull/{number}/head", "HEAD")
    ws.upstream.git("checkout", "-q", "main")
    return first, second


def test_patches_sent_as_a_pull_request_are_forwarded(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    """FlashMLA's case: the fork's patches are the commits of upstream's refs/pull/151/head:
    forwarded, with evidence pull/151 and a link on a known forge; ASSEMBLE_PULL_REQUESTS=0
    turns the pull-request refs off."""
    ws = git_workspace
    _as_github(ws)
    _, second = _open_pull_request(ws)
    ws.upstream.git("branch", "-q", "-D", "pr")
    result = ws.assemble("patches", "--format", "json")
    assert result.returncode == 0, result.stderr
    patches = json.loads(result.stdout)["deps"][0]["patches"]
    assert [(p["status"], p["evidence"]["how"], p["evidence"].get("note")) for p in patches] == [
        ("forwarded", "pull-request", "pull/151"), ("forwarded", "pull-request", "pull/151")]
    assert patches[1]["evidence"]["url"] == "https://github.com/acme/kern/pull/151"
    markdown = ws.assemble("patches", "--format", "markdown").stdout
    assert "[pull/151](https://github.com/acme/kern/pull/151)" in markdown and f"`{second.name}`" in markdown
    assert "pull/151 (same patch-id)" in ws.assemble("patches").stdout
    off = GitWorkspace(ws.root, ws.upstream, ws.base, tmp_path / "cache-off")
    from tests.conftest import run_assemble
    plain = run_assemble("-C", str(ws.root), "patches", "--format", "json",
                         env={"ASSEMBLE_CACHE": str(off.cache), "ASSEMBLE_PULL_REQUESTS": "0"})
    assert [p["status"] for p in json.loads(plain.stdout)["deps"][0]["patches"]] == ["forwarded", "local"]


def test_markdown_tables_pin_fork_point_and_plurals(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    first, second = patch_files(ws)
    (ws.patches / "series").write_text(first.name + "\n")
    second.unlink()
    ws.upstream.commit("Docs", {"docs/more.md": "more\n"})
    markdown = ws.assemble("patches", "--format", "markdown").stdout
    assert "(1 patch on " in markdown and "1 patches" not in markdown
    assert "### kern" in markdown and "| patch | subject | status | evidence | link |" in markdown
    assert (f"| `{first.name}` | Use stable tensor type | forwarded | header | "
            "[pull/7](https://git.invalid/kern/pull/7) |" in markdown)
    assert f"pin {ws.base[:12]} (" in markdown and "on upstream), 1 commit behind main" in markdown
    dry = ws.assemble("rebase", "kern", "--dry-run")
    assert dry.returncode == 0 and "would rebase" in dry.stdout
    assert ws.assemble("rebase", "kern").returncode == 0
    again = ws.assemble("rebase", "kern", "--dry-run")
    assert again.returncode == 0 and "up to date with main" in again.stdout, again.stdout
    assert "up to date with main" in ws.assemble("patches").stdout


def test_a_raised_torch_or_cuda_floor_is_a_warning(git_workspace: GitWorkspace) -> None:
    """QuTLASS's case: setup.py moves to torch 2.11 while deps.toml says 2.10."""
    ws = git_workspace
    setup = 'from setuptools import setup\n\nsetup(name="kern", install_requires=["torch>={torch}"])\n'
    cmake = "cmake_minimum_required(VERSION 3.26)\nfind_package(CUDAToolkit {cuda} REQUIRED)\n"
    ws.upstream.commit("Build files",
                       {"setup.py": setup.format(torch="2.10"), "CMakeLists.txt": cmake.format(cuda="12.4")})
    assert ws.assemble("rebase", "kern").returncode == 0
    ws.upstream.commit("Require torch 2.11 and CUDA 12.8",
                       {"setup.py": setup.format(torch="2.11"), "CMakeLists.txt": cmake.format(cuda="12.8")})
    result = ws.assemble("rebase", "kern")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert "upstream's torch floor is now 2.11 (setup.py:3:" in said and "was 2.10 in setup.py:3" in said
    assert "deps.toml's torch-target is 2.10" in said
    assert "upstream's CUDA floor is now 12.8 (CMakeLists.txt:2:" in said
    ws.upstream.commit("Docs", {"docs/more.md": "more\n"})
    quiet = ws.assemble("rebase", "kern")
    assert quiet.returncode == 0 and "floor" not in quiet.stderr


def test_moving_off_a_fork_keeps_its_provenance(git_workspace: GitWorkspace) -> None:
    """The fork's own commits carry `Origin: <fork URL> commit <sha>` into the series,
    deps.toml says where the dependency came from, and forks/kern has `upstream` and `fork`
    remotes, both fetched."""
    ws = git_workspace
    fork = Repo(ws.root / "remotes" / "kern-fork")
    fork.git("pull", "-q", str(ws.upstream.path), "main")
    fork_tip = fork.commit("[Kernel] Faster launch\n\nForwarded: no\n", {"csrc/fast.cpp": "// fast\n"})
    url = "https://git.invalid/kern-fork"
    text = ws.manifest.read_text().replace(ws.base, fork_tip)
    ws.manifest.write_text(text.replace('commit = "', f'source = "{url}"\ncommit = "', 1))
    tip = ws.upstream.commit("Upstream: docs", {"docs/usage.md": "updated\n"})
    result = ws.assemble("rebase", "kern", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["applied"][0] == fork_tip[:12]
    own = ws.patches / "0003-Kernel-Faster-launch.patch"
    assert (f"Origin: {url} commit {fork_tip}" in own.read_text()
            and "Subject: [PATCH] [Kernel] Faster launch" in own.read_text())
    manifest = ws.manifest.read_text()
    assert "\nsource =" not in manifest and f'# formerly source = "{url}" (commit {fork_tip})' in manifest
    assert git(ws.fork, "rev-parse", "upstream/main") == tip and git(ws.fork, "rev-parse", "fork/main") == fork_tip
    assert ws.assemble("deps").returncode == 0
    before = [git(ws.fork, "rev-parse", "HEAD")]
    shutil.rmtree(ws.fork)
    assert ws.assemble("checkout").returncode == 0
    assert [git(ws.fork, "rev-parse", "HEAD")] == before


def test_rebase_writes_forwarded_for_a_patch_found_in_a_pull_request(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    _as_github(ws)
    first, second = _open_pull_request(ws)
    ws.upstream.commit("Docs", {"docs/more.md": "more\n"})
    result = ws.assemble("rebase", "kern")
    assert result.returncode == 0, result.stderr
    link = "https://github.com/acme/kern/pull/151"
    assert (f"Forwarded: trailer written to {second.name}: it is in upstream's pull/151 ({link})"
            in " ".join(result.stdout.split()))
    text = second.read_text()
    assert f"Forwarded: {link}" in text and "Forwarded: no" not in text
    assert "Forwarded: https://git.invalid/kern/pull/7" in first.read_text()  # a header that says forwarded is kept
