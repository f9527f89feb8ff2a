"""Artifact keys and the artifact store.

A key hashes everything that can change an artifact's bytes; equal keys mean the stored
artifact is reused, any difference means a rebuild. The store lives in the user cache
(shared by workspaces and by the CUDA versions a release switches between); an artifact is
complete or absent there (written aside, renamed in).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from assembler.cache import cache_root, touch
from assembler.fsutil import digest_texts as digest_texts  # re-exported: the one digest of every key
from assembler.fsutil import replace_dir
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

    def digest(self) -> str:
        payload = json.dumps({"schema": KEY_SCHEMA, **asdict(self)}, sort_keys=True)
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


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)
