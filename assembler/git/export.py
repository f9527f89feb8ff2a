"""Write a checkout's commits back to patches/<dep>/ with low churn (gbp-pq style).

A commit that came from a patch file and did not change keeps that file byte for byte; a
changed commit keeps its file name; only new commits get new names. The whole directory is
staged and swapped in one step, so patches/ is never half-written.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from assembler.errors import ConflictError, InputError
from assembler.fsutil import ignored_dir, remove_stale, replace_dir
from assembler.git.process import WorkTree
from assembler.git.reproducible import END_OF_OPTIONS, operation_in
from assembler.git.state import CheckoutState, CheckoutStatus, read_head, series_digest
from assembler.git.sync import refuse_during_rebase
from assembler.manifest import Dependency, load_manifest
from assembler.series.headers import parse_patch_header
from assembler.series.seriesfile import render_series
from assembler.workspace import Workspace, locked

FORMAT_PATCH_ARGS = ("--no-signature", "--zero-commit", "--no-numbered", "--full-index")
# .assemble/export-PID-XXXX: the staging directory of an export by process PID.
EXPORT_STAGING_RE = re.compile(r"^export-(?P<pid>\d+)-")


@dataclass
class ExportResult:
    dep: str
    written: list[str]  # new or rewritten patch files
    unchanged: list[str]
    removed: list[str]
    uncommitted: list[str]  # edits left in the checkout, not exported

    @property
    def changed(self) -> bool:
        return bool(self.written or self.removed)


def format_patches(tree: WorkTree, base: str, head: str, out: Path) -> list[Path]:
    """``git format-patch`` of base..head in order, with the stable options we always use."""
    names = tree.out("format-patch", *FORMAT_PATCH_ARGS, "-o", str(out), END_OF_OPTIONS, f"{base}..{head}")
    return [Path(line) for line in names.splitlines() if line]


@locked
def export_deps(workspace: Workspace, names: list[str]) -> list[ExportResult]:
    """`assemble export DEP...`: each named checkout's commits to its patches/ (and deps.toml)."""
    deps = workspace.manifest.select(names)
    refuse_during_rebase(workspace, deps)
    results = []
    for dep in deps:
        results.append(export(workspace, dep))
        workspace.reload()
    return results


