"""One git layer (issue 31): git runs, and its errors are read, in assembler/git only.

The import graph is read with ast (nothing imported, as tests/test_layers.py reads it): no
module outside assembler/git imports GitPython or names its GitCommandError, and every git
process is spawned by assembler/git/process.py. The layer itself runs on plain processes (the
figures are in git/process.py's header), so GitPython is not loaded by the commands that used
it (export, rebase), and their failures are the layer's own GitFailed.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import GitWorkspace
from tests.gitrepo import git

PACKAGE = Path(__file__).resolve().parent.parent / "assembler"
LAYER = PACKAGE / "git"
ENGINE = LAYER / "process.py"  # where `git` is spawned
# Names that belong to GitPython or to reading git's error output. Until the CLI drops its
# `_git_failure` (issue 31, the cli's own change), cli/__init__.py still names them.
ERROR_READERS = {"GitCommandError", "git_error_line", "missing_object"}
PENDING: set[tuple[str, str]] = set()  # (module, name) not yet behind the layer: none


def modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def gitpython_imports(tree: ast.AST) -> Iterator[int]:
    """Lines importing GitPython (``git``, ``git.*``), under ``if TYPE_CHECKING:`` too: a type
    from it is still a coupling to it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported = [node.module or ""]
        else:
            continue
        if any(name.split(".")[0] == "git" for name in imported):
            yield node.lineno


def git_spawns(tree: ast.AST) -> Iterator[int]:
    """Lines of a call whose first argument is a command line starting with ``"git"``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], (ast.List, ast.Tuple)):
            words = node.args[0].elts
            if words and isinstance(words[0], ast.Constant) and words[0].value == "git":
                yield node.lineno


# git subcommands: a `.run("add", ...)` / `.out("rev-parse", ...)` outside the layer is a git
# command line built there (the layer's WorkTree and GitView run whatever they are handed).
SUBCOMMANDS = frozenset({
    "add", "am", "apply", "blame", "branch", "cat-file", "checkout", "cherry-pick", "clone", "commit",
    "commit-tree", "config", "diff", "fetch", "for-each-ref", "init", "log", "ls-files", "ls-tree",
    "merge-base", "patch-id", "range-diff", "read-tree", "rebase", "reset", "rev-list", "rev-parse",
    "show", "status", "submodule", "switch", "tag", "update-ref", "worktree", "write-tree",
})


def subcommand_calls(tree: ast.AST) -> Iterator[int]:
    """Lines of ``X.run("<git subcommand>", ...)`` or ``X.out(...)``: a git command line built here."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in {"run", "out"}
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in SUBCOMMANDS):
            yield node.lineno


def names_used(tree: ast.AST) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id, node.lineno
        elif isinstance(node, ast.Attribute):
            yield node.attr, node.lineno
        elif isinstance(node, ast.ImportFrom):
            yield from ((alias.name, node.lineno) for alias in node.names)


def test_gitpython_is_imported_by_no_module_outside_the_git_layer() -> None:
    """Outside assembler/git never; inside it, nowhere either (the layer runs git as
    processes, git/process.py says why with its figures)."""
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}" for path, tree in modules()
             for line in gitpython_imports(tree)]
    outside = [where for where in found if not where.startswith("assembler/git/")]
    assert not outside, f"GitPython imported outside the git layer: {outside}"
    assert not found, f"GitPython imported in the git layer, which runs git as processes (git/process.py): {found}"


def test_git_is_spawned_by_the_layers_one_module() -> None:
    spawns = [f"{path.relative_to(PACKAGE.parent)}:{line}" for path, tree in modules() if path != ENGINE
              for line in git_spawns(tree)]
    assert not spawns, f"git started outside assembler/git/process.py: {spawns}"
    assert list(git_spawns(ast.parse(ENGINE.read_text()))), "the scan no longer sees process.py start git"


