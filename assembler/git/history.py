"""Reading history: commits as records framed by position, their subjects, diffs and
patch-ids, counts between revisions, and the files a commit holds. The command lines and
the parsing of what git prints live here, so `patches`, `rebase` and `status` read commits
without building a git command of their own."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from assembler.errors import InputError
from assembler.git.process import DIFF_CONFIG, END_OF_OPTIONS, SOUND_REPO_HINT, GitView, WorkTree, object_id

# One record per commit, read with ``git log -z --raw``: six fixed NUL-terminated fields, then
# one ":<modes> <blobs> <status>" entry and one path per file it changes. git prints a commit's
# fields as C strings (a NUL in a message ends it), so no field can hold a NUL: the framing is
# by position, and nothing a message says can start a record of its own.
META_FORMAT = "%H%x00%P%x00%an <%ae>%x00%aD%x00%s%x00%B"
_META_FIELDS = 6
_RAW_ENTRY = re.compile(r"\n?:[0-7]{6} [0-7]{6} [0-9a-f]{40,64} [0-9a-f]{40,64} [A-Z][0-9]*")
# Diffs as ``git format-patch`` writes them, so patch-ids and applies agree with the files.
DIFF_ARGS = ("log", "-p", "--binary", "--full-index", "--no-renames", "--no-color", "--no-ext-diff")


class LoggedCommit(NamedTuple):
    """One commit as ``log_records`` read it; every name in it is a checked full SHA."""

    sha: str
    parents: tuple[str, ...]
    author: str  # "Name <email>"
    date: str  # RFC 2822, as format-patch writes it
    subject: str
    body: str  # the whole message
    files: tuple[str, ...]  # the paths it changes, in git's order, each once


def _tokens(output: bytes) -> list[str]:
    tokens = output.decode(errors="replace").split("\0")
    if tokens and tokens[-1] in ("", "\n"):
        tokens.pop()
    return tokens


def _log_records(view: GitView, options: Sequence[str], revs: Sequence[str]) -> list[LoggedCommit]:
    """The commits ``git log OPTIONS REVS`` lists, from one ``git log -z --raw``."""
    output = view.run(*DIFF_CONFIG, "log", "-z", "--raw", "--no-abbrev", "--no-renames", f"--format={META_FORMAT}",
                      *options, END_OF_OPTIONS, *revs).stdout
    tokens = _tokens(output)
    where = f"{view.where}: git log"
    commits = []
    at = 0
    while at < len(tokens):
        if at + _META_FIELDS > len(tokens):
            raise InputError(f"{where}: a commit record ends early", hint=SOUND_REPO_HINT)
        sha, parents, author, date, subject, body = tokens[at:at + _META_FIELDS]
        object_id(sha, where)
        parent_ids = tuple(object_id(parent, where) for parent in parents.split(" ") if parent)
        at += _META_FIELDS
        files: list[str] = []
        while at < len(tokens) and _RAW_ENTRY.fullmatch(tokens[at]):
            if at + 1 >= len(tokens):
                raise InputError(f"{where}: a changed file without a path", hint=SOUND_REPO_HINT)
            files.append(tokens[at + 1])
            at += 2
        commits.append(LoggedCommit(sha, parent_ids, author, date, subject, body, tuple(dict.fromkeys(files))))
    return commits


def commits_from(view: GitView, head: str, exclude: Sequence[str]) -> list[LoggedCommit]:
    """Non-merge commits reachable from ``head`` and not from ``exclude``, oldest first."""
    return _log_records(view, ("--reverse", "--topo-order", "--no-merges"), (head, *(f"^{sha}" for sha in exclude)))


def commits_by_sha(view: GitView, shas: Sequence[str]) -> list[LoggedCommit]:
    """The given commits, in the given order."""
    return _log_records(view, ("--no-walk=unsorted",), shas) if shas else []


def _logged_subjects(view: GitView, *args: str, mark: bool = False) -> list[tuple[str, str, str]]:
    """(``--cherry-mark``'s mark or "", full SHA, subject) of each commit ``git log ARGS``
    lists, read with ``-z`` in three fields: a subject may hold any character but NUL (a
    carriage return or U+2028, which str.splitlines would split on), and every SHA is checked
    before it is used as a revision."""
    tokens = _tokens(view.run("log", "-z", f"--format={'%m' if mark else ''}%x00%H%x00%s", *args).stdout)
    if len(tokens) % 3:
        raise InputError(f"{view.where}: git log: a commit record ends early", hint=SOUND_REPO_HINT)
    where = f"{view.where}: git log"
    return [(tokens[i].lstrip("\n"), object_id(tokens[i + 1], where), tokens[i + 2]) for i in range(0, len(tokens), 3)]


def subjects(view: GitView, revs: Sequence[str]) -> list[tuple[str, str]]:
    """(full SHA, subject) of each commit ``revs`` names (abbreviated names allowed), in order."""
    return [(sha, text) for _, sha, text in _logged_subjects(view, "--no-walk=unsorted", END_OF_OPTIONS, *revs)]


def first_parent_line(view: GitView, since: str, tip: str) -> list[tuple[str, str]]:
    """(SHA, subject) of the commits on ``tip``'s first-parent line after ``since``, oldest first."""
    return [(sha, text) for _, sha,
            text in _logged_subjects(view, "--first-parent", "--reverse", END_OF_OPTIONS, tip, f"^{since}")]


def cherry_marks(view: GitView, left: str, right: str) -> list[tuple[str, str, str]]:
    """(mark, SHA, subject) of the non-merge commits of ``left...right``, newest first, the mark
    ``=`` on a commit whose change the other side has too (git's ``--cherry-mark``)."""
    return _logged_subjects(view, "--cherry-mark", "--no-merges", END_OF_OPTIONS, f"{left}...{right}", mark=True)


def commit_diffs(view: GitView, shas: Sequence[str]) -> dict[str, bytes]:
    """Each commit's diff as format-patch writes it (from the first "diff --git" line on), in
    one ``git log -p``, split at the commit lines already known."""
    if not shas:
        return {}
    text = view.run(*DIFF_CONFIG, *DIFF_ARGS, "--format=commit %H", "--no-walk=unsorted", END_OF_OPTIONS, *shas).stdout
    bounds: list[int] = []
    for sha in shas:
        marker = f"commit {sha}\n".encode()
        first = not bounds and text.startswith(marker)
        bounds.append(0 if first else text.index(b"\n" + marker, bounds[-1] if bounds else 0) + 1)
    diffs = {}
    for number, sha in enumerate(shas):
        end = bounds[number + 1] if number + 1 < len(bounds) else len(text)
        diffs[sha] = text[bounds[number] + len(f"commit {sha}\n") : end].lstrip(b"\n")
    return diffs


def diff_patch_ids(view: GitView, diffs: Sequence[bytes | None]) -> dict[str, int]:
    """patch-id -> index in ``diffs`` (None and empty ones skipped), from one ``git patch-id``."""
    stream = b"".join(b"commit %040x\n\n" % (i + 1) + diff for i, diff in enumerate(diffs) if diff)
    if not stream:
        return {}
    ids = {}
    for line in view.out("patch-id", "--stable", input=stream).splitlines():
        pid, number = line.split()
        ids[pid] = int(number, 16) - 1
    return ids


def log_patch_ids(view: GitView, options: Sequence[str], revisions: Sequence[str],
                  paths: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(commit, patch-id) for the non-merge commits ``revisions`` name, newest first, from
    one ``git log -p | git patch-id --stable`` pipe; ``paths`` limits the diffs to those files
    (a commit whose diff there equals a patch carries it, whatever else it changes)."""
    output = view.pipe(
        [*DIFF_CONFIG, *DIFF_ARGS, "--no-merges", "--format=commit %H", *options, END_OF_OPTIONS, *revisions,
         *(("--", *paths) if paths else ())],
        ["patch-id", "--stable"],
    )
    pairs = []
    for line in output.splitlines():
        pid, sha = line.split()
        pairs.append((sha, pid))
    return pairs


def patch_ids_between(view: GitView, since: str, target: str, paths: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(commit, patch-id) of the non-merge commits of ``since..target``, newest first."""
    return log_patch_ids(view, (), (target, f"^{since}"), paths)


def patch_ids_of(view: GitView, shas: Sequence[str]) -> list[tuple[str, str]]:
    """(commit, patch-id) of the given non-merge commits."""
    return log_patch_ids(view, ("--no-walk=unsorted",), shas)


def left_right_counts(view: GitView, left: str, right: str) -> tuple[int, int]:
    """(commits only ``left`` has, commits only ``right`` has): one ``rev-list`` walk."""
    first, second = view.out("rev-list", "--left-right", "--count", END_OF_OPTIONS, f"{left}...{right}").split()
    return int(first), int(second)


def count_since(tree: WorkTree, base: str) -> int | None:
    """Commits from ``base`` to HEAD; None when git cannot say (a base the checkout lacks)."""
    counted = tree.run("rev-list", "--count", END_OF_OPTIONS, f"{base}..HEAD", check=False)
    return int(counted.stdout) if counted.returncode == 0 and counted.stdout.strip().isdigit() else None


def subject(view: GitView, rev: str) -> str:
    """The subject line of the commit ``rev`` names."""
    return view.out("log", "-1", "--format=%s", END_OF_OPTIONS, rev)


def commits_between(tree: WorkTree, head: str, base: str) -> list[tuple[str, str]]:
    """(SHA, subject) of the commits reachable from ``head`` and not ``base``, oldest first;
    a failure (a damaged checkout, a base it lacks) is GitFailed, never an empty list."""
    listed = tree.run("log", "--reverse", "--format=%H%x00%s", END_OF_OPTIONS, head, f"^{base}").stdout
    return [(sha, text) for sha, _, text in (line.partition("\0") for line in listed.splitlines() if "\0" in line)]


def files_at(view: GitView, commit: str, names: Sequence[str]) -> dict[str, str]:
    """The text of each of ``names`` that ``commit`` holds as a file, in one ``git cat-file --batch``."""
    output = view.run("cat-file", "--batch", input="".join(f"{commit}:{name}\n" for name in names).encode()).stdout
    found, position = {}, 0
    for name in names:
        end = output.index(b"\n", position)
        header = output[position:end].split()
        position = end + 1
        if len(header) == 3 and header[1] == b"blob":
            size = int(header[2])
            found[name] = output[position:position + size].decode(errors="replace")
            position += size + 1
    return found


def tracked(tree: WorkTree, pattern: str) -> list[str]:
    """The tracked paths matching a pathspec glob (``*name*.h``), as git spells them."""
    return [name for name in tree.run("ls-files", "-z", "--", pattern).stdout.split("\0") if name]


def blame_lines(tree: WorkTree, rel: str) -> dict[int, tuple[str, int]]:
    """``git blame --porcelain HEAD`` of one file: its line -> (the commit that wrote it, the
    line there); empty when the file is not in HEAD."""
    done = tree.run("blame", "--porcelain", "HEAD", "--", rel, check=False)
    found: dict[int, tuple[str, int]] = {}
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        match = re.match(r"^([0-9a-f]{40}) (\d+) (\d+)(?: \d+)?$", line)
        if match:
            found[int(match[3])] = (match[1], int(match[2]))
    return found