@locked
def export(workspace: Workspace, dep: Dependency) -> ExportResult:
    path = workspace.fork_path(dep)
    state = CheckoutState.load(path) if path.exists() else None
    if state is None:
        raise InputError(f"{path} is not a checkout made by assemble", hint=f"run `assemble checkout {dep.name}` first")
    tree = WorkTree(path)  # the state file lies in its .git
    operation = operation_in(tree.git_dir)
    if operation:
        raise ConflictError(f"{path} is stopped in a git {operation}",
                            hint=f"finish it (git {operation} --continue) or abort it, then export")
    head = read_head(path)
    if state.status == CheckoutStatus.APPLYING:
        raise InputError(f"the checkout of {dep.name} was interrupted",
                         hint=f"re-run `assemble checkout {dep.name}` first")
    if state.status == CheckoutStatus.STOPPED and head == state.base and dep.series:
        raise InputError(
            f"{path}: the series was aborted (HEAD is the pinned commit); exporting would delete every patch",
            hint=f"fix the patch that failed and re-run `assemble checkout {dep.name}`",
        )
    listed = tree.out("rev-list", "--reverse", "--topo-order", "--parents", END_OF_OPTIONS,
                      f"{state.base}..{head}").splitlines()
    if any(len(line.split()) > 2 for line in listed):
        raise InputError(f"{path}: the branch has merge commits since {state.base[:12]}",
                         hint="linearise it (git rebase) before exporting")
    commits = [line.split()[0] for line in listed]
    if tree.run("merge-base", "--is-ancestor", END_OF_OPTIONS, state.base, head, check=False).returncode != 0:
        raise InputError(
            f"{path}: HEAD is not based on the pinned commit {state.base[:12]}",
            hint=f"use `assemble rebase {dep.name}` to move the base",
        )
    empty = _empty_commit(tree, state.base, commits)
    if empty is not None:
        summary = tree.out("log", "-1", "--format=%s", END_OF_OPTIONS, empty)
        raise InputError(
            f"{path}: commit {empty[:12]} ({summary}) changes nothing; its patch would be empty",
            hint=f"drop it (git -C {path} rebase -i {state.base[:12]}) or give it a change, then export again",
        )

    previous_by_commit = dict(state.applied)
    old_names = list(dep.series)
    # A rewritten commit (amend, rebase -i, a resolved conflict) keeps its author and author
    # date, so those find its old file name even when its subject changed; the subject is the
    # fallback for commits re-created from scratch.
    old_headers = [parse_patch_header(dep.patches_dir / n) for n in old_names]
    old_identities = {(h.author, h.date): h.file for h in old_headers}
    old_subjects = {h.subject: h.file for h in old_headers}
    used_numbers = [int(m.group(1)) for n in old_names if (m := re.match(r"^(\d+)-", n))]
    next_number = max(used_numbers, default=0) + 1

    remove_stale(ignored_dir(workspace.state_dir), EXPORT_STAGING_RE)  # left by an export that was killed
    with tempfile.TemporaryDirectory(dir=workspace.state_dir, prefix=f"export-{os.getpid()}-") as tmp_name:
        tmp = Path(tmp_name)
        generated = format_patches(tree, state.base, head, tmp / "generated")
        staged = tmp / "staged"
        staged.mkdir()
        if dep.patches_dir.exists():
            for extra in dep.patches_dir.iterdir():
                if extra.name != "series" and not extra.name.endswith(".patch"):
                    _copy(extra, staged / extra.name)
        names, written, unchanged = [], [], []
        taken: set[str] = set()
        for commit, generated_file in zip(commits, generated, strict=True):
            known = previous_by_commit.get(commit)
            if known and known in old_names and known not in taken:
                shutil.copy2(dep.patches_dir / known, staged / known)
                names.append(known)
                unchanged.append(known)
                taken.add(known)
                continue
            header = parse_patch_header(generated_file)
            name = old_identities.get((header.author, header.date))
            if name is None or name in taken:
                name = old_subjects.get(header.subject)
            if name is None or name in taken:
                name = f"{next_number:04d}-{generated_file.name.split('-', 1)[1]}"
                next_number += 1
            target = dep.patches_dir / name
            if target.exists() and target.read_bytes() == generated_file.read_bytes():
                shutil.copy2(target, staged / name)
                unchanged.append(name)
            else:
                shutil.copyfile(generated_file, staged / name)
                written.append(name)
            names.append(name)
            taken.add(name)
        previous_series = (dep.patches_dir / "series").read_text() if (dep.patches_dir / "series").exists() else None
        (staged / "series").write_text(render_series(names, previous_series))
        removed = [n for n in old_names if n not in taken]
        if written or removed or names != old_names or not dep.patches_dir.exists():
            dep.patches_dir.parent.mkdir(parents=True, exist_ok=True)
            replace_dir(staged, dep.patches_dir)

    refreshed = load_manifest(workspace.manifest_path).deps[dep.name]
    state.applied = dict(zip(commits, names, strict=True))
    state.head = head
    state.series_digest = series_digest(refreshed)
    state.status = CheckoutStatus.READY
    state.save(path)
    return ExportResult(dep.name, written, unchanged, removed, tree.dirty())


def _copy(source: Path, target: Path) -> None:
    """Carry a non-patch entry of patches/DEP/ over; a symbolic link stays a link (following
    one could copy a whole file system into the series)."""
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
    elif source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target)


def _empty_commit(tree: WorkTree, base: str, commits: list[str]) -> str | None:
    """The first of ``commits`` (a linear history on ``base``) that changes no file: its patch
    would be empty, and the next checkout would fail on it and blame it wrongly."""
    if not commits:
        return None
    revs = (base, *commits)  # full SHAs (rev-list's output, the checkout state), never options
    assert all(re.fullmatch(r"[0-9a-f]{40,64}", rev) for rev in revs), revs
    trees = tree.out("rev-parse", *(f"{rev}^{{tree}}" for rev in revs)).split()
    return next((commit for commit, before, after in zip(commits, trees, trees[1:], strict=False) if before == after),
                None)
