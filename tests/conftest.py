from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.gitrepo import Repo, make_patch

ROOT = Path(__file__).resolve().parent.parent


def run_assemble(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess: exit codes and stderr are part of what is tested."""
    import os

    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "assembler", *args], cwd=cwd or ROOT, env=full_env, capture_output=True, text=True
    )


@dataclass
class GitWorkspace:
    root: Path
    upstream: Repo
    base: str
    cache: Path

    def assemble(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_assemble("-C", str(self.root), *args, env={"ASSEMBLE_CACHE": str(self.cache)})

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
        "Use stable tensor type\n\nSwitch at::Tensor to torch::stable::Tensor.\n\nForwarded: https://git.invalid/kern/pull/7\n",
        {"csrc/kern.cpp": KERNEL_V1.replace("at::Tensor", "torch::stable::Tensor")}, staging / "a",
    )
    second_source = KERNEL_V1.replace("at::Tensor", "torch::stable::Tensor").replace("TORCH_LIBRARY(", "STABLE_TORCH_LIBRARY(")
    upstream.git("checkout", "-q", "-B", "stacked", base)
    upstream.git("am", "-q", str(first))
    upstream.commit("Register with STABLE_TORCH_LIBRARY\n\nForwarded: no\n", {"csrc/kern.cpp": second_source})
    (staging / "b").mkdir(parents=True)
    upstream.git("format-patch", "--no-signature", "--zero-commit", "--no-numbered", "--full-index", "-o", str(staging / "b"), f"{base}..stacked")
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
