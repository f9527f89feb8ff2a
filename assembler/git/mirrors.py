"""One bare mirror per repository fetched (its URL after [mirrors]) in the cache, shared by every
workspace and dependency (flash-attn-2 and flash-attn-3 share one). Fetches happen only when a
needed commit is absent."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from assembler.cache import cache_root, creating
from assembler.errors import AssembleError, EnvironmentFailure, InputError, ManifestError, NetworkError
from assembler.fsutil import remove_stale, sha256, temporary_path
from assembler.git.reproducible import END_OF_OPTIONS, QUIET_ENV, git_error_line, missing_object
from assembler.manifest import Manifest
from assembler.manifest.refname import branch_problem
from assembler.manifest.values import url_problem

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Sequence

# Upstream branches land under refs/remotes/origin/ so fetch --prune never touches our refs.
FETCH_REFSPECS = ["+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"]
FETCHED_STAMP = "assemble-fetched"  # its mtime: the last fetch that succeeded
# Pull-request heads, where the host publishes them (GitHub: refs/pull/N/head, GitLab:
# refs/merge-requests/N/head), into a namespace of our own: `assemble patches` recognises a
# patch sent upstream by its patch-id there. A wildcard that matches nothing costs nothing, so
# other hosts need no detection. ASSEMBLE_PULL_REQUESTS=0 turns it off (a huge PR history).
PULL_NAMESPACE = "refs/assemble/pull/"
PULL_REFSPECS = [f"+refs/pull/*/head:{PULL_NAMESPACE}*", f"+refs/merge-requests/*/head:{PULL_NAMESPACE}*"]


def pull_requests_wanted() -> bool:
    return os.environ.get("ASSEMBLE_PULL_REQUESTS", "1").strip().lower() not in ("0", "no", "false", "off")


class Mirror(NamedTuple):
    url: str  # as written in deps.toml
    fetch_url: str  # after [mirrors] rewriting
    path: Path

    def has(self, sha: str) -> bool:
        """The mirror holds commit ``sha`` (one git process, no GitPython)."""
        from assembler.git.process import GitView  # here: an offline report that reuses its answer starts no git

        return GitView(self.path).rev(sha) is not None

    def last_fetched(self) -> float | None:
        """Unix time of the last successful fetch by assemble, or None if never fetched. Not
        FETCH_HEAD's: git truncates that file even when a fetch fails."""
        stamp = self.path / FETCHED_STAMP
        return stamp.stat().st_mtime if stamp.exists() else None

    def record_fetch(self) -> None:
        """Called after a fetch succeeded: its time is the stamp's mtime."""
        (self.path / FETCHED_STAMP).touch()  # an existing stamp gets the current time


def mirror_path(manifest: Manifest, url: str) -> Path:
    """The mirror of ``url`` (as deps.toml or a .gitmodules writes it): keyed by the URL it is
    fetched from, after [mirrors], so two workspaces that map one URL to different
    repositories never share a mirror (nor its branches)."""
    fetch_url = manifest.resolve_url(url)
    # cut to its last 60 characters, it must not start like an option or a hidden file (a leading
    # _, as every local path gives, is harmless and kept: existing mirrors keep their names)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", fetch_url.rstrip("/").split("://")[-1])[-60:].lstrip("-.")
    digest = sha256(fetch_url.encode()).hexdigest()[:12]
    return cache_root() / "git" / f"{slug}-{digest}.git"


