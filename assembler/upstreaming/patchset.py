"""The patches a dependency carries, as both text (for patch-id and ``git apply``) and commits
(for in-memory cherry-picks): the series files, or a fork's own commits."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from assembler.errors import InputError
from assembler.git.process import DIFF_CONFIG, END_OF_OPTIONS, SOUND_REPO_HINT, GitView, WorkTree, object_id
from assembler.git.reproducible import operation_in
from assembler.git.scratch import Scratch
from assembler.git.state import CheckoutState, pinned_state
from assembler.manifest import Dependency
from assembler.series.headers import DEP3_FIELDS, PatchHeader, parse_patch_header
from assembler.workspace import Workspace

_TRAILER_RE = re.compile(rf"^(?P<key>{'|'.join(DEP3_FIELDS)}):\s*(?P<value>.*)$")
_DIFF_START = re.compile(rb"^diff --git ", re.MULTILINE)
# One record per commit, read with ``git log -z --raw``: six fixed NUL-terminated fields, then
# one ":<modes> <blobs> <status>" entry and one path per file it changes. git prints a commit's
# fields as C strings (a NUL in a message ends it), so no field can hold a NUL: the framing is
# by position, and nothing a message says can start a record of its own.
META_FORMAT = "%H%x00%P%x00%an <%ae>%x00%aD%x00%s%x00%B"
_META_FIELDS = 6
_RAW_ENTRY = re.compile(r"\n?:[0-7]{6} [0-7]{6} [0-9a-f]{40,64} [0-9a-f]{40,64} [A-Z][0-9]*")
# Diffs as ``git format-patch`` writes them, so patch-ids and applies agree with the files.
DIFF_ARGS = ("log", "-p", "--binary", "--full-index", "--no-renames", "--no-color", "--no-ext-diff")


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
    return load_commits(scratch, ("--reverse", "--topo-order", "--no-merges"), (head, *(f"^{sha}" for sha in exclude)), names)


def by_sha(scratch: GitView, shas: Sequence[str], names: dict[str, str] | None = None) -> list[Patch]:
    """The given commits, in the given order."""
    return load_commits(scratch, ("--no-walk=unsorted",), shas, names) if shas else []


def load_commits(scratch: GitView, options: Sequence[str], revs: Sequence[str],
                 names: dict[str, str] | None = None) -> list[Patch]:
    """Commits as patches, from one ``git log`` (diffs are loaded later, when needed); a
    commit named in ``names`` (commit -> patch file) keeps that name, others get a short SHA."""
    output = scratch.run(*DIFF_CONFIG, "log", "-z", "--raw", "--no-abbrev", "--no-renames", f"--format={META_FORMAT}", *options,
                         END_OF_OPTIONS, *revs).stdout
    tokens = output.decode(errors="replace").split("\0")
    if tokens and tokens[-1] in ("", "\n"):
        tokens.pop()
    where = f"{scratch.where}: git log"
    patches = []
    at = 0
    while at < len(tokens):
        if at + _META_FIELDS > len(tokens):
            raise InputError(f"{where}: a commit record ends early", hint=SOUND_REPO_HINT)
        sha, parents, author, date, subject, body = tokens[at:at + _META_FIELDS]
        object_id(sha, where)
        parent_ids = [object_id(parent, where) for parent in parents.split(" ") if parent]
        at += _META_FIELDS
        files: list[str] = []
        while at < len(tokens) and _RAW_ENTRY.fullmatch(tokens[at]):
            if at + 1 >= len(tokens):
                raise InputError(f"{where}: a changed file without a path", hint=SOUND_REPO_HINT)
            files.append(tokens[at + 1])
            at += 2
        header = PatchHeader(file=(names or {}).get(sha, sha[:12]), subject=subject, author=author, date=date, fields=trailers(body))
        key = hashlib.sha256(f"{author}\0{date}\0{body}".encode()).hexdigest()
        patches.append(Patch(header=header, diff=None, commit=sha, parent=parent_ids[0] if parent_ids else None,
                             files=tuple(dict.fromkeys(files)), key=key))
    return patches


def logged_subjects(scratch: GitView, *args: str, mark: bool = False) -> list[tuple[str, str, str]]:
    """(``--cherry-mark``'s mark or "", full SHA, subject) of each commit ``git log ARGS``
    lists, read with ``-z`` in three fields: a subject may hold any character but NUL (a
    carriage return or U+2028, which str.splitlines would split on), and every SHA is checked
    before it is used as a revision."""
    output = scratch.run("log", "-z", f"--format={'%m' if mark else ''}%x00%H%x00%s", *args).stdout
    tokens = output.decode(errors="replace").split("\0")
    if tokens and tokens[-1] in ("", "\n"):
        tokens.pop()
    if len(tokens) % 3:
        raise InputError(f"{scratch.where}: git log: a commit record ends early", hint=SOUND_REPO_HINT)
    where = f"{scratch.where}: git log"
    return [(tokens[i].lstrip("\n"), object_id(tokens[i + 1], where), tokens[i + 2]) for i in range(0, len(tokens), 3)]


def load_diffs(scratch: GitView, patches: Sequence[Patch]) -> None:
    """Fill in the diffs of commit patches that lack one, in one ``git log -p``, split at the
    commit lines already known."""
    missing = [p for p in patches if p.diff is None and p.commit]
    if not missing:
        return
    text = scratch.run(*DIFF_CONFIG, *DIFF_ARGS, "--format=commit %H", "--no-walk=unsorted", END_OF_OPTIONS,
                       *(p.commit or "" for p in missing)).stdout
    bounds: list[int] = []
    for patch in missing:
        marker = f"commit {patch.commit}\n".encode()
        first = not bounds and text.startswith(marker)
        bounds.append(0 if first else text.index(b"\n" + marker, bounds[-1] if bounds else 0) + 1)
    for number, patch in enumerate(missing):
        end = bounds[number + 1] if number + 1 < len(bounds) else len(text)
        patch.diff = text[bounds[number] + len(f"commit {patch.commit}\n") : end].lstrip(b"\n")


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
        tree = scratch.out("write-tree", index=index)
        patch.parent = parent
        patch.commit = parent = scratch.out("commit-tree", tree, "-p", parent, "-m", patch.subject or patch.name)
    return None
