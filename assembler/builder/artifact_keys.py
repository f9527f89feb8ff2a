"""Artifact keys and the artifact store.

A key hashes everything that can change an artifact's bytes; equal keys mean the stored
artifact is reused, any difference means a rebuild. The store lives in the user cache
(shared by workspaces and by the CUDA versions a release switches between); an artifact is
complete or absent there (written aside, renamed in). A build uses a workspace's copy of an
artifact (``materialize``: hard links into the store) only while it is provably the store's
(``is_materialization``), never on the word of its artifact.json.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from assembler.cache import cache_root, touch
from assembler.fsutil import UnsafeFile, open_regular, replace_dir
from assembler.fsutil import digest_texts as digest_texts  # re-exported: the one digest of every key
from assembler.wheel.artifact import stored_artifact

KEY_SCHEMA = 2  # bump when the meaning of a key part or the artifact layout changes


@dataclass(frozen=True)
class KeyParts:
    dep: str
    source: str  # checkout HEAD, plus a digest of uncommitted edits when there are any
    series: str  # series content digest
    recipe: str  # digest of the generated project and the CMake helper
    toolchain: tuple[tuple[str, str], ...]  # tool -> version (nvcc, c++, cmake, ninja, scikit-build-core)
    torch: str
    torch_target: str
    archs: tuple[str, ...]
    flags: tuple[str, ...]  # cmake-args and build type
    python_abi: str
    profile: str | None = None  # [deps.X.profiles.NAME] the build is reduced by; None: the full build

    def digest(self) -> str:
        """The key. A profile is a part of its own (its defines and units reach the recipe's
        digest too, but a profile that changed only what a backend reads from its build files
        must not share the full build's key); a full build's key is what it was before profiles."""
        parts = asdict(self)
        if parts["profile"] is None:
            del parts["profile"]
        payload = json.dumps({"schema": KEY_SCHEMA, **parts}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:32]


class ArtifactStore:
    """``<cache>/artifacts/<dep>/<key>/{artifact.json, files/}``."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_root() / "artifacts"

    def path(self, dep: str, key: str) -> Path:
        return self.root / dep / key

    def lookup(self, dep: str, key: str) -> Path | None:
        path = self.path(dep, key)
        artifact = stored_artifact(path)
        if artifact is None or artifact.key != key:
            return None
        touch(path / "artifact.json")  # last use, for `assemble cache prune --older-than`
        return path

    def publish(self, staging: Path, dep: str, key: str) -> Path:
        """Move the finished ``staging`` directory in as the artifact for ``key``."""
        final = self.path(dep, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(staging, final)
        except OSError:
            if self.lookup(dep, key) is None:  # not a concurrent identical publish: a real error
                raise
            shutil.rmtree(staging)
        return final


def materialize(stored: Path, target: Path) -> None:
    """Make ``target`` a copy of the stored artifact (hard links where the filesystem allows),
    put in place of what was there in one step."""
    staging = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copytree(stored, staging, copy_function=_link_or_copy)
        replace_dir(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def is_materialization(stored: Path, target: Path) -> bool:
    """Whether ``target`` holds exactly the stored artifact ``stored``, as ``materialize`` made it:
    the same names, and each file the store's own (a hard link: same device and inode) or, where
    materialize had to copy (another filesystem), of the same bytes; nothing a link or a special
    file. The artifact.json alone proves nothing: ``target`` is in the workspace (or a directory
    of --artifacts), which anyone can commit files to, and an artifact's key is deterministic, so
    a forged artifact with the right key and any shared object in it would otherwise ship."""
    mine, theirs = _tree(stored), _tree(target)
    if mine is None or theirs is None or mine.keys() != theirs.keys():
        return False
    for name, info in mine.items():
        other = theirs[name]
        if stat.S_ISDIR(info.st_mode) and stat.S_ISDIR(other.st_mode):
            continue
        if not (stat.S_ISREG(info.st_mode) and stat.S_ISREG(other.st_mode)):
            return False
        linked = (info.st_dev, info.st_ino) == (other.st_dev, other.st_ino)
        if not linked and not _same_bytes(stored / name, target / name, info.st_size):
            return False
    return True


def _tree(root: Path) -> dict[str, os.stat_result] | None:
    """Every entry below ``root`` (relative path -> lstat), links never followed; None when
    ``root`` is not a directory (missing, a link, a file) or cannot be read."""
    try:
        if not stat.S_ISDIR(os.lstat(root).st_mode):
            return None
        found: dict[str, os.stat_result] = {}
        pending = [""]
        while pending:
            relative = pending.pop()
            with os.scandir(root / relative) as listing:
                for entry in listing:
                    name = f"{relative}/{entry.name}" if relative else entry.name
                    found[name] = entry.stat(follow_symlinks=False)
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(name)
        return found
    except OSError:
        return None


def _same_bytes(first: Path, second: Path, size: int) -> bool:
    """Whether two regular files (opened without following links) hold the same ``size`` bytes:
    read side by side, once, only where materialize copied instead of linking."""
    with contextlib.ExitStack() as stack:
        try:
            handles = []
            for path in (first, second):
                fd, info = open_regular(path)
                handles.append(stack.enter_context(os.fdopen(fd, "rb")))
                if info.st_size != size:
                    return False
        except (OSError, UnsafeFile):
            return False
        while True:
            block = handles[0].read(1 << 20)
            if block != handles[1].read(1 << 20):
                return False
            if not block:
                return True
    return False  # not reached (ExitStack could swallow an exception, as mypy sees it)


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)