def open_mirror(manifest: Manifest, url: str) -> Mirror:
    """The mirror for ``url``, created if needed; its fetch URL follows [mirrors].

    A mirror is made complete or not at all (initialised and configured in a temporary
    directory, then renamed into place), and one left half-made by an older assemble is made
    again. A complete mirror with the right URL is opened without taking its lock, so a
    read-only cache serves offline commands."""
    for value in (url, manifest.resolve_url(url)):
        if (problem := url_problem(value)) is not None:
            raise InputError(f"{value!r} is not a repository URL: {problem}",
                             hint="fix the URL in deps.toml ([deps.X] upstream/source, [mirrors]) or in the "
                                  ".gitmodules it came from")
    path = mirror_path(manifest, url)
    fetch_url = manifest.resolve_url(url)
    if origin_url(path) == fetch_url:
        return Mirror(url=url, fetch_url=fetch_url, path=path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with creating(path):
        origin = origin_url(path)
        if origin is None:
            _create(path, fetch_url)
        elif origin != fetch_url:  # made by an older assemble, which keyed mirrors by the manifest URL
            _repoint(path, fetch_url)
    return Mirror(url=url, fetch_url=fetch_url, path=path)


def _repoint(path: Path, fetch_url: str) -> None:
    """Point a mirror that fetched another repository at ``fetch_url`` and forget every ref
    and the fetch stamp it had from there (its objects stay: an object is the same whoever
    fetched it), so nothing of the other repository is reported as this one's branches; the
    next use fetches."""
    from assembler.git.process import GitView

    view = GitView(path)
    view.run("config", "--replace-all", "remote.origin.url", fetch_url)
    refs = view.run("for-each-ref", "--format=%(refname)").stdout.split(b"\n")
    view.run("update-ref", "--stdin", input=b"".join(b"delete " + ref + b"\n" for ref in refs if ref))
    with contextlib.suppress(FileNotFoundError):
        (path / FETCHED_STAMP).unlink()


def origin_url(path: Path) -> str | None:
    """The fetch URL of the mirror at ``path``; None when there is none or it is half-made.
    Read from the config file (no git process, no GitPython: start-up), as git reads it."""
    if not (path / "HEAD").is_file() or not (path / "objects").is_dir():
        return None
    try:
        lines = (path / "config").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):  # unreadable: not a usable mirror
        return None
    section, found = "", []
    for line in lines:
        text = line.strip()
        if text.startswith("["):
            section = text.partition("]")[0] + "]"
        elif section.lower().startswith("[remote ") and section[len("[remote "):] == '"origin"]':
            key, equals, raw = text.partition("=")
            if equals and key.strip().lower() == "url":
                found.append(_config_value(raw))
    return found[-1] if found and found[-1] else None  # git: the last one wins


def _config_value(raw: str) -> str | None:
    """A git config value as git reads it: double quotes group; a backslash escapes a quote,
    a backslash, n, t or b; a semicolon or hash outside quotes starts a comment; whitespace
    outside quotes is trimmed at the ends and each run of it becomes one space. None for what
    git would refuse (another escape, an open quote) or a continued line."""
    out: list[str] = []
    quoted, space = False, False
    chars = iter(raw.strip())
    for char in chars:
        if not quoted and char in " \t":
            space = True  # written only if something follows: trailing whitespace is dropped
            continue
        if char in ";#" and not quoted:
            break
        if space:
            out.append(" ")
            space = False
        if char == '"':
            quoted = not quoted
        elif char == "\\":
            escaped = {"n": "\n", "t": "\t", "b": "\b", "\\": "\\", '"': '"'}.get(next(chars, ""))
            if escaped is None:
                return None
            out.append(escaped)
        else:
            out.append(char)
    return None if quoted else "".join(out)