def test_no_git_command_line_is_built_outside_the_layer() -> None:
    """Every git operation is a function of assembler/git (history, status, commits, ...); the
    rest of assembler asks for the operation, never writes git's words."""
    built = [f"{path.relative_to(PACKAGE.parent)}:{line}" for path, tree in modules() if LAYER not in path.parents
             for line in subcommand_calls(tree)]
    assert not built, f"git command lines built outside assembler/git: {built}"


def test_git_errors_are_read_in_the_layer_only() -> None:
    """GitPython's exception and the readers of git's error output are named in assembler/git only."""
    found = {(str(path.relative_to(PACKAGE.parent)), name, line) for path, tree in modules()
             if LAYER not in path.parents for name, line in names_used(tree) if name in ERROR_READERS}
    leaks = sorted(f"{where}:{line} ({name})" for where, name, line in found if (where, name) not in PENDING)
    assert not leaks, f"git's errors read outside the git layer: {leaks}"


def test_the_scans_see_what_they_look_for() -> None:
    """The three scans catch the shapes they are for, so an empty result means something."""
    sample = ast.parse("import git\nfrom git.exc import GitCommandError\nimport os, git.cmd\n"
                       "subprocess.run(['git', 'status'])\nfrom assembler.git.reproducible import git_error_line\n")
    assert list(gitpython_imports(sample)) == [1, 2, 3]
    assert list(git_spawns(sample)) == [4]
    calls = ast.parse('tree.run("ls-files", "-z")\nwork.run(command, cwd)\nx.out("show")\n')
    assert list(subcommand_calls(calls)) == [1, 3]
    assert {name for name, _ in names_used(sample)} >= {"GitCommandError", "git_error_line"}
    assert not list(gitpython_imports(ast.parse("import assembler.git\nfrom assembler.git import process\n")))


def _assemble_without_gitpython(ws: GitWorkspace, *words: str) -> subprocess.CompletedProcess[str]:
    """``assemble WORDS`` in a fresh interpreter that says (exit 99) when GitPython was loaded."""
    code = ("import sys; from assembler.cli import main; code = main(sys.argv[1:]); "
            "sys.exit(99 if 'git' in sys.modules else code)")
    return subprocess.run([sys.executable, "-c", code, "-C", str(ws.root), *words], capture_output=True, text=True,
                          env={**os.environ, "ASSEMBLE_CACHE": str(ws.cache)})


def test_export_and_rebase_run_without_gitpython(git_workspace: GitWorkspace) -> None:
    """The commands that used GitPython (export, rebase) work, and never load it."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    (ws.fork / "mine.txt").write_text("mine\n")
    git(ws.fork, "add", "mine.txt")
    git(ws.fork, "commit", "-q", "-m", "Mine")
    exported = _assemble_without_gitpython(ws, "export", "kern", "--json")
    assert exported.returncode == 0, (exported.returncode, exported.stderr[-2000:])
    assert len(json.loads(exported.stdout)["deps"][0]["written"]) == 1
    ws.upstream.commit("Upstream moves on", {"NEWS": "news\n"})
    rebased = _assemble_without_gitpython(ws, "rebase", "kern")
    assert rebased.returncode == 0, (rebased.returncode, rebased.stderr[-2000:])
    assert git(ws.fork, "log", "-1", "--format=%s", "HEAD") == "Mine"


def test_a_git_failure_in_export_is_the_layers_error(git_workspace: GitWorkspace) -> None:
    """A git command export did not expect to fail raises GitFailed (exit 2, git's first line,
    the checkout named), not GitPython's exception for the CLI to take apart."""
    from assembler.errors import ExitCode
    from assembler.git.export import export
    from assembler.git.process import GitFailed
    from assembler.workspace import open_workspace

    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    state = ws.fork / ".git" / "assemble-state.json"
    data = json.loads(state.read_text())
    state.write_text(json.dumps({**data, "base": "0" * 40}))  # a well-formed commit name this repository lacks
    workspace = open_workspace(ws.root)
    with pytest.raises(GitFailed) as failed:
        export(workspace, workspace.manifest.deps["kern"])
    assert failed.value.exit_code == ExitCode.BAD_INPUT
    assert str(ws.fork) in failed.value.message and "git rev-list failed: fatal:" in failed.value.message
