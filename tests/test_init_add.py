"""`assemble init` and `assemble add` (issue 22, item 23): deps.toml written with tomlkit
(comments kept), every value checked by the manifest's rules, the whole manifest validated,
optionally checked out; nothing invalid is ever left written."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import GitWorkspace, run_assemble


def test_init_then_add_then_checkout(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    ws = tmp_path / "new"
    ws.mkdir()
    created = run_assemble("init", "--json", cwd=ws)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["bundle"] == {"name": "new", "version": "0.1.0"}
    assert "# distribution name of the merged wheel" in (ws / "deps.toml").read_text()
    again = run_assemble("init", cwd=ws)
    assert again.returncode == 2 and "exists already" in again.stderr

    upstream = str(git_workspace.upstream.path)
    env = {"ASSEMBLE_CACHE": str(git_workspace.cache)}
    added = run_assemble("add", "kern", upstream, "--commit", git_workspace.base, "--checkout", "--json", cwd=ws,
                         env=env)
    assert added.returncode == 0, added.stderr
    document = json.loads(added.stdout)
    assert (document["checkout"]["head"] == git_workspace.base
            and (ws / "forks" / "kern" / "csrc" / "kern.cpp").is_file())
    text = (ws / "deps.toml").read_text()
    assert "# distribution name of the merged wheel" in text  # comments kept
    assert f'[deps.kern]\nupstream = "{upstream}"\ncommit = "{git_workspace.base}"\ntrack = "main"\n' in text
    listed = json.loads(run_assemble("deps", "--json", cwd=ws, env=env).stdout)["deps"]
    assert [(d["name"], d["checkout"]) for d in listed] == [("kern", "ready")]

    twice = run_assemble("add", "kern", upstream, "--commit", git_workspace.base, cwd=ws)
    assert twice.returncode == 2 and "already there" in twice.stderr
    assert (ws / "deps.toml").read_text() == text


def test_add_refuses_bad_values_before_writing(git_workspace: GitWorkspace) -> None:
    before = git_workspace.manifest.read_bytes()
    for words, message in ((("Bad", "https://git.invalid/x", "--commit", "a" * 40), "not a valid dependency name"),
                           (("x", "ext::sh -c touch%20/tmp/pwned", "--commit", "a" * 40), "not a repository URL"),
                           (("x", "https://git.invalid/x", "--commit", "main"), "not a full commit SHA"),
                           (("x", "https://git.invalid/x", "--commit", "a" * 40, "--track", "a..b"),
                            "not a branch name")):
        result = git_workspace.assemble("add", *words)
        assert result.returncode == 2 and message in result.stderr, (words, result.stderr)
    assert git_workspace.manifest.read_bytes() == before
