"""Deterministic git invocation: patches applied by assemble get the same commit SHAs on
every machine, whatever the user's git configuration says."""

from __future__ import annotations

import os
import re
from pathlib import Path

from assembler.manifest.refname import refname_problem

# Commits that assemble creates while applying a series: fixed committer, committer date =
# author date (git am --committer-date-is-author-date), so SHAs depend only on the inputs.
COMMITTER_ENV = {
    "GIT_COMMITTER_NAME": "assemble",
    "GIT_COMMITTER_EMAIL": "assemble@localhost",
}
QUIET_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "GIT_EDITOR": "true", "GIT_MERGE_AUTOEDIT": "no"}
# What produces commits and patch files must not see the user's global or system settings
# (am.messageid, format.signOff, diff.algorithm, ...) nor run their hooks. Fetches keep the
# user's configuration (proxies, credential helpers), so mirrors use QUIET_ENV alone.
ISOLATED_CONFIG_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": os.devnull,
}
GIT_ENV = {**QUIET_ENV, **ISOLATED_CONFIG_ENV}
END_OF_OPTIONS = "--end-of-options"  # git >= 2.24: what follows is a revision or a path, never an option


def operation_in(git_dir: Path) -> str | None:
    """'am', 'rebase', 'merge' or 'cherry-pick' when the checkout whose git directory is
    ``git_dir`` is stopped mid-operation (read from git's session files, no process)."""
    if (git_dir / "rebase-apply").exists():
        return "am" if (git_dir / "rebase-apply" / "applying").exists() else "rebase"
    if (git_dir / "rebase-merge").exists():
        return "rebase"
    if (git_dir / "MERGE_HEAD").exists():
        return "merge"
    if (git_dir / "CHERRY_PICK_HEAD").exists():
        return "cherry-pick"
    return None


def is_full_sha(value: object) -> bool:
    """A full commit SHA (SHA-1 or SHA-256, lower-case hex): what a state file or a journal may
    hold where git is given a commit, so that it can never be read as an option."""
    return isinstance(value, str) and len(value) in (40, 64) and all(c in "0123456789abcdef" for c in value)


def read_ref(git_dir: Path, name: str) -> str | None:
    """The object a ref names, read from its file or packed-refs (no git process, no GitPython),
    following symbolic refs; None when there is no such ref (or the name is not a plain ref)."""
    for _ in range(5):  # symbolic refs chain at most this deep
        if not name.startswith("refs/") or refname_problem(name) is not None:
            return None
        try:
            text: str | None = (git_dir / name).read_text(encoding="utf-8").strip()
        except OSError:  # absent (or a directory): perhaps packed
            text = _packed_ref(git_dir, name)
        if text is None:
            return None
        if not text.startswith("ref: "):
            return text if is_full_sha(text) else None
        name = text.removeprefix("ref: ").strip()
    return None


def refs_under(git_dir: Path, prefix: str) -> dict[str, str] | None:
    """Every ref whose name starts with ``prefix`` (``refs/...``, ending in ``/``) and the
    object it names, from packed-refs and the loose ref files as git's files backend keeps
    them (no git process); None when they cannot be read that way (a reftable repository, an
    unreadable file): the caller then asks git or does without."""
    if not prefix.startswith("refs/") or not prefix.endswith("/") or (git_dir / "reftable").exists():
        return None
    found: dict[str, str] = {}
    try:
        packed = (git_dir / "packed-refs").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        packed = []
    except OSError:
        return None
    for line in packed:
        sha, _, ref = line.partition(" ")
        if ref.startswith(prefix) and not line.startswith(("#", "^")):
            found[ref] = sha
    top = git_dir / prefix
    try:
        for directory, _, files in os.walk(top, onerror=_raise):
            for name in files:
                ref = Path(directory, name).relative_to(git_dir).as_posix()
                if name.endswith(".lock"):
                    continue
                found[ref] = (git_dir / ref).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        pass
    except OSError:
        return None
    return dict(sorted(found.items()))


def _raise(error: OSError) -> None:
    if not isinstance(error, FileNotFoundError):
        raise error


def _packed_ref(git_dir: Path, name: str) -> str | None:
    try:
        lines = (git_dir / "packed-refs").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        sha, _, ref = line.partition(" ")
        if ref == name and not line.startswith(("#", "^")):
            return sha
    return None


# What git says when a repository lacks an object its refs need (a damaged or partial copy, a
# checkout whose borrowed objects are gone): "unable to read X", "missing tree X", "bad object X", ...
MISSING_OBJECT = re.compile(
    r"(?:unable to read(?: tree| sha1 file of \S+)?|could not read|missing (?:blob|tree|commit|tag)(?: "
    r"object)?|bad object|did not receive expected object|invalid object)\s+\(?'?([0-9a-f]{40}(?:[0-9a-f]{24})?)\b",
    re.IGNORECASE)


def missing_object(output: str | bytes | None) -> str | None:
    """The object git said it could not find, from its error output; None when it said no such thing."""
    text = output.decode(errors="replace") if isinstance(output, bytes) else output or ""
    match = MISSING_OBJECT.search(text)
    return match.group(1) if match else None


def git_error_line(output: str | bytes | None, status: int | str | None) -> str:
    """git's first meaningful error line (hints and warnings dropped), for one-line error messages; a
    repository missing objects is said as such, whichever line git put first."""
    text = output.decode(errors="replace") if isinstance(output, bytes) else output or ""
    missing = missing_object(text)
    if missing is not None:
        return f"the mirror is incomplete (missing object {missing})"
    text = text.strip().replace("stderr: ", "").strip("'\n ")
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("hint:")]
    lines = [line for line in lines if not line.startswith("warning:")] or lines  # a warning is not why it failed
    return lines[0] if lines else f"git exited with {status}"
