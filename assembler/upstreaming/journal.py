"""Crash safety for `assemble rebase`: a journal plus backups, written before anything is
changed, under ``<workspace>/.assemble/rebase/<dep>/``.

The directory appears in one rename, fully written and fsynced, so a rebase killed at any
point finds either no journal (nothing was changed yet) or a complete one: ``--abort`` puts
back the checkout's branch, and deps.toml and patches/<dep>/ byte for byte from the backups;
``--continue`` redoes the replay from the journal's plan (replays are deterministic).

The rebase writes deps.toml and patches/<dep>/ only at its very end, and the journal records
the digests of what it found there and what it wrote. ``--abort`` puts a file back only when it
is unchanged since the backup or holds exactly what the rebase wrote: an edit the user made
while the rebase was stopped (another dependency's pin, a comment) is kept, with a warning.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from assembler.errors import InputError, NewerStateError
from assembler.fsutil import UnsafeFile, atomic_write, open_state_file, read_regular, refuse_links, replace_dir
from assembler.git.reproducible import is_full_sha
from assembler.workspace import JOURNAL_NAME, Workspace

BACKUP = "backup.tar"
MTIMES = ".mtimes.json"
ABSENT = "absent"  # digest of a file or directory that does not exist
VERSION = 1  # of the journal's format; a journal without "version" is version 1


class Phase(StrEnum):
    """Where a rebase is: replaying -> (stopped -> replaying)* -> replayed -> exported."""

    REPLAYING = "replaying"  # the plan is being replayed (or must be, after a crash)
    STOPPED = "stopped"  # at a conflict, waiting for the user
    REPLAYED = "replayed"  # the fork holds the result; patches/ and deps.toml not yet written
    EXPORTED = "exported"  # patches/ and deps.toml written; only the clean-up is left


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
    how: str  # an upstreaming.verdicts.Evidence: applied-upstream | patch-id | applies-empty | ...
    pick: str  # the commit that was not replayed
    commit: str | None = None  # upstream commit that carries it
    commit_subject: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"file": self.name, "subject": self.subject, "how": self.how, "commit": self.commit,
                "commit_subject": self.commit_subject}


@dataclass
class Stopped:
    """Where a rebase stopped at a conflict."""

    index: int  # of the pick that conflicted, in Journal.picks
    commit: str  # that pick's commit
    head: str  # the fork's HEAD when it stopped (the picks before it, replayed)
    files: list[str]  # conflicted paths


@dataclass
class Journal:
    dep: str
    phase: Phase
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
    stopped: Stopped | None = None
    result_head: str | None = None
    export: dict[str, list[str]] | None = None
    # "deps.toml" / "patches" -> [digest before the rebase wrote it, digest of what it wrote
    # (None while writing)]; see Backup.restorable
    wrote: dict[str, list[str | None]] = field(default_factory=dict)
    # picks that vanished while the user drove git (``git rebase --skip``): dropped only when
    # assemble finds their change in the result, or the user confirms (``--drop NAME``)
    skipped: list[Pick] = field(default_factory=list)
    confirmed: list[str] = field(default_factory=list)  # patch names the user chose to drop
    range_diff: str | None = None  # `git range-diff` of the old series against the new one
    former_source: str | None = None  # the fork the dependency moves off (its commits get Origin:)
    forwarded: dict[str, str] = field(default_factory=dict)  # patch -> pull request found (Forwarded: written)
    version: int = VERSION

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Journal:
        """The journal from its JSON; KeyError, TypeError or ValueError when it does not fit
        (the caller says which file); a newer format is the caller's to refuse first."""
        data = dict(data)
        shas = [data.get(key) for key in ("old_head", "old_base", "replay_base", "onto", "tip")]
        shas += [data["result_head"]] if data.get("result_head") is not None else []
        shas += [p.get("commit") for key in ("planned", "picks", "skipped") for p in data.get(key, [])]
        shas += [d.get("pick") for d in data.get("dropped", [])]
        stopped = data.get("stopped")
        shas += [stopped.get("commit"), stopped.get("head")] if stopped is not None else []
        bad = [sha for sha in shas if not is_full_sha(sha)]
        if bad:
            raise ValueError(f"{bad[0]!r} where a commit SHA belongs")  # it would reach git as an argument
        data["phase"] = Phase(data["phase"])
        data["planned"] = [Pick(**p) for p in data["planned"]]
        data["picks"] = [Pick(**p) for p in data["picks"]]
        data["dropped"] = [Dropped(**d) for d in data["dropped"]]
        data["skipped"] = [Pick(**p) for p in data.get("skipped", [])]
        if data.get("stopped") is not None:
            data["stopped"] = Stopped(**data["stopped"])
        return cls(**data)


