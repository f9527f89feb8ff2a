"""Fork checkouts on real git repositories: apply, export round trip, idempotency, refusal
to lose work, conflicts, mirrors and the offline error."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import GitWorkspace
from tests.gitrepo import git


def log(path: Path, fmt: str = "%s") -> list[str]:
    return git(path, "log", f"--format={fmt}").splitlines()


def test_checkout_applies_series_with_authorship(git_workspace: GitWorkspace) -> None:
    result = git_workspace.assemble("checkout", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["deps"][0]
    assert report["action"] == "created" and report["patches"] == 2 and report["fetched"]
    fork = git_workspace.fork
    assert git(fork, "rev-parse", "--abbrev-ref", "HEAD") == "assemble/kern"
    assert log(fork)[:2] == ["Register with STABLE_TORCH_LIBRARY", "Use stable tensor type"]
    assert log(fork, "%an <%ae>")[:2] == ["Upstream Dev <dev@upstream.invalid>"] * 2
    assert log(fork, "%cn")[:2] == ["assemble"] * 2
    author_dates = log(fork, "%at %ct")[:2]
    assert all(a == c for a, c in (line.split() for line in author_dates)), "committer date must equal author date"
    assert "STABLE_TORCH_LIBRARY(kern" in (fork / "csrc" / "kern.cpp").read_text()
    assert git(fork, "rev-parse", "HEAD~2") == git_workspace.base


def test_checkout_is_reproducible_across_workspaces(tmp_path: Path) -> None:
    from tests.conftest import make_git_workspace

    heads = []
    for name in ("one", "two"):
        ws = make_git_workspace(tmp_path / name)
        assert ws.assemble("checkout").returncode == 0
        heads.append(git(ws.fork, "rev-parse", "HEAD"))
    assert heads[0] == heads[1]


def test_second_checkout_is_a_no_op_without_fetch(git_workspace: GitWorkspace) -> None:
    assert git_workspace.assemble("checkout").returncode == 0
    mirror_fetch_heads = list(git_workspace.cache.glob("git/*.git/FETCH_HEAD"))
    stamps = [p.stat().st_mtime_ns for p in mirror_fetch_heads]
    result = git_workspace.assemble("checkout", "--json")
    report = json.loads(result.stdout)["deps"][0]
    assert report["action"] == "up-to-date" and not report["fetched"]
    assert [p.stat().st_mtime_ns for p in mirror_fetch_heads] == stamps


def test_export_round_trip_is_byte_stable(git_workspace: GitWorkspace) -> None:
    originals = {p.name: p.read_bytes() for p in git_workspace.patches.iterdir()}
    assert git_workspace.assemble("checkout").returncode == 0
    result = git_workspace.assemble("export", "kern")
    assert result.returncode == 0, result.stderr
    assert "0 written, 2 unchanged, 0 removed" in result.stdout
    assert {p.name: p.read_bytes() for p in git_workspace.patches.iterdir()} == originals


def test_export_low_churn_after_editing_the_branch(git_workspace: GitWorkspace) -> None:
    assert git_workspace.assemble("checkout").returncode == 0
    fork = git_workspace.fork
    first, second = sorted(p.name for p in git_workspace.patches.glob("*.patch"))
    before = {name: (git_workspace.patches / name).read_bytes() for name in (first, second)}
    # amend the last commit (keeps its subject) and add a new one
    (fork / "csrc" / "kern.cpp").write_text((fork / "csrc" / "kern.cpp").read_text() + "// amended\n")
    git(fork, "commit", "-q", "-a", "--amend", "--no-edit")
    (fork / "csrc" / "meta.py").write_text("# meta functions move to Python\n")
    git(fork, "add", "csrc/meta.py")
    git(fork, "commit", "-q", "-m",
        "Move meta function to Python\n\nForwarded: not-needed\nBug: https://git.invalid/kern/issues/3")
    result = git_workspace.assemble("export", "kern", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["deps"][0]
    assert report["unchanged"] == [first]
    assert report["written"] == [second, "0003-Move-meta-function-to-Python.patch"]
    assert (git_workspace.patches / first).read_bytes() == before[first]
    assert b"// amended" in (git_workspace.patches / second).read_bytes()
    third = (git_workspace.patches / "0003-Move-meta-function-to-Python.patch").read_text()
    assert "Forwarded: not-needed" in third and "Bug: https://git.invalid/kern/issues/3" in third
    series = (git_workspace.patches / "series").read_text()
    assert series.startswith("# migration to the Stable ABI\n")
    assert series.splitlines()[1:] == [first, second, "0003-Move-meta-function-to-Python.patch"]
    # the exported series checks out to the same tree, and a re-run is a no-op
    assert git_workspace.assemble("checkout", "--json").returncode == 0
    again = json.loads(git_workspace.assemble("export", "kern", "--json").stdout)["deps"][0]
    assert again["written"] == [] and again["removed"] == []


def test_dirty_checkout_is_never_overwritten(git_workspace: GitWorkspace) -> None:
    assert git_workspace.assemble("checkout").returncode == 0
    kern = git_workspace.fork / "csrc" / "kern.cpp"
    kern.write_text(kern.read_text() + "// my uncommitted work\n")
    series = git_workspace.patches / "series"
    series.write_text(series.read_text().splitlines()[0] + "\n" + series.read_text().splitlines()[1] + "\n")
    (git_workspace.patches / sorted(p.name for p in git_workspace.patches.glob("*.patch"))[1]).unlink()
    result = git_workspace.assemble("checkout")
    assert result.returncode == 4
    assert "uncommitted changes (csrc/kern.cpp)" in result.stderr
    assert "// my uncommitted work" in kern.read_text()


def test_unexported_commits_are_never_overwritten(git_workspace: GitWorkspace) -> None:
    assert git_workspace.assemble("checkout").returncode == 0
    fork = git_workspace.fork
    (fork / "NOTES.md").write_text("work in progress\n")
    git(fork, "add", "NOTES.md")
    git(fork, "commit", "-q", "-m", "My work")
    head = git(fork, "rev-parse", "HEAD")
    # an up-to-date manifest leaves the work alone; a changed one must refuse to reset it
    assert git_workspace.assemble("checkout").returncode == 0
    assert git(fork, "rev-parse", "HEAD") == head
    assert "unexported" in git_workspace.assemble("deps").stdout
    manifest = git_workspace.manifest
    manifest.write_text(manifest.read_text().replace(git_workspace.base, git(fork, "rev-parse", "HEAD~4")))
    result = git_workspace.assemble("checkout")
    assert result.returncode == 4
    assert "assemble export kern" in result.stderr
    assert git(fork, "rev-parse", "HEAD") == head


def test_conflicting_patch_names_patch_and_files(git_workspace: GitWorkspace) -> None:
    upstream = git_workspace.upstream
    new_base = upstream.commit("Rewrite kernel", {"csrc/kern.cpp": "// rewritten upstream\nint unrelated;\n"})
    manifest = git_workspace.manifest
    manifest.write_text(manifest.read_text().replace(git_workspace.base, new_base))
    result = git_workspace.assemble("checkout")
    assert result.returncode == 5, result.stderr
    assert "patch 0001-Use-stable-tensor-type.patch does not apply" in result.stderr
    assert "csrc/kern.cpp" in result.stderr
    assert "git am --continue" in result.stderr
    # the checkout is left resolvable, and re-running explains instead of clobbering
    assert (git_workspace.fork / ".git" / "rebase-apply").exists()
    again = git_workspace.assemble("checkout")
    assert again.returncode == 5 and "stopped in the middle of a git am" in again.stderr


def test_mirror_rewrite_is_used_for_fetch(git_workspace: GitWorkspace) -> None:
    assert git_workspace.assemble("checkout").returncode == 0
    mirror = next(git_workspace.cache.glob("git/*.git"))
    url = git(mirror, "config", "remote.origin.url")
    assert url == str(git_workspace.upstream.path)


def test_offline_error_names_url_and_mirrors(git_workspace: GitWorkspace) -> None:
    manifest = git_workspace.manifest
    manifest.write_text(manifest.read_text().replace('"https://git.invalid/" = "remotes/"   # relative to this file\n',
                                                     ""))
    result = git_workspace.assemble("checkout")
    assert result.returncode == 3, result.stderr
    assert "cannot fetch https://git.invalid/kern" in result.stderr
    assert "[mirrors]" in result.stderr
    assert not git_workspace.fork.exists()


def test_interrupted_checkout_is_safe_to_rerun(git_workspace: GitWorkspace) -> None:
    """A checkout killed mid-series (state still 'applying') is redone from scratch."""
    assert git_workspace.assemble("checkout").returncode == 0
    state_file = git_workspace.fork / ".git" / "assemble-state.json"
    state = json.loads(state_file.read_text())
    state["status"] = "applying"
    state_file.write_text(json.dumps(state))
    git(git_workspace.fork, "reset", "-q", "--hard", "HEAD~1")
    result = git_workspace.assemble("checkout", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["deps"][0]["action"] == "updated"
    assert json.loads(state_file.read_text())["status"] == "ready"
    assert subprocess.run(["git", "status", "--porcelain"], cwd=git_workspace.fork, capture_output=True,
                          text=True).stdout == ""


def test_submodules_come_from_their_own_mirror(git_workspace: GitWorkspace) -> None:
    """The listed submodule is fetched through [mirrors] into its own cached mirror."""
    from tests.gitrepo import Repo

    sub = Repo(git_workspace.root / "remotes" / "cutlass")
    sub_head = sub.commit("cutlass headers", {"include/cute.h": "// cute\n"})
    upstream = git_workspace.upstream
    upstream.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub.path), "third-party/cutlass")
    upstream.git("config", "-f", ".gitmodules", "submodule.third-party/cutlass.url", "https://git.invalid/cutlass")
    upstream.git("add", ".gitmodules")
    new_base = upstream.commit("Add cutlass submodule", {})
    manifest = git_workspace.manifest
    manifest.write_text(
        manifest.read_text().replace(git_workspace.base, new_base).replace('track = "main"\n',
                                                                           'track = "main"\nsubmodules = '
                                                                           '["third-party/cutlass"]\n')
    )
    result = git_workspace.assemble("checkout")
    assert result.returncode == 0, result.stderr
    assert (git_workspace.fork / "third-party" / "cutlass" / "include" / "cute.h").read_text() == "// cute\n"
    assert git(git_workspace.fork / "third-party" / "cutlass", "rev-parse", "HEAD") == sub_head
    assert len(list(git_workspace.cache.glob("git/*.git"))) == 2


def _break_first_patch(git_workspace: GitWorkspace) -> str:
    """Move the pin to an upstream commit that rewrites the line patch 0001 changes."""
    kernel = (git_workspace.upstream.path / "csrc" / "kern.cpp").read_text()
    renamed = kernel.replace("const at::Tensor& x", "const at::Tensor& input").replace("x + 1", "input + 1")
    new_base = git_workspace.upstream.commit("Rename argument", {"csrc/kern.cpp": renamed})
    manifest = git_workspace.manifest
    manifest.write_text(manifest.read_text().replace(git_workspace.base, new_base))
    return new_base


def test_resolved_conflict_continues_the_series_and_exports(git_workspace: GitWorkspace) -> None:
    """`git am --continue` after a conflict applies the rest of the series; export keeps every
    patch under its file name, and checkout refuses to reset the unexported resolution."""
    _break_first_patch(git_workspace)
    names = sorted(p.name for p in git_workspace.patches.glob("*.patch"))
    result = git_workspace.assemble("checkout")
    assert result.returncode == 5 and names[0] in result.stderr
    fork = git_workspace.fork
    kern = fork / "csrc" / "kern.cpp"
    resolved = (git_workspace.upstream.path / "csrc" / "kern.cpp").read_text().replace("at::Tensor",
                                                                                       "torch::stable::Tensor")
    kern.write_text(resolved)
    git(fork, "add", "csrc/kern.cpp")
    git(fork, "-c", "core.editor=true", "am", "--continue")
    assert log(fork)[:2] == ["Register with STABLE_TORCH_LIBRARY", "Use stable tensor type"]
    refused = git_workspace.assemble("checkout")
    assert refused.returncode == 4 and "assemble export kern" in refused.stderr
    exported = json.loads(git_workspace.assemble("export", "kern", "--json").stdout)["deps"][0]
    assert sorted(exported["written"] + exported["unchanged"]) == names and exported["removed"] == []
    assert "input" in (git_workspace.patches / names[0]).read_text()
    again = git_workspace.assemble("checkout", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["deps"][0]["action"] == "up-to-date"


def test_aborted_series_is_not_exported_and_checkout_recovers(git_workspace: GitWorkspace) -> None:
    new_base = _break_first_patch(git_workspace)
    assert git_workspace.assemble("checkout").returncode == 5
    git(git_workspace.fork, "am", "--abort")
    before = {p.name: p.read_bytes() for p in git_workspace.patches.iterdir()}
    refused = git_workspace.assemble("export", "kern")
    assert refused.returncode == 2 and "would delete every patch" in refused.stderr
    assert {p.name: p.read_bytes() for p in git_workspace.patches.iterdir()} == before
    # drop the broken patch from the series, and checkout starts over cleanly
    first = sorted(before)[0]
    (git_workspace.patches / first).unlink()
    series = git_workspace.patches / "series"
    series.write_text(series.read_text().replace(f"{first}\n", ""))
    manifest = git_workspace.manifest
    assert new_base in manifest.read_text()
    result = git_workspace.assemble("checkout", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["deps"][0]
    assert report["action"] == "updated" and report["patches"] == 1
    assert "STABLE_TORCH_LIBRARY(kern" in (git_workspace.fork / "csrc" / "kern.cpp").read_text()


def test_user_git_configuration_does_not_change_commits_or_patches(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    """Global settings that alter commits and patch files (sign-off, subject prefix, message-id,
    hooks) are ignored: the fork's SHAs and the exported bytes stay the same."""
    clean = git_workspace.assemble("checkout")
    assert clean.returncode == 0
    head = git(git_workspace.fork, "rev-parse", "HEAD")
    originals = {p.name: p.read_bytes() for p in git_workspace.patches.iterdir()}
    subprocess.run(["rm", "-rf", str(git_workspace.fork)], check=True)
    home = tmp_path / "home"
    hooks = home / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "applypatch-msg").write_text("#!/bin/sh\necho 'Hooked: yes' >> \"$1\"\n")
    (hooks / "applypatch-msg").chmod(0o755)
    (home / ".gitconfig").write_text(
        "[format]\n\tsignOff = true\n\tsubjectPrefix = HOSTILE\n\tnumbered = true\n"
        f"[am]\n\tmessageid = true\n[core]\n\thooksPath = {hooks}\n[diff]\n\talgorithm = patience\n\tnoprefix = true\n"
    )
    env = {"HOME": str(home), "ASSEMBLE_CACHE": str(git_workspace.cache)}
    from tests.conftest import run_assemble

    assert run_assemble("-C", str(git_workspace.root), "checkout", env=env).returncode == 0
    assert git(git_workspace.fork, "rev-parse", "HEAD") == head
    assert run_assemble("-C", str(git_workspace.root), "export", "kern", env=env).returncode == 0
    # forget which commit came from which file: every patch is regenerated and compared
    state_file = git_workspace.fork / ".git" / "assemble-state.json"
    state = json.loads(state_file.read_text())
    state["applied"] = {}
    state_file.write_text(json.dumps(state))
    result = run_assemble("-C", str(git_workspace.root), "export", "kern", "--json", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["deps"][0]
    assert report["written"] == [] and len(report["unchanged"]) == 2
    assert {p.name: p.read_bytes() for p in git_workspace.patches.iterdir()} == originals


def test_a_pin_the_repository_does_not_have_is_bad_input_not_network(git_workspace: GitWorkspace) -> None:
    """The repository answered and has no such commit: the pin in deps.toml is wrong (exit 2,
    the commit and the fix), not the network (exit 3 said "check the network")."""
    ws = git_workspace
    missing = "0123456789abcdef0123456789abcdef01234567"
    ws.manifest.write_text(ws.manifest.read_text().replace(ws.base, missing))
    for words in (["checkout"], ["patches"]):
        result = ws.assemble(*words)
        assert result.returncode == 2, (words, result.stderr)
        assert f"has no commit {missing}" in result.stderr and "deps.toml" in result.stderr, result.stderr
    assert not ws.fork.exists()
