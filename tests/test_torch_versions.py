"""Torch versions are X.Y.Z everywhere (issue 22, item 3): a short `2.13` is refused before any
work, with the fix, on the command line and in deps.toml alike."""

from __future__ import annotations

import pytest

from tests.conftest import GitWorkspace


@pytest.mark.parametrize("words", [
    ("build", "--cuda", "13.0", "--torch", "2.13"),
    ("check", "--torch", "2.13"),
    ("plan", "--matrix", "--torch", "2.13"),
    ("verify", "x.whl", "--torch", "2.13"),
])
def test_a_short_torch_version_on_the_command_line_is_refused_with_the_fix(git_workspace: GitWorkspace,
                                                                           words: tuple[str, ...]) -> None:
    result = git_workspace.assemble(*words)
    assert result.returncode == 2, result.stderr
    assert "'2.13' is not a torch release: expected MAJOR.MINOR.PATCH (X.Y.Z); write 2.13.0" in result.stderr
    assert not git_workspace.fork.exists()  # before any work: nothing was checked out


@pytest.mark.parametrize("key, line", [('torch = "2.13"', 6), ('verify-torch = ["2.13.0", "2.14+cu130"]', 6)])
def test_a_short_torch_version_in_deps_toml_is_refused_at_its_line(git_workspace: GitWorkspace, key: str,
                                                                   line: int) -> None:
    text = git_workspace.manifest.read_text()
    git_workspace.manifest.write_text(text.replace('python-abi = "3.9"\n', f'python-abi = "3.9"\n{key}\n'))
    result = git_workspace.assemble("deps")
    assert result.returncode == 2, result.stderr
    assert f"deps.toml:{line}:" in result.stderr and "is not a torch release" in result.stderr
    assert "hint: write 2.1" in result.stderr and ".0" in result.stderr


def test_full_releases_and_local_versions_pass(git_workspace: GitWorkspace) -> None:
    text = git_workspace.manifest.read_text()
    git_workspace.manifest.write_text(text.replace(
        'python-abi = "3.9"\n',
        'python-abi = "3.9"\ntorch = "2.13.0"\nverify-torch = ["2.13.0", "2.14.1+cu130", "2.15.0rc1"]\n'))
    assert git_workspace.assemble("deps").returncode == 0
