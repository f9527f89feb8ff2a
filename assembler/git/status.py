"""What ``git status`` says about a checkout's working tree: its branch and HEAD, its edits
as `git status --short` shows them, and what a build takes from an edited tree. The porcelain
formats are read here only (`deps`' one-word condition is `condition.py`'s)."""

from __future__ import annotations

from pathlib import Path

from assembler.git.process import WorkTree


def branch_and_head(tree: WorkTree) -> tuple[str | None, str | None]:
    """(the branch checked out, HEAD's commit): None for a detached HEAD, or a branch with no commit."""
    lines = tree.run("status", "--porcelain=v2", "--branch", "--untracked-files=no").stdout.splitlines()
    head = next((line.split()[2] for line in lines if line.startswith("# branch.oid ")), None)
    branch = next((line.split(" ", 2)[2] for line in lines if line.startswith("# branch.head ")), None)
    return (None if branch == "(detached)" else branch), (None if head == "(initial)" else head)


def edits(tree: WorkTree) -> list[tuple[str, str]]:
    """(status code, path) of each uncommitted edit as `git status --short` shows it
    (untracked files included; a rename or copy by its new name)."""
    output = tree.run("status", "--porcelain=v1", "-z", "--untracked-files=normal").stdout
    found = []
    entries = iter(output.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        code, name = entry[:2], entry[3:]
        if code[0] in "RC":  # a rename or copy: the next entry is the old name
            next(entries, None)
        found.append((code.strip(), name))
    return found


def working_tree(checkout: Path, hint: str) -> tuple[str, tuple[str, list[str]] | None]:
    """(HEAD, None) for a clean checkout, else (HEAD, (``git diff HEAD --binary``, the untracked
    files' paths, sorted)): what a build of the tree as it is depends on. ``hint``: what to do
    when git fails (GitFailed: exit 2, or 9 when the machine refused)."""
    tree = WorkTree(checkout, hint=hint)
    head = tree.out("rev-parse", "HEAD")
    status = tree.run("status", "--porcelain", "--untracked-files=all").stdout
    if not status.strip():
        return head, None
    untracked = sorted(line[3:] for line in status.splitlines() if line.startswith("??"))
    return head, (tree.run("diff", "HEAD", "--binary").stdout, untracked)
