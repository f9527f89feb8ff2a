"""Crash safety for `assemble rebase`: a journal plus backups, written before anything is
changed, under ``<workspace>/.assemble/rebase/<dep>/``.

The directory appears in one rename, fully written and fsynced, so a rebase killed at any
point finds either no journal (nothing was changed yet) or a complete one: ``--abort`` puts
back deps.toml, patches/<dep>/ and the checkout's branch byte for byte from the backups;
``--continue`` redoes the replay from the journal's plan (replays are deterministic).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from assembler.fsutil import atomic_write, atomic_write_if_changed, replace_dir
from assembler.workspace import Workspace

JOURNAL = "journal.json"


@dataclass
class Pick:
    commit: str
    name: str  # patch file, or a short SHA for a fork's own commit
    subject: str
    key: str  # author, date and message: how the replayed commit is recognised


@dataclass
class Dropped:
    name: str
    subject: str
    how: str  # applied-upstream | patch-id | applies-empty | reverse-applies | resolved-empty
    pick: str  # the commit that was not replayed
    commit: str | None = None  # upstream commit that carries it
    commit_subject: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"file": self.name, "subject": self.subject, "how": self.how, "commit": self.commit,
                "commit_subject": self.commit_subject}


@dataclass
class Journal:
    dep: str
    phase: str  # replaying -> (stopped -> replaying)* -> replayed -> exported
    branch: str | None  # the checkout's branch before (None: detached HEAD)
    old_head: str
    old_base: str
    replay_base: str  # commits after this one are replayed
    onto: str
    onto_label: str
    tip: str
    url: str  # the repository followed
    crossed: int  # upstream commits between the old base and onto
    manifest: dict[str, str | None]  # deps.toml values on success
    planned: list[Pick]  # the picks as first planned (horizon and reports use these)
    picks: list[Pick]  # what the next replay picks (conflict resolutions replace entries)
    dropped: list[Dropped] = field(default_factory=list)
    stopped: dict[str, object] | None = None
    result_head: str | None = None
    export: dict[str, list[str]] | None = None

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Journal:
        data = dict(data)
        data["planned"] = [Pick(**p) for p in data["planned"]]  # type: ignore[union-attr]
        data["picks"] = [Pick(**p) for p in data["picks"]]  # type: ignore[union-attr]
        data["dropped"] = [Dropped(**d) for d in data["dropped"]]  # type: ignore[union-attr]
        return cls(**data)  # type: ignore[arg-type]


def rebase_dir(workspace: Workspace) -> Path:
    return workspace.state_dir / "rebase"


def journal_dir(workspace: Workspace, name: str) -> Path:
    return rebase_dir(workspace) / name


def load(workspace: Workspace, name: str) -> Journal | None:
    path = journal_dir(workspace, name) / JOURNAL
    if not path.is_file():
        return None
    return Journal.from_json(json.loads(path.read_text(encoding="utf-8")))


def pending(workspace: Workspace) -> list[str]:
    """Dependencies with a rebase in progress."""
    root = rebase_dir(workspace)
    return sorted(p.parent.name for p in root.glob(f"*/{JOURNAL}")) if root.is_dir() else []


def save(workspace: Workspace, journal: Journal) -> None:
    atomic_write(journal_dir(workspace, journal.dep) / JOURNAL, json.dumps(asdict(journal), indent=1) + "\n")


def _copy_synced(source: Path, target: Path) -> None:
    shutil.copy2(source, target)
    with target.open("rb") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def begin(workspace: Workspace, journal: Journal, patches_dir: Path, checkout_files: dict[str, Path]) -> None:
    """Back up deps.toml, patches/<dep>/ and the named checkout files, then publish the
    journal, all in one rename. Leftovers of an earlier, interrupted ``begin`` are discarded."""
    root = rebase_dir(workspace)
    root.mkdir(parents=True, exist_ok=True)
    final = journal_dir(workspace, journal.dep)
    staging = root / f".{journal.dep}.new"
    shutil.rmtree(staging, ignore_errors=True)
    backup = staging / "backup"
    backup.mkdir(parents=True)
    _copy_synced(workspace.manifest_path, backup / "deps.toml")
    if patches_dir.is_dir():
        (backup / "patches").mkdir()
        for item in sorted(patches_dir.rglob("*")):
            target = backup / "patches" / item.relative_to(patches_dir)
            if item.is_dir():
                target.mkdir()
            else:
                _copy_synced(item, target)
        shutil.copystat(patches_dir, backup / "patches")
    (backup / "checkout").mkdir()
    for label, path in checkout_files.items():
        if path.is_file():
            _copy_synced(path, backup / "checkout" / label)
    atomic_write(staging / JOURNAL, json.dumps(asdict(journal), indent=1) + "\n")
    _fsync_dir(backup)
    os.replace(staging, final)
    _fsync_dir(root)


def restore_checkout_file(workspace: Workspace, name: str, label: str, path: Path) -> None:
    """Put back a checkout file saved by ``begin`` (or remove it if it did not exist)."""
    saved = journal_dir(workspace, name) / "backup" / "checkout" / label
    if saved.is_file():
        atomic_write_if_changed(path, saved.read_bytes())
    else:
        path.unlink(missing_ok=True)


def restore_files(workspace: Workspace, name: str, patches_dir: Path) -> None:
    """deps.toml and patches/<dep>/ exactly as they were, contents and modification times."""
    backup = journal_dir(workspace, name) / "backup"
    saved = backup / "deps.toml"
    if workspace.manifest_path.read_bytes() != saved.read_bytes():
        atomic_write(workspace.manifest_path, saved.read_bytes())
        shutil.copystat(saved, workspace.manifest_path)
    saved_patches = backup / "patches"
    if not saved_patches.is_dir():
        if patches_dir.exists():
            shutil.rmtree(patches_dir)
        return
    if patches_dir.is_dir() and _snapshot(patches_dir) == _snapshot(saved_patches):
        return
    staging = journal_dir(workspace, name) / "restore"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(saved_patches, staging, copy_function=shutil.copy2)
    patches_dir.parent.mkdir(parents=True, exist_ok=True)
    replace_dir(staging, patches_dir)


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def finish(workspace: Workspace, name: str) -> None:
    """Retire the journal in one rename (then delete it), so it is never half-removed."""
    path = journal_dir(workspace, name)
    if not path.exists():
        return
    retired = rebase_dir(workspace) / f".{name}.done"
    shutil.rmtree(retired, ignore_errors=True)
    os.replace(path, retired)
    shutil.rmtree(retired)


@contextmanager
def running(workspace: Workspace, name: str) -> Iterator[int]:
    """An flock the rebase's git processes inherit: when assemble itself is killed, a git
    child it started may still be running, and this makes the next --continue or --abort wait
    for it instead of racing it. Yields the descriptor to pass to those children."""
    root = rebase_dir(workspace)
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / f"{name}.running", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)
