"""The patches a dependency carries, as both text (for patch-id and ``git apply``) and commits
(for in-memory cherry-picks): the series files, or a fork's own commits."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from assembler.git.history import LoggedCommit, commit_diffs, commits_by_sha, commits_from
from assembler.git.process import GitView, WorkTree
from assembler.git.reproducible import operation_in
from assembler.git.scratch import Scratch
from assembler.git.state import CheckoutState, pinned_state
from assembler.manifest import Dependency
from assembler.series.headers import DEP3_FIELDS, PatchHeader, parse_patch_header
from assembler.workspace import Workspace

_TRAILER_RE = re.compile(rf"^(?P<key>{'|'.join(DEP3_FIELDS)}):\s*(?P<value>.*)$")
_DIFF_START = re.compile(rb"^diff --git ", re.MULTILINE)
@dataclass
class Patch:
    """One carried change. ``commit``/``parent`` are set once it exists as a commit somewhere
    the scratch repository can see (a checkout, a fork mirror, or built in the scratch)."""

    header: PatchHeader
    diff: bytes | None  # from the first "diff --git" line on; None until load_diffs
    commit: str | None = None
    parent: str | None = None
    path: Path | None = None  # a file holding the patch, for git apply
    files: tuple[str, ...] = field(default=())
    key: str = ""  # author, date and message digest: recognises a commit after it is replayed

    @property
    def name(self) -> str:
        return self.header.file

    @property
    def subject(self) -> str:
        return self.header.subject

    def patch_file(self, scratch: Scratch) -> Path:
        """A file ``git apply`` can read (written into the scratch directory on first use)."""
        if self.path is None:
            if self.diff is None:
                load_diffs(scratch, [self])
            self.path = scratch.tmp / f"{(self.commit or self.name)[:40]}.diff"
            self.path.write_bytes(self.diff or b"")
        return self.path


def trailers(message: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in message.splitlines():
        match = _TRAILER_RE.match(line.strip())
        if match:
            fields[match.group("key")] = match.group("value").strip()
    return fields


def _diff_files(diff: bytes) -> tuple[str, ...]:
    names: list[str] = []
    for line in diff.decode(errors="replace").splitlines():
        if line.startswith("diff --git a/"):
            left, _, right = line[len("diff --git a/"):].partition(" b/")
            names.extend(dict.fromkeys((left, right)))
    return tuple(dict.fromkeys(names))


def from_series(dep: Dependency) -> list[Patch]:
    """The series files in order (no commits yet)."""
    patches = []
    for name in dep.series:
        path = dep.patches_dir / name
        data = path.read_bytes()
        match = _DIFF_START.search(data)
        diff = data[match.start():] if match else b""
        patches.append(Patch(header=parse_patch_header(path), diff=diff, path=path, files=_diff_files(diff)))
    return patches


def from_commits(scratch: GitView, head: str, exclude: list[str], names: dict[str, str] | None = None) -> list[Patch]:
    """Non-merge commits reachable from ``head`` and not from ``exclude``, oldest first."""
    return _as_patches(commits_from(scratch, head, exclude), names)


def by_sha(scratch: GitView, shas: Sequence[str], names: dict[str, str] | None = None) -> list[Patch]:
    """The given commits, in the given order."""
    return _as_patches(commits_by_sha(scratch, shas), names)


def _as_patches(commits: list[LoggedCommit], names: dict[str, str] | None) -> list[Patch]:
    """Commits as patches (diffs are loaded later, when needed); a commit named in ``names``
    (commit -> patch file) keeps that name, others get a short SHA."""
    patches = []
    for commit in commits:
        header = PatchHeader(file=(names or {}).get(commit.sha, commit.sha[:12]), subject=commit.subject,
                             author=commit.author, date=commit.date, fields=trailers(commit.body))
        key = hashlib.sha256(f"{commit.author}\0{commit.date}\0{commit.body}".encode()).hexdigest()
        patches.append(Patch(header=header, diff=None, commit=commit.sha,
                             parent=commit.parents[0] if commit.parents else None,
                             files=commit.files, key=key))
    return patches


def load_diffs(scratch: GitView, patches: Sequence[Patch]) -> None:
    """Fill in the diffs of commit patches that lack one, in one ``git log -p``."""
    missing = [p for p in patches if p.diff is None and p.commit]
    diffs = commit_diffs(scratch, [p.commit or "" for p in missing])
    for patch in missing:
        patch.diff = diffs[patch.commit or ""]


def checkout_in_sync(workspace: Workspace, dep: Dependency) -> CheckoutState | None:
    """The checkout's state when forks/<dep> holds exactly the pinned commit plus the series as
    commits (so those commits can stand for the patch files); None otherwise."""
    path = workspace.fork_path(dep)
    state = pinned_state(path, dep)
    if state is None or state.head is None or sorted(state.applied.values()) != sorted(dep.series):
        return None
    tree = WorkTree(path)  # plain git processes: `patches --offline` starts without GitPython
    if operation_in(tree.git_dir) or tree.rev("HEAD") != state.head or tree.dirty():
        return None
    return state


def series_as_commits(scratch: Scratch, patches: list[Patch], base: str) -> str | None:
    """Give each series patch a commit by applying it onto ``base`` in a temporary index; the
    name of the first patch that does not apply, or None."""
    index = scratch.index_of(base, "series")
    parent = base
    for patch in patches:
        path = patch.patch_file(scratch)
        if not scratch.apply(path, index) and not scratch.apply(path, index, "--3way"):
            return patch.name
        patch.parent = parent
        patch.commit = parent = scratch.commit_index(index, parent, patch.subject or patch.name)
    return None
