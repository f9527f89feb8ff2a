"""Deterministic git invocation: patches applied by assemble get the same commit SHAs on
every machine, whatever the user's git configuration says."""

from __future__ import annotations

import os
from pathlib import Path

import git

# Commits that assemble creates while applying a series: fixed committer, committer date =
# author date (git am --committer-date-is-author-date), so SHAs depend only on the inputs.
COMMITTER_ENV = {
    "GIT_COMMITTER_NAME": "assemble",
    "GIT_COMMITTER_EMAIL": "assemble@localhost",
}
QUIET_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "GIT_EDITOR": "true", "GIT_MERGE_AUTOEDIT": "no"}


def repo_at(path: Path) -> git.Repo:
    repo = git.Repo(path)
    repo.git.update_environment(**QUIET_ENV, **COMMITTER_ENV)
    return repo


def has_commit(repo: git.Repo, sha: str) -> bool:
    try:
        repo.git.cat_file("-e", f"{sha}^{{commit}}")
    except git.GitCommandError:
        return False
    return True


def is_dirty(repo: git.Repo) -> list[str]:
    """Paths with uncommitted edits, untracked files included (ignored files are not work)."""
    status = repo.git.status("--porcelain", "--untracked-files=normal")
    return [line[3:] for line in status.splitlines() if line.strip()]


def in_progress_operation(repo: git.Repo) -> str | None:
    """'am', 'rebase', 'merge' or 'cherry-pick' when the checkout is stopped mid-operation."""
    git_dir = Path(repo.git_dir)
    if (git_dir / "rebase-apply").exists():
        return "am" if (git_dir / "rebase-apply" / "applying").exists() else "rebase"
    if (git_dir / "rebase-merge").exists():
        return "rebase"
    if (git_dir / "MERGE_HEAD").exists():
        return "merge"
    if (git_dir / "CHERRY_PICK_HEAD").exists():
        return "cherry-pick"
    return None


def conflicted_files(repo: git.Repo) -> list[str]:
    output = repo.git.diff("--name-only", "--diff-filter=U")
    return [line for line in output.splitlines() if line]


def env_without_git_config() -> dict[str, str]:
    """Environment for git subprocesses that must not read the user's hooks or templates."""
    env = dict(os.environ)
    env.update(QUIET_ENV)
    env.update(COMMITTER_ENV)
    return env
