"""Writing a commit beside a checkout's branch: a commit like another (its author, date and
message, plus trailers), as `assemble rebase` makes a resolution or adds a DEP-3 trailer, so
a later replay reproduces it exactly. The commit object is read and written here only."""

from __future__ import annotations

from collections.abc import Sequence

from assembler.git.process import END_OF_OPTIONS, WorkTree


def add_trailers(tree: WorkTree, message: str, trailers: Sequence[str]) -> str:
    """``message`` with ``trailers`` (``Forwarded:`` replaces the one there, others are added
    unless the same line is there), by ``git interpret-trailers``."""
    args = [arg for t in trailers
            for arg in ("--if-exists", "replace" if t.startswith("Forwarded:") else "addIfDifferent",
                                              "--trailer", t)]
    return tree.run("interpret-trailers", *args, input=message).stdout


def commit_like(tree: WorkTree, tree_sha: str, parent: str, original: str, trailers: Sequence[str] = ()) -> str:
    """A commit of ``tree_sha`` on ``parent`` with ``original``'s author, date and message
    (plus ``trailers``, see add_trailers); the committer is the layer's fixed one, dated as
    the author."""
    headers, _, message = tree.run("cat-file", "commit", END_OF_OPTIONS, original).stdout.partition("\n\n")
    if trailers:
        message = add_trailers(tree, message, trailers)
    author = next(line[len("author "):] for line in headers.splitlines() if line.startswith("author "))
    ident, _, when = author.rpartition(" ")
    ident, _, stamp = ident.rpartition(" ")
    name, _, email = ident.partition(" <")
    date = f"{stamp} {when}"
    env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email.rstrip(">"), "GIT_AUTHOR_DATE": date,
           "GIT_COMMITTER_DATE": date}
    return tree.run("commit-tree", tree_sha, "-p", parent, env=env, input=message).stdout.strip()


def commit_paths(tree: WorkTree, paths: Sequence[str], message: Sequence[str], env: dict[str, str]) -> None:
    """Stage ``paths`` and commit them with ``message`` (one ``-m`` per paragraph), hooks off:
    a generated step of `assemble migrate`. On failure the paths are unstaged again (their
    files are the caller's to restore) and the error is raised."""
    from assembler.errors import AssembleError

    try:
        tree.run("add", "--", *paths)
        tree.run("commit", "--quiet", "--no-verify", *(arg for part in message for arg in ("-m", part)), env=env)
    except AssembleError:
        tree.run("reset", "--quiet", "--", *paths, check=False)
        raise


def reword_head(tree: WorkTree, message: Sequence[str], env: dict[str, str]) -> str:
    """HEAD's message replaced by ``message`` (its tree unchanged); the new HEAD's SHA."""
    tree.run("commit", "--quiet", "--amend", "--no-verify", *(arg for part in message for arg in ("-m", part)), env=env)
    return tree.head()


def head_diff(tree: WorkTree) -> str:
    """HEAD's own diff (no header): what its commit changed."""
    return tree.out("show", "--format=", "HEAD")
