from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.gitrepo import Repo, make_patch
from tests.json_contract import check_json_output

# Fixtures every test may ask for by name: the build toolchains, private caches and example
# workspaces (build_support), and real servers on 127.0.0.1 (servers).
pytest_plugins = ("tests.build_support", "tests.servers")

ROOT = Path(__file__).resolve().parent.parent

# The integration tier, decided here only: a test marked `integration`, or one that asks for a fixture that makes or
# starts something heavy (the hermetic CUDA toolkit and the torch build venv, a redis server). `pytest -m "not
# integration"` is the fast tier; `make test` runs both.
INTEGRATION_FIXTURES = frozenset({"toolchains", "build_env_path", "private_cache", "redis_url"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & INTEGRATION_FIXTURES:
            item.add_marker(pytest.mark.integration)


def run_assemble(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                 subprocess: bool = False) -> subprocess.CompletedProcess[str]:
    """The real CLI: exit codes, stdout and stderr are part of what is tested. By default
    ``assembler.cli.main(argv)`` runs in this process (no interpreter start per call);
    ``subprocess=True`` runs ``python -m assembler`` for what needs a process of its own (a lock
    held by this one, kill -9, the interpreter's own exit path); ASSEMBLE_TEST_SUBPROCESS=1 makes
    every call a subprocess."""
    if subprocess or os.environ.get("ASSEMBLE_TEST_SUBPROCESS") == "1":
        result = _run_subprocess(list(args), cwd, env)
    else:
        result = run_in_process(list(args), cwd=cwd, env=env)
    check_json_output(args, result.stdout, result.returncode)  # every --json run meets its JSON Schema
    return result


def _run_subprocess(args: list[str], cwd: Path | None, env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
    import subprocess as sp

    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return sp.run([sys.executable, "-m", "assembler", *args], cwd=cwd or ROOT, env=full_env, capture_output=True,
                  text=True)


@contextlib.contextmanager
def _environment(overrides: dict[str, str], cwd: Path) -> Iterator[None]:
    """``overrides`` in os.environ and ``cwd`` as the working directory, both put back after."""
    saved = {key: os.environ.get(key) for key in overrides}
    old_cwd = os.getcwd()
    os.environ.update(overrides)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_in_process(args: list[str], cwd: Path | None = None,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``assemble ARGS`` through ``assembler.cli.main`` in this process, stdout and stderr
    captured, the environment overrides applied and restored: a CompletedProcess as a
    subprocess run would give (an uncaught exception becomes a traceback on stderr and exit 1,
    as the interpreter would print it)."""
    from assembler.cli import main

    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    stderr = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    old_argv = sys.argv
    with _environment({"COLUMNS": "200", **(env or {})}, cwd or ROOT):
        sys.argv = ["assemble", *args]
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                try:
                    code = main(args)
                except SystemExit as exit:  # argparse: --help, --version, a bad argument
                    code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
                except Exception:
                    traceback.print_exc()
                    code = 1
        finally:
            sys.argv = old_argv
    texts = [stream.buffer.getvalue().decode("utf-8", errors="replace") for stream in (stdout, stderr)]  # type: ignore[attr-defined]
    return subprocess.CompletedProcess([sys.executable, "-m", "assembler", *args], code, *texts)


@dataclass
class GitWorkspace:
    root: Path
    upstream: Repo
    base: str
    cache: Path

    def assemble(self, *args: str, subprocess: bool = False) -> subprocess.CompletedProcess[str]:
        return run_assemble("-C", str(self.root), *args, env={"ASSEMBLE_CACHE": str(self.cache)}, subprocess=subprocess)

    @property
    def manifest(self) -> Path:
        return self.root / "deps.toml"

    @property
    def patches(self) -> Path:
        return self.root / "patches" / "kern"

    @property
    def fork(self) -> Path:
        return self.root / "forks" / "kern"


KERNEL_V1 = """#include <torch/extension.h>
at::Tensor add_one(const at::Tensor& x) {
  return x + 1;
}
TORCH_LIBRARY(kern, m) {
  m.def("add_one(Tensor x) -> Tensor", &add_one);
}
"""

MANIFEST = """# Test workspace: comments must survive edits.
[bundle]
name = "kern-bundle"
version = "1.0.0"
python-abi = "3.9"

[mirrors]
"https://git.invalid/" = "remotes/"   # relative to this file

[deps.kern]
upstream = "https://git.invalid/kern"  # the upstream
commit = "{base}"
track = "main"
"""


def make_git_workspace(tmp_path: Path) -> GitWorkspace:
    upstream = Repo(tmp_path / "ws" / "remotes" / "kern")
    upstream.commit("Initial kernel", {"csrc/kern.cpp": KERNEL_V1, "README.md": "kern\n"})
    base = upstream.commit("Add docs", {"docs/usage.md": "call torch.ops.kern.add_one\n"})
    root = tmp_path / "ws"
    staging = tmp_path / "staging"
    first = make_patch(
        upstream, base,
        "Use stable tensor type\n\nSwitch at::Tensor to torch::stable::Tensor.\n\nForwarded: "
        "https://git.invalid/kern/pull/7\n",
        {"csrc/kern.cpp": KERNEL_V1.replace("at::Tensor", "torch::stable::Tensor")}, staging / "a",
    )
    second_source = KERNEL_V1.replace("at::Tensor", "torch::stable::Tensor").replace("TORCH_LIBRARY(",
                                                                                     "STABLE_TORCH_LIBRARY(")
    upstream.git("checkout", "-q", "-B", "stacked", base)
    upstream.git("am", "-q", str(first))
    upstream.commit("Register with STABLE_TORCH_LIBRARY\n\nForwarded: no\n", {"csrc/kern.cpp": second_source})
    (staging / "b").mkdir(parents=True)
    upstream.git("format-patch", "--no-signature", "--zero-commit", "--no-numbered", "--full-index", "-o",
                 str(staging / "b"), f"{base}..stacked")
    upstream.git("checkout", "-q", "main")
    upstream.git("branch", "-q", "-D", "stacked", "scratch")
    patches = root / "patches" / "kern"
    patches.mkdir(parents=True)
    names = []
    for produced in sorted((staging / "b").iterdir()):
        produced.rename(patches / produced.name)
        names.append(produced.name)
    (patches / "series").write_text("# migration to the Stable ABI\n" + "\n".join(names) + "\n")
    (root / "deps.toml").write_text(MANIFEST.format(base=base))
    return GitWorkspace(root=root, upstream=upstream, base=base, cache=tmp_path / "cache")


@pytest.fixture
def git_workspace(tmp_path: Path) -> GitWorkspace:
    return make_git_workspace(tmp_path)
