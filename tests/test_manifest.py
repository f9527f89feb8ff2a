"""Every bad manifest input: a clear file:line:column message, exit 2, and nothing written."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from assembler.manifest import load_manifest
from assembler.manifest.edit import update_dependency
from tests.conftest import ROOT, GitWorkspace, run_assemble


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return digest.hexdigest()


def test_root_manifest_lists_seven_dependencies_offline() -> None:
    result = run_assemble("-C", str(ROOT), "deps", "--json")
    assert result.returncode == 0, result.stderr
    import json

    rows = {row["name"]: row for row in json.loads(result.stdout)["deps"]}
    assert list(rows) == ["deepgemm", "flash-attn-2", "flash-attn-3", "flashmla", "deepselect", "flashkda", "qutlass"]
    assert rows["flash-attn-2"]["source"] == rows["flash-attn-3"]["source"]
    assert rows["deepselect"]["kind"] == "fork-only"
    assert rows["qutlass"]["commit"] == "e74319e3405ce6d71965732880f5dc1f52371f64"  # the migrated upstream merge


def test_root_manifest_verify_ops_are_schemas_torch_parses_in_the_modules_it_installs(build_env_path: Path) -> None:
    """Every [deps.X.verify] op of the root manifest is a schema torch's own parser accepts, named
    in the namespace of a module the dependency installs (STABLE_TORCH_LIBRARY's namespace is the
    module's name in all of them)."""
    import json
    import subprocess

    manifest = load_manifest(ROOT / "deps.toml")
    ops = {name: list(dep.verify.ops) for name, dep in manifest.deps.items() if dep.verify.ops}
    assert {name: len(specs) for name, specs in ops.items()} == {"flash-attn-2": 4, "flash-attn-3": 2, "qutlass": 14}
    for name, specs in ops.items():
        namespaces = {spec.partition("::")[0] for spec in specs}
        assert all(any(pattern.startswith(f"{namespace}*") or f"/{namespace}*" in pattern
                       for pattern in manifest.deps[name].install) for namespace in namespaces), (name, namespaces)
    parse = "import json, sys, torch; print(json.dumps([str(torch._C.parse_schema(s)) for s in json.load(sys.stdin)]))"
    specs = [spec for specs in ops.values() for spec in specs]
    result = subprocess.run([build_env_path / "bin" / "python", "-c", parse], input=json.dumps(specs),
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(json.loads(result.stdout)) == len(specs)


BAD_INPUTS = [
    # (description, edit to deps.toml text, expected message fragment, expected line)
    ("unknown key", lambda t: t.replace('track = "main"', 'trak = "main"'), "did you mean 'track'", 'trak = "main"'),
    ("short sha", lambda t: re.sub(r'commit = "([0-9a-f]{12})[0-9a-f]+"', r'commit = "\1"', t),
     "not a full 40-hex commit SHA", "commit ="),
    ("branch as commit", lambda t: re.sub(r'commit = "[0-9a-f]+"', 'commit = "main"', t),
     "not a full 40-hex commit SHA", "commit ="),
    ("unknown bundle key", lambda t: t.replace('python-abi = "3.9"', 'python_abi = "3.9"'), "did you mean 'python-abi'",
     "python_abi ="),
    ("bad torch-target", lambda t: t + 'torch-target = "2.10.1"\n', "MAJOR.MINOR torch version", "torch-target ="),
    ("toml syntax", lambda t: t.replace('track = "main"', 'track = "main'), "TOML syntax error", None),
    ("no source", lambda t: t.replace('upstream = "https://git.invalid/kern"  # the upstream\n', ""),
     "neither source nor upstream", "[deps.kern]"),
    ("bad language", lambda t: t + '[deps.kern.build]\n[[deps.kern.build.extensions]]\nname = "_k"\nsources = '
                                   '["a.cpp"]\nlanguage = "fortran"\n', "not a known language", 'language = "fortran"'),
    ("install escapes wheel", lambda t: t + '[deps.kern.install]\n"*.so" = "../x/"\n', "leaves the wheel", '"*.so" ='),
    # names that match the character rule but that git refuses in the checkout's branch (assemble/NAME)
    ("name ending .lock", lambda t: t.replace("[deps.kern]", '[deps."kern.lock"]'), "not a valid dependency name",
     "kern.lock"),
    ("name with ..", lambda t: t.replace("[deps.kern]", '[deps."ke..rn"]'), "not a valid dependency name", "ke..rn"),
]


@pytest.mark.parametrize(("description", "edit", "fragment", "line_text"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_manifest_exits_2_naming_position(git_workspace: GitWorkspace, description: str, edit, fragment: str,
                                              line_text: str | None) -> None:
    git_workspace.manifest.write_text(edit(git_workspace.manifest.read_text()))
    before = tree_digest(git_workspace.root)
    result = git_workspace.assemble("checkout")
    assert result.returncode == 2, (description, result.stderr)
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr
    location = re.search(r"deps\.toml:(\d+):(\d+)", result.stderr)
    assert location, result.stderr
    if line_text is not None:
        lines = git_workspace.manifest.read_text().splitlines()
        number, column = int(location.group(1)), int(location.group(2))
        assert line_text in lines[number - 1], (lines[number - 1], line_text)
        assert column >= 1
    assert "hint:" in result.stderr
    assert tree_digest(git_workspace.root) == before, "a failed command wrote files"


def test_series_entry_without_file(git_workspace: GitWorkspace) -> None:
    series = git_workspace.patches / "series"
    series.write_text(series.read_text() + "0003-missing.patch\n")
    result = git_workspace.assemble("deps")
    assert result.returncode == 2
    assert "series names 0003-missing.patch, which does not exist" in result.stderr
    assert f"{series}:4:1" in result.stderr


def test_patch_file_not_in_series(git_workspace: GitWorkspace) -> None:
    (git_workspace.patches / "0009-stray.patch").write_text("stray\n")
    result = git_workspace.assemble("checkout")
    assert result.returncode == 2
    assert "0009-stray.patch is not in the series" in result.stderr
    assert not git_workspace.fork.exists()


def test_unknown_dependency_on_command_line(git_workspace: GitWorkspace) -> None:
    result = git_workspace.assemble("checkout", "kren")
    assert result.returncode == 2
    assert "did you mean 'kern'" in result.stderr


def test_missing_workspace(tmp_path: Path) -> None:
    result = run_assemble("deps", cwd=tmp_path)
    assert result.returncode == 2
    assert "no deps.toml" in result.stderr


def test_edit_keeps_comments_and_order(git_workspace: GitWorkspace) -> None:
    before = git_workspace.manifest.read_text()
    new_sha = "a" * 40
    assert update_dependency(git_workspace.manifest, "kern", {"commit": new_sha, "source": "https://git.invalid/fork"})
    after = git_workspace.manifest.read_text()
    assert after == before.replace(git_workspace.base, new_sha).replace(
        'track = "main"\n', 'track = "main"\nsource = "https://git.invalid/fork"\n'
    )
    manifest = load_manifest(git_workspace.manifest)
    assert manifest.deps["kern"].commit == new_sha
    assert manifest.deps["kern"].is_fork
    assert not list(git_workspace.root.glob(".deps.toml.*")), "temporary file left behind"
