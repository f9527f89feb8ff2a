"""One failing dependency does not hide the others: checkout, patches and build --plan try
every dependency, report every failure and exit with the first failure's code; a submodule
whose mirror is missing is named with its dependency, path, URL and the [mirrors] fix."""

from __future__ import annotations

import json
import shutil

from tests.conftest import GitWorkspace
from tests.gitrepo import Repo, git

BROKEN = '''
[deps.gone]
upstream = "https://git.invalid/gone"   # [mirrors] maps it to remotes/gone, which does not exist
commit = "{commit}"
track = "main"
'''


def add_cutlass_submodule(ws: GitWorkspace) -> tuple[Repo, str]:
    """Upstream gains a third-party/cutlass submodule whose URL [mirrors] maps to remotes/cutlass."""
    sub = Repo(ws.root / "remotes" / "cutlass")
    sub.commit("cutlass headers", {"include/cute.h": "// cute\n"})
    upstream = ws.upstream
    upstream.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub.path), "third-party/cutlass")
    upstream.git("config", "-f", ".gitmodules", "submodule.third-party/cutlass.url", "https://git.invalid/cutlass")
    upstream.git("add", ".gitmodules")
    return sub, upstream.commit("Add cutlass submodule", {})


def pin_with_submodule(ws: GitWorkspace, commit: str) -> None:
    """Pin the dependency at `commit`, with the submodule checked out."""
    ws.manifest.write_text(ws.manifest.read_text().replace(ws.base, commit)
                           .replace('track = "main"\n', 'track = "main"\nsubmodules = ["third-party/cutlass"]\n'))


def _add_unreachable_dep(ws: GitWorkspace) -> None:
    ws.manifest.write_text(ws.manifest.read_text() + BROKEN.format(commit=ws.base))


def test_checkout_keeps_going_past_an_unreachable_dependency(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    # the failing dependency comes first in deps.toml order: kern must still be checked out
    text = ws.manifest.read_text()
    head, deps = text.split("[deps.kern]")
    ws.manifest.write_text(head + BROKEN.format(commit=ws.base) + "\n[deps.kern]" + deps)
    result = ws.assemble("checkout")
    assert result.returncode == 2, (result.returncode, result.stderr)  # the failure's own code (a missing local mirror)
    assert "error: gone: " in result.stderr and "Traceback" not in result.stderr
    assert "kern: " in result.stdout and (ws.fork / "csrc" / "kern.cpp").is_file()
    assert "1 of 2 dependencies failed (gone)" in result.stderr

    payload = json.loads(ws.assemble("checkout", "--json").stdout)
    assert [d["name"] for d in payload["deps"]] == ["kern"] and payload["ok"] is False
    assert [(f["name"], f["exit_code"]) for f in payload["failures"]] == [("gone", 2)]


def test_patches_keeps_going_past_an_unreachable_dependency(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    _add_unreachable_dep(ws)
    result = ws.assemble("patches", "--format", "json")
    assert result.returncode == 2, result.stderr
    payload = json.loads(result.stdout)
    assert [d["name"] for d in payload["deps"]] == ["kern"]
    assert [f["name"] for f in payload["failures"]] == ["gone"] and "error: gone: " in result.stderr
    # only failures: the plain error path, nothing on stdout for people to misread
    only = ws.assemble("patches", "gone")
    assert only.returncode == 2 and "Traceback" not in only.stderr


def test_missing_submodule_mirror_names_dependency_path_url_and_fix(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    sub, new_base = add_cutlass_submodule(ws)
    shutil.rmtree(sub.path)  # the submodule's mirror is missing
    pin_with_submodule(ws, new_base)
    result = ws.assemble("checkout")
    assert result.returncode in (2, 3), result.stderr
    message = result.stderr
    assert "kern: submodule third-party/cutlass (https://git.invalid/cutlass at " in message, message
    # [mirrors] maps the URL already: the fix is the mapped path, not another mapping; the
    # dependency is named once
    assert ("[mirrors] maps https://git.invalid/cutlass there" in message
            and "give the submodule a mirror" not in message), message
    assert "kern: kern:" not in message and "error: kern: submodule" in message, message
    assert (git(ws.fork, "rev-parse", "HEAD") == new_base
            or not (ws.fork / "third-party" / "cutlass" / "include").exists())


def test_a_submodule_mirror_missing_objects_is_said_to_be_incomplete(git_workspace: GitWorkspace) -> None:
    """The mapped copy exists but lacks an object its branch needs (a damaged or partial copy):
    "the mirror is incomplete (missing object X)", not "give the submodule a mirror"."""
    ws = git_workspace
    sub, new_base = add_cutlass_submodule(ws)
    sub.commit("more headers", {"include/tensor.h": "// a blob this copy loses\n"})
    blob = git(sub.path, "rev-parse", "HEAD:include/tensor.h")
    (sub.path / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    pin_with_submodule(ws, new_base)
    result = ws.assemble("checkout")
    assert result.returncode == 3, result.stderr
    assert f"the mirror is incomplete (missing object {blob})" in result.stderr, result.stderr
    assert "give the submodule a mirror" not in result.stderr and "kern: kern:" not in result.stderr
