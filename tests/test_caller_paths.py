"""Path arguments are read against the caller's directory, or against ``-C DIR`` as git does
(issue 22, items 1 and 12): `assemble verify dist/X.whl` from a workspace, and `-C DIR`
searching the workspace upward from DIR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_assemble
from tests.test_verify import OLD, libraries, torch_envs, wheel, workspace  # noqa: F401 (fixtures)


@pytest.mark.integration
def test_verify_takes_a_wheel_path_relative_to_the_caller(workspace: Path) -> None:  # noqa: F811
    """The installer runs in a scratch directory; a relative WHEEL was looked up there
    ("Distribution not found at: file://<scratch>/dist/X.whl", exit 2)."""
    stable = workspace / "stable"
    relative = wheel(stable).relative_to(stable)
    result = run_assemble("verify", str(relative), "--torch", OLD, "--json", cwd=stable)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert Path(document["wheel"]) == wheel(stable)
    assert {cell["status"] for cell in document["results"]} == {"PASS"}


@pytest.mark.integration
def test_dash_c_is_gits_dash_c(workspace: Path) -> None:  # noqa: F811
    """`-C stable/dist verify NAME.whl`: the wheel is read against DIR and the workspace is the
    nearest deps.toml upward from DIR (stable/, whose specs are then used)."""
    name = wheel(workspace / "stable").name
    result = run_assemble("-C", "stable/dist", "verify", name, "--torch", OLD, "--json", cwd=workspace)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert Path(document["wheel"]) == workspace / "stable" / "dist" / name
    assert (document["specs"]["source"] == "workspace"
            and "stable/deps.toml" in document["specs"]["detail"]), document["specs"]


def test_dash_c_searches_the_workspace_upward(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "patches" / "kern").mkdir(parents=True)
    (root / "deps.toml").write_text('[bundle]\nname = "b"\nversion = "1.0"\n\n[deps.kern]\n'
                                    'upstream = "https://example.invalid/kern.git"\ncommit = "' + "a" * 40 + '"\n')
    result = run_assemble("-C", "ws/patches/kern", "deps", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert Path(document["workspace"]) == root.resolve()
    assert [dep["name"] for dep in document["deps"]] == ["kern"]


def test_dash_c_reads_other_paths_against_dir(tmp_path: Path) -> None:
    """`assemble -C DIR sbom x.whl` looks for DIR/x.whl, not ./x.whl."""
    (tmp_path / "elsewhere").mkdir()
    result = run_assemble("-C", "elsewhere", "sbom", "x.whl", cwd=tmp_path)
    assert result.returncode == 2
    assert str(tmp_path / "elsewhere" / "x.whl") in result.stderr, result.stderr


def test_dash_c_to_a_missing_directory_is_bad_input(tmp_path: Path) -> None:
    result = run_assemble("-C", "nowhere", "deps", cwd=tmp_path)
    assert result.returncode == 2
    assert "-C nowhere: no such directory" in result.stderr