def journal_dir(workspace: Workspace, name: str) -> Path:
    return workspace.rebase_dir / name


def undo_dir(workspace: Workspace, name: str) -> Path:
    """Where the journal and backups of the last finished rebase of ``name`` are kept, for
    ``--undo``, until the next rebase of it finishes (or it is undone)."""
    return workspace.rebase_dir / ".undo" / name


def load(workspace: Workspace, name: str, directory: Path | None = None) -> Journal | None:
    path = (directory or journal_dir(workspace, name)) / JOURNAL_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        newer = isinstance(data, dict) and isinstance(data.get("version"), int) and data["version"] > VERSION
    except ValueError as exc:
        raise _unreadable(path, name, exc) from None
    if newer:
        raise NewerStateError(path,
                              f"the journal of the rebase of {name} (format {data['version']}; this assembler reads "
                              f"{VERSION})")
    try:
        return Journal.from_json(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _unreadable(path, name, exc) from None


def last_range_diff(workspace: Workspace, name: str) -> tuple[str, bool] | None:
    """The full `git range-diff` of the last rebase of ``name`` and whether that rebase is still
    in progress (`assemble show DEP --range-diff`): the pending journal's, else the one kept
    for --undo; None when neither holds one."""
    for directory, pending in ((journal_dir(workspace, name), True), (undo_dir(workspace, name), False)):
        journal = load(workspace, name, directory)
        if journal is not None and journal.range_diff is not None:
            return journal.range_diff, pending
    return None


def _unreadable(path: Path, name: str, exc: Exception) -> InputError:
    """A journal (or backup) that this version cannot read: damaged, or from another version."""
    directory = path.parent
    return InputError(
        f"{path}: cannot read the journal of the rebase of {name} ({type(exc).__name__}: {exc}); "
        "it is damaged or was written by another version of assemble",
        hint=f"finish or abort it with the assemble that started it; or by hand: the tar archive {directory / BACKUP} "
             f"holds deps.toml and patches/{name}/ as they were, `git -C forks/{name} reflog` shows the branch before; "
             f"then delete {directory}",
    )


def _dumps(journal: Journal) -> str:
    """The journal as JSON (dataclasses by their fields: asdict's deep copy is 5x slower)."""
    return json.dumps(journal, default=vars) + "\n"


def save(workspace: Workspace, journal: Journal) -> None:
    atomic_write(journal_dir(workspace, journal.dep) / JOURNAL_NAME, _dumps(journal), inside=workspace.root)


def digest(files: dict[str, bytes] | None) -> str:
    """sha256 over file names and contents; ABSENT for None (no such file or directory)."""
    if files is None:
        return ABSENT
    total = hashlib.sha256()
    for name in sorted(files):
        total.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return total.hexdigest()


def digest_path(path: Path) -> str:
    """digest() of a file (as {"": bytes}) or of a directory's files (relative names)."""
    if path.is_file():
        return digest({"": path.read_bytes()})
    if path.is_dir():
        return digest({str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()})
    return ABSENT


def writing(workspace: Workspace, journal: Journal, name: str, path: Path) -> None:
    """Record, before the rebase writes ``path``, what it holds now (kept from a first attempt
    when a crashed one is resumed: that attempt's output is not the user's)."""
    journal.wrote.setdefault(name, [digest_path(path), None])[1] = None
    save(workspace, journal)


def written(journal: Journal, name: str, path: Path) -> None:
    """Record what the rebase wrote to ``path`` (the caller saves the journal)."""
    journal.wrote[name][1] = digest_path(path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def begin(workspace: Workspace, journal: Journal, patches_dir: Path, checkout_files: dict[str, Path]) -> None:
    """Back up deps.toml, patches/<dep>/ and the named checkout files into one archive (one
    fsync), then publish it with the journal in one rename. Leftovers of an earlier,
    interrupted ``begin`` are discarded."""
    root = workspace.rebase_dir
    staging = root / f".{journal.dep}.new"
    for path in (staging, journal_dir(workspace, journal.dep)):  # made and renamed here: never through a link
        refuse_links(workspace.root, path)
    root.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    sources = {"deps.toml": workspace.manifest_path}
    if patches_dir.is_dir():
        sources.update({f"patches/{p.relative_to(patches_dir)}": p for p in sorted(patches_dir.rglob("*"))
                        if p.is_file()})
        sources["patches"] = patches_dir
    sources.update({f"checkout/{label}": path for label, path in checkout_files.items() if path.is_file()})
    mtimes = {name: path.stat().st_mtime_ns for name, path in sources.items()}
    with (staging / BACKUP).open("wb") as handle:
        with tarfile.open(fileobj=handle, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for name, path in sources.items():
                tar.add(path, arcname=name, recursive=False)
            data = json.dumps(mtimes).encode()
            info = tarfile.TarInfo(MTIMES)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        handle.flush()
        os.fsync(handle.fileno())
    with (staging / JOURNAL_NAME).open("w", encoding="utf-8") as handle:  # staging is private: no atomic_write needed
        handle.write(_dumps(journal))
        handle.flush()
        os.fsync(handle.fileno())
    _fsync_dir(staging)
    os.replace(staging, journal_dir(workspace, journal.dep))
    _fsync_dir(root)


def _backup_name(name: str) -> bool:
    """A member name ``begin`` writes: deps.toml, patches (the directory), patches/<relative
    path>, checkout/<label>. Anything else (an absolute name, '..', a backslash, a control
    character) is not this archive's: the journal directory may not be assemble's own."""
    if name in ("deps.toml", "patches"):
        return True
    head, _, rest = name.partition("/")
    parts = rest.split("/")
    return (head in ("patches", "checkout") and bool(rest) and "\\" not in rest and name.isprintable()
            and all(part not in ("", ".", "..") for part in parts))


class Backup:
    """The archive ``begin`` wrote, read back."""

    def __init__(self, workspace: Workspace, name: str, directory: Path | None = None) -> None:
        self.dir = directory or journal_dir(workspace, name)
        self.root = workspace.root  # what is put back below it is never written through a link
        try:
            with tarfile.open(self.dir / BACKUP) as tar:
                self.files = {m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                              for m in tar.getmembers() if m.isfile()}
                self.dirs = [m.name for m in tar.getmembers() if m.isdir()]
            self.mtimes: dict[str, int] = json.loads(self.files.pop(MTIMES))
            for member in [*self.files, *self.dirs]:
                if not _backup_name(member):  # restore_patches writes patches/<relative> below its staging directory
                    raise ValueError(f"{member!r} is not a name this backup holds")
        except (OSError, tarfile.TarError, ValueError, KeyError) as exc:
            raise _unreadable(self.dir / BACKUP, name, exc) from None

    def digest(self, name: str) -> str:
        """digest_path() of "deps.toml" or "patches" as they were when the rebase began."""
        if name == "patches":
            return digest(self.patches_bytes() if "patches" in self.dirs else None)
        return digest({"": self.files[name]} if name in self.files else None)

    def restorable(self, journal: Journal, name: str, path: Path) -> bool:
        """Whether ``path`` may be put back: it is unchanged since the backup, or it holds what
        the rebase wrote over the backed-up bytes (or was writing when it was killed)."""
        original = self.digest(name)
        current = digest_path(path)
        if current == original:
            return True
        before, after = journal.wrote.get(name, (None, None))
        return before == original and after in (None, current)

    def restore_file(self, name: str, path: Path) -> None:
        """Put back one file (or remove it if it was not there), content and mtime."""
        if name not in self.files:
            path.unlink(missing_ok=True)
            return
        try:  # a link there is replaced, never read or written through
            same = read_regular(path, len(self.files[name])) == self.files[name]
        except (OSError, UnsafeFile):
            same = False
        if not same:
            atomic_write(path, self.files[name], inside=self.root if path.is_relative_to(self.root) else None)
        os.utime(path, ns=(self.mtimes[name], self.mtimes[name]), follow_symlinks=False)

    def patches(self) -> dict[str, tuple[bytes, int]]:
        return {name[len("patches/"):]: (data, self.mtimes[name]) for name, data in self.files.items()
                if name.startswith("patches/")}

    def patches_bytes(self) -> dict[str, bytes]:
        return {name: data for name, (data, _) in self.patches().items()}

    def restore_patches(self, patches_dir: Path) -> None:
        """patches/<dep>/ exactly as it was (contents and mtimes), swapped in in one step."""
        if "patches" not in self.dirs:
            if patches_dir.exists():
                shutil.rmtree(patches_dir)
            return
        saved = self.patches()
        if patches_dir.is_dir() and _snapshot(patches_dir) == saved:
            return
        staging = self.dir / "restore"
        refuse_links(self.root, staging)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for relative, (data, mtime) in saved.items():
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            os.utime(target, ns=(mtime, mtime))
        patches_dir.parent.mkdir(parents=True, exist_ok=True)
        replace_dir(staging, patches_dir)


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def finish(workspace: Workspace, name: str, keep: bool = False) -> None:
    """Retire the journal in one rename (then delete it), so it is never half-removed. With
    ``keep`` (a rebase that finished) it becomes the undo record instead, replacing the one
    of the rebase before."""
    path = journal_dir(workspace, name)
    if not path.exists():
        return
    retired = workspace.rebase_dir / f".{name}.done"
    kept = undo_dir(workspace, name)
    for moved in (retired, kept) if keep else (retired,):  # renamed and removed here: never through a link
        refuse_links(workspace.root, moved)
    shutil.rmtree(retired, ignore_errors=True)
    if keep:
        if kept.exists():
            os.replace(kept, retired)
            shutil.rmtree(retired)
        kept.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, kept)
        return
    os.replace(path, retired)
    shutil.rmtree(retired)


def forget_undo(workspace: Workspace, name: str) -> None:
    """Remove the undo record of ``name`` (after an undo: it cannot be undone twice)."""
    kept = undo_dir(workspace, name)
    retired = workspace.rebase_dir / f".{name}.undone"
    for moved in (retired, kept):
        refuse_links(workspace.root, moved)
    if kept.exists():
        shutil.rmtree(retired, ignore_errors=True)
        os.replace(kept, retired)
        shutil.rmtree(retired)


@contextmanager
def running(workspace: Workspace, name: str) -> Iterator[int]:
    """An flock the rebase's git processes inherit: when assemble itself is killed, a git
    child it started may still be running, and this makes the next --continue or --abort wait
    for it instead of racing it. Yields the descriptor to pass to those children.

    The lock file is removed when the rebase step ends (no empty ``DEP.running`` is left). A
    waiter that was queued on a file removed meanwhile sees that its descriptor no longer
    names the path, and opens the new one: two holders are never possible."""
    path = workspace.rebase_dir / f"{name}.running"
    while True:  # a link or a FIFO committed there is refused, never opened (fsutil.open_state_file)
        fd = open_state_file(workspace.root, path, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield fd
    finally:
        try:
            path.unlink(missing_ok=True)
        finally:
            os.close(fd)
