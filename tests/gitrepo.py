"""Real git repositories for tests, with fixed identities and dates so SHAs are reproducible."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BASE_EPOCH = 1_700_000_000


def git(cwd: Path, *args: str, epoch: int = BASE_EPOCH, check: bool = True) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Upstream Dev", "GIT_AUTHOR_EMAIL": "dev@upstream.invalid",
        "GIT_COMMITTER_NAME": "Upstream Dev", "GIT_COMMITTER_EMAIL": "dev@upstream.invalid",
        "GIT_AUTHOR_DATE": f"{epoch} +0000", "GIT_COMMITTER_DATE": f"{epoch} +0000",
        "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
    }
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout.strip()


class Repo:
    """A non-bare repository used as an "upstream" (or fork) remote."""

    def __init__(self, path: Path, branch: str = "main") -> None:
        self.path = path
        self.clock = BASE_EPOCH
        path.mkdir(parents=True, exist_ok=True)
        git(path, "init", "-q", "-b", branch)

    def commit(self, message: str, files: dict[str, str | None]) -> str:
        """Write (or, for None, delete) files and commit; returns the new SHA."""
        self.clock += 3600
        for name, content in files.items():
            target = self.path / name
            if content is None:
                git(self.path, "rm", "-q", name)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            git(self.path, "add", name)
        git(self.path, "commit", "-q", "--allow-empty", "-m", message, epoch=self.clock)
        return self.head()

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD")

    def git(self, *args: str) -> str:
        self.clock += 60
        return git(self.path, *args, epoch=self.clock)


def make_patch(repo: Repo, base: str, message: str, files: dict[str, str | None], out: Path) -> Path:
    """Commit a change on a scratch branch from ``base`` and format it as a patch file."""
    repo.git("checkout", "-q", "-B", "scratch", base)
    repo.commit(message, files)
    out.mkdir(parents=True, exist_ok=True)
    name = repo.git("format-patch", "--no-signature", "--zero-commit", "--no-numbered", "--full-index", "-1", "-o",
                    str(out), "HEAD")
    repo.git("checkout", "-q", "-")
    return Path(name)