def _create(path: Path, fetch_url: str) -> None:
    """A configured bare repository at ``path``, made aside and renamed into place (a killed
    creation leaves a `.NAME.PID.tmp` that the next one removes)."""
    import shutil

    from assembler.git.process import GitFailed, GitView, isolated_env, run_git

    remove_stale(path.parent)
    staging = temporary_path(path)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        made = run_git(["init", "--quiet", "--bare", "--", str(staging)], isolated_env())
        if made.returncode != 0:
            raise GitFailed(str(path), ["init"], made)
        view = GitView(staging)
        view.run("config", "remote.origin.url", fetch_url)
        view.run("config", "remote.origin.fetch", FETCH_REFSPECS[0])
        view.run("config", "gc.auto", "0")
        if path.exists():  # half-made by an older assemble: replace it
            shutil.rmtree(path)
        os.replace(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def has_pull_requests(path: Path) -> bool:
    """The mirror at ``path`` fetched at least one pull-request head (under PULL_NAMESPACE)."""
    from assembler.git.process import GitView

    return bool(GitView(path).out("for-each-ref", "--count=1", "--format=%(refname)", PULL_NAMESPACE))


def pull_requests_containing(path: Path, sha: str) -> list[int]:
    """The numbers of the pull requests (fetched under PULL_NAMESPACE) whose head has commit
    ``sha``, lowest first."""
    from assembler.git.process import GitView

    refs = GitView(path).out("for-each-ref", "--contains", sha, "--format=%(refname)", PULL_NAMESPACE).split()
    return sorted(int(ref.rsplit("/", 1)[1]) for ref in refs if ref.rsplit("/", 1)[1].isdigit())


def pull_request_patch_ids(path: Path, target: str, paths: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(commit, patch-id) of the commits of the mirror's pull-request heads not in ``target``."""
    from assembler.git.history import log_patch_ids
    from assembler.git.process import GitView

    return log_patch_ids(GitView(path), (f"--glob={PULL_NAMESPACE}*",), (f"^{target}",), paths)


def fetch(mirror: Mirror, refs: list[str] | None = None) -> None:
    """Fetch branches and tags (or explicit ``refs``: branch, tag or commit names, checked
    with git's rules and passed after --end-of-options); network failure names the URL and
    the fix. A repository on this machine is fetched from only when its objects are its own
    (git/objects.py: no alternates), and a mirror removed meanwhile (a prune) is made again."""
    for ref in refs or ():
        if (problem := branch_problem(ref)) is not None:
            raise InputError(f"{ref!r} is not a branch, tag or commit name: {problem}",
                             hint="check `track` in deps.toml (or the REF given)")
    if read_only(mirror.path):  # a read-only cache (CI image, shared volume) still serves what it holds
        print(f"note: {mirror.path.parent} is read-only: not fetching {mirror.fetch_url}, using it as "
              f"{age_text(mirror.last_fetched())}",
              file=sys.stderr)
        return
    missing = _missing_local(mirror.fetch_url)
    if missing is not None:
        via = f" ([mirrors] maps {mirror.url} there)" if mirror.fetch_url != mirror.url else ""
        raise ManifestError(f"{mirror.fetch_url}: no such repository on this machine{via}",
                            hint=f"check the path in deps.toml ({'[mirrors]' if via else 'upstream/source'}); "
                                 f"{missing}")
    from assembler.git.objects import refuse_foreign

    refuse_foreign(mirror.fetch_url,
                   mirror.fetch_url
                   + (f" ([mirrors] maps {mirror.url} there)" if mirror.fetch_url != mirror.url else ""))
    with creating(mirror.path):
        if origin_url(mirror.path) != mirror.fetch_url:  # removed (or left half-made) since it was opened
            _create(mirror.path, mirror.fetch_url)
        specs = refs or [*FETCH_REFSPECS, *(PULL_REFSPECS if pull_requests_wanted() else [])]
        result = _run_fetch(mirror, ["fetch", "--prune", "--quiet", END_OF_OPTIONS, "origin", *specs])
        if result.returncode != 0:
            raise network_error(mirror, result.stderr, result.returncode)
        if not refs:
            mirror.record_fetch()


def _run_fetch(mirror: Mirror, args: list[str]) -> subprocess.CompletedProcess[str]:
    """git in the mirror with the user's configuration (proxies, credential helpers: QUIET_ENV
    only), none of the caller's GIT_DIR and the like, through the process layer (an interrupt
    stops git cleanly)."""
    from assembler.git.process import INHERITED, run_git

    env = {key: value for key, value in os.environ.items() if key not in INHERITED}
    env.update(QUIET_ENV, GIT_DIR=str(mirror.path))
    return run_git(args, env, cwd=mirror.path, text=True)


def _missing_local(fetch_url: str) -> str | None:
    """For a fetch URL that is a path on this machine (or file://) that does not exist: what is
    wrong with it (a configuration error, not a network one); None otherwise."""
    if fetch_url.startswith("file://"):
        path = Path(fetch_url[len("file://"):])
    elif "://" in fetch_url or re.match(r"^[^/]+:", fetch_url):  # a URL, or scp-like host:path
        return None
    else:
        path = Path(fetch_url)
    if path.exists():
        return None
    parent = next((p for p in path.parents if p.exists()), None)
    return f"{path} does not exist" + (f" (the nearest existing directory is {parent})" if parent else "")


def read_only(path: Path) -> bool:
    """Whether this process cannot write to the mirror at ``path`` (a read-only mount, or
    another user's cache): then :func:`fetch` serves what it holds without fetching."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY) or not os.access(path, os.W_OK)
    except OSError:
        return False


def not_fetched(mirror: Mirror, what: str, offline: bool) -> AssembleError | None:
    """The error for a ``mirror`` that lacks ``what`` where no fetch can bring it: its cache is
    read-only (the machine's doing: nothing in deps.toml is wrong, so the hint is about the
    cache), or the run is offline. None when a fetch may still find it; the caller's own error
    then says what to check in deps.toml."""
    age = age_text(mirror.last_fetched())
    if read_only(mirror.path):  # the rule fetch() skips its fetch by
        return EnvironmentFailure(
            f"the mirror of {mirror.url} ({age}) has no {what}, and {mirror.path.parent} is read-only: "
            "it cannot be fetched there",
            hint=f"make {mirror.path.parent} writable, or point ASSEMBLE_CACHE at a writable directory, then run the "
                 "command again",
        )
    if offline:
        return NetworkError(f"the mirror of {mirror.url} ({age}) has no {what}",
                            hint="run without --offline to fetch it")
    return None


def network_error(mirror: Mirror, stderr: str, status: int) -> AssembleError:
    """git's first meaningful line (not its closing "and the repository exists."); a machine
    that refused (a full disk) is said as such."""
    from assembler.git.process import refusal

    reason = git_error_line(stderr, status)
    via = f" (via [mirrors]: {mirror.url})" if mirror.fetch_url != mirror.url else ""
    prefix = "/".join(mirror.url.split("/")[:3]) + "/" if "://" in mirror.url else mirror.url
    refused = refusal(f"cannot fetch {mirror.fetch_url}{via} into {mirror.path}: {reason}", stderr, status)
    if refused is not None:
        return refused
    if missing_object(stderr) is not None:  # the repository answered, but lacks objects: no network fix
        return NetworkError(
            f"cannot fetch {mirror.fetch_url}{via}: {reason}",
            hint=f"{mirror.fetch_url} lacks objects its branches need (a partial or damaged copy): complete it "
                 f"(`git -C {mirror.fetch_url} fetch` from its origin, `git fsck` to list what is missing), "
                 "or point [mirrors] at a complete copy",
        )
    return NetworkError(
        f"cannot fetch {mirror.fetch_url}{via}: {reason}",
        hint=f'point [mirrors] at a local copy, e.g. "{prefix}" = "/srv/git-mirrors/" in deps.toml',
    )


def ensure_commit(manifest: Manifest, url: str, sha: str) -> tuple[Mirror, bool]:
    """A mirror holding ``sha``, and whether a fetch was needed (only when it was missing)."""
    mirror = open_mirror(manifest, url)
    if mirror.has(sha):
        return mirror, False
    fetch(mirror)
    if not mirror.has(sha):
        # Servers that allow it can serve an unadvertised commit (a fork's dangling pin).
        with contextlib.suppress(NetworkError):
            fetch(mirror, [sha])
    if not mirror.has(sha):
        if (unfetchable := not_fetched(mirror, f"commit {sha[:12]}", offline=False)) is not None:
            raise unfetchable
        # the repository answered and has no such commit: the pin is wrong, not the network
        via = f" (via [mirrors]: {mirror.url})" if mirror.fetch_url != mirror.url else ""
        raise InputError(
            f"{mirror.fetch_url}{via} has no commit {sha}",
            hint="check the commit in deps.toml (a full SHA of a commit the repository or its mirror contains)",
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
