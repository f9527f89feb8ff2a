"""One bare mirror per repository URL in the cache, shared by every workspace and dependency
(flash-attn-2 and flash-attn-3 share one). Fetches happen only when a needed commit is absent."""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path

import filelock
import git

from assembler.cache import cache_root
from assembler.errors import NetworkError
from assembler.git.runner import QUIET_ENV, has_commit
from assembler.manifest import Manifest

# Upstream branches land under refs/remotes/origin/ so fetch --prune never touches our refs.
FETCH_REFSPECS = ["+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"]


@dataclass
class Mirror:
    url: str  # as written in deps.toml
    fetch_url: str  # after [mirrors] rewriting
    path: Path

    @property
    def repo(self) -> git.Repo:
        repo = git.Repo(self.path)
        repo.git.update_environment(**QUIET_ENV)
        return repo

    def last_fetched(self) -> float | None:
        """Unix time of the last successful fetch, or None if never fetched."""
        stamp = self.path / "FETCH_HEAD"
        return stamp.stat().st_mtime if stamp.exists() else None


def mirror_path(url: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", url.rstrip("/").split("://")[-1])[-60:]
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return cache_root() / "git" / f"{slug}-{digest}.git"


def open_mirror(manifest: Manifest, url: str) -> Mirror:
    """The mirror for ``url``, created empty if needed; its fetch URL follows [mirrors]."""
    path = mirror_path(url)
    fetch_url = manifest.resolve_url(url)
    path.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(f"{path}.lock"):
        if not (path / "HEAD").exists():
            repo = git.Repo.init(path, bare=True)
            with repo.config_writer() as config:
                config.set_value('remote "origin"', "url", fetch_url)
                config.set_value('remote "origin"', "fetch", FETCH_REFSPECS[0])
                config.set_value("gc", "auto", "0")
        else:
            repo = git.Repo(path)
            if repo.remotes.origin.url != fetch_url:
                with repo.config_writer() as config:
                    config.set_value('remote "origin"', "url", fetch_url)
    return Mirror(url=url, fetch_url=fetch_url, path=path)


def fetch(mirror: Mirror, refs: list[str] | None = None) -> None:
    """Fetch branches and tags (or explicit ``refs``); network failure names the URL and the fix."""
    with filelock.FileLock(f"{mirror.path}.lock"):
        try:
            mirror.repo.git.fetch("--prune", "--quiet", "origin", *(refs or FETCH_REFSPECS))
        except git.GitCommandError as exc:
            raise network_error(mirror, exc) from None


def network_error(mirror: Mirror, exc: git.GitCommandError) -> NetworkError:
    stderr = (exc.stderr or "").strip().replace("stderr: ", "").strip("'\n ")
    reason = stderr.splitlines()[-1] if stderr else f"git exited with {exc.status}"
    via = f" (via [mirrors]: {mirror.url})" if mirror.fetch_url != mirror.url else ""
    prefix = "/".join(mirror.url.split("/")[:3]) + "/" if "://" in mirror.url else mirror.url
    return NetworkError(
        f"cannot fetch {mirror.fetch_url}{via}: {reason}",
        hint=f'point [mirrors] at a local copy, e.g. "{prefix}" = "/srv/git-mirrors/" in deps.toml',
    )


def ensure_commit(manifest: Manifest, url: str, sha: str) -> tuple[Mirror, bool]:
    """A mirror holding ``sha``, and whether a fetch was needed (only when it was missing)."""
    mirror = open_mirror(manifest, url)
    if has_commit(mirror.repo, sha):
        return mirror, False
    fetch(mirror)
    if not has_commit(mirror.repo, sha):
        # Servers that allow it can serve an unadvertised commit (a fork's dangling pin).
        with contextlib.suppress(NetworkError):
            fetch(mirror, [sha])
    if not has_commit(mirror.repo, sha):
        raise NetworkError(
            f"{mirror.fetch_url} has no commit {sha}",
            hint="check the commit in deps.toml, or that the repository (or its mirror) contains it",
        )
    return mirror, True


def age_text(timestamp: float | None) -> str:
    if timestamp is None:
        return "never fetched"
    seconds = time.time() - timestamp
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"fetched {seconds / size:.0f} {unit} ago"
    return f"fetched {seconds:.0f} s ago"
