"""Upstream histories for `assemble patches` / `assemble rebase` tests, on the test workspace
of conftest (kern: patch 0001 switches to torch::stable::Tensor, 0002 registers with
STABLE_TORCH_LIBRARY)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import KERNEL_V1, MANIFEST, GitWorkspace
from tests.gitrepo import Repo, git

STABLE_TYPES = KERNEL_V1.replace("at::Tensor", "torch::stable::Tensor")
STABLE_ALL = STABLE_TYPES.replace("TORCH_LIBRARY(", "STABLE_TORCH_LIBRARY(")


def patch_files(ws: GitWorkspace) -> list[Path]:
    return sorted(ws.patches.glob("*.patch"))


def land_verbatim(ws: GitWorkspace, patch: Path) -> str:
    """Upstream merges one of our patches as is (``git am``), then moves on."""
    ws.upstream.git("am", "-q", str(patch))
    landed = ws.upstream.head()
    ws.upstream.commit("Unrelated README change", {"README.md": "kern v2\n"})
    return landed


def snapshot(ws: GitWorkspace) -> dict[str, object]:
    """Everything --abort must restore: deps.toml, patches/, the checkout's branch, HEAD and
    tracked files, byte for byte."""
    fork = ws.fork
    tracked = git(fork, "ls-files", "-z").split("\0")
    return {
        "deps.toml": ws.manifest.read_bytes(),
        "patches": {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(ws.patches.iterdir())},
        "branch": git(fork, "symbolic-ref", "HEAD"),
        "head": git(fork, "rev-parse", "HEAD"),
        "files": {name: (fork / name).read_bytes() for name in tracked if name},
        "status": git(fork, "status", "--porcelain", "--untracked-files=all"),
        "state": (fork / ".git" / "assemble-state.json").read_bytes(),
    }


def wide_workspace(tmp_path: Path, count: int = 24) -> GitWorkspace:
    """A series of ``count`` patches, one file each, and an upstream that moved on in other
    files: a replay long enough to be killed in the middle."""
    root = tmp_path / "ws"
    upstream = Repo(root / "remotes" / "kern")
    files = {f"src/f{i:02d}.c": "".join(f"int f{i}_{line} = {line};\n" for line in range(12)) for i in range(count)}
    base = upstream.commit("Initial", files)
    upstream.git("checkout", "-q", "-b", "series")
    for i in range(count):
        name = f"src/f{i:02d}.c"
        upstream.commit(f"Patch file {i}\n\nForwarded: no\n",
                        {name: files[name].replace(f"f{i}_3 = 3", f"f{i}_3 = 33")})
    out = tmp_path / "staging"
    upstream.git("format-patch", "-q", "--no-signature", "--zero-commit", "--no-numbered", "--full-index", "-o",
                 str(out), f"{base}..series")
    upstream.git("checkout", "-q", "main")
    for i in range(0, count, 3):
        name = f"src/f{i:02d}.c"
        upstream.commit(f"Upstream edits {name}", {name: files[name].replace(f"f{i}_10 = 10", f"f{i}_10 = 100")})
    patches = root / "patches" / "kern"
    patches.mkdir(parents=True)
    names = sorted(p.name for p in out.iterdir())
    for name in names:
        (out / name).rename(patches / name)
    (patches / "series").write_text("\n".join(names) + "\n")
    (root / "deps.toml").write_text(MANIFEST.format(base=base))
    return GitWorkspace(root=root, upstream=upstream, base=base, cache=tmp_path / "cache")





