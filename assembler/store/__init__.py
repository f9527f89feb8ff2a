"""The artifact store CI runners share: ``[cache] artifacts = "file:///DIR"`` or ``"s3://BUCKET/PREFIX"``.

Before a dependency is built its key is looked up here; after it is built it is uploaded. The
local store (``builder.cache.ArtifactStore``) stays the one the build reads from: a shared
artifact is downloaded into it first.

Layout, content-addressed (objects are written once and never changed in place):

- ``blobs/<sha256>.tar``: one packed artifact (``artifact.json``, ``files.zip``, ``files/``), an
  uncompressed tar of regular files written in a fixed order, named by its digest;
- ``keys/<dep>/<key>.json``: ``{"dep", "key", "digest", "size"}``, the small object that
  publishes a blob under an artifact key.

Publishing is atomic because the blob is written completely before the key object names it
(on a file system each is written aside and renamed in; on S3 each PUT is atomic), so a
concurrent runner sees either no artifact or a whole one. A download is checked against the
digest and size the key object names: a truncated or corrupt one is discarded, and the
dependency is rebuilt and uploaded again. Unpacking accepts only regular files and directories
below the artifact, so a store's content is data, never a path that escapes.

A store may be hostile (anyone who can write to it) or broken, and must not stop or fill a
build. Every object read must be a regular file (a FIFO does not hang the read, a symbolic link
is not followed, on a file:// store) and is bounded before it is read: a key object by
``KEY_OBJECT_LIMIT``, a blob by the size its key object declares (at most ``BLOB_LIMIT``, and
no more than the free space of the local store), so a blob that is ``/dev/zero`` or grows is
never copied past that size. An S3 request times out (``S3_READ_TIMEOUT_S``). Any of these is
an unusable artifact: the dependency is rebuilt, with a note saying why.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import uuid
from pathlib import Path, PurePosixPath
from typing import Protocol

from assembler import jsonfile
from assembler.errors import InputError
from assembler.fsutil import read_regular

STORE_ENV = "ASSEMBLE_ARTIFACT_STORE"  # overrides [cache] artifacts
# A key object is ~150 bytes of JSON ({"dep", "key", "digest", "size"}); anything over 64 KiB is
# not one and is refused unread.
KEY_OBJECT_LIMIT = 64 << 10
# The largest artifact we know, vllm's 13 extensions for every arch, is under 1 GB packed; a blob
# declared over 16 GiB is refused before a byte is downloaded.
BLOB_LIMIT = 16 << 30
CHUNK = 1 << 20
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class StoreUnavailable(Exception):
    """The store could not be read or written (network, permissions); the build goes on without it."""


class UnusableObject(ValueError):
    """An object of the store is not what it must be (not a regular file, over its bound, not the
    declared size): the artifact is unusable and the dependency is rebuilt."""


class WrongSize(UnusableObject):
    """A blob that is not the size its key object declares: corrupt or partial."""


class Backend(Protocol):
    """Named objects; ``put_file`` and ``put`` replace an object in one step."""

    url: str

    def get(self, name: str, limit: int) -> bytes | None:
        """The object (None when missing); UnusableObject when it is over ``limit`` bytes."""
        ...

    def put(self, name: str, data: bytes) -> None: ...

    def get_file(self, name: str, target: Path, size: int) -> bool:
        """Download the object to ``target`` (False when missing); UnusableObject when it is not
        ``size`` bytes, and never more than ``size`` bytes written."""
        ...

    def put_file(self, name: str, source: Path) -> None: ...

    def exists(self, name: str) -> bool: ...


class SharedStore:
    """Look up, download and upload artifacts by key through one backend."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def url(self) -> str:
        return self.backend.url

    @staticmethod
    def key_object(dep: str, key: str) -> str:
        if not _NAME.match(dep) or not _NAME.match(key):
            raise InputError(f"artifact store: {dep!r}/{key!r} is not a dependency name and key",
                             hint="this is a bug in assemble")
        return f"keys/{dep}/{key}.json"

    def has(self, dep: str, key: str) -> bool:
        """Whether the store holds the artifact; StoreUnavailable when it cannot be asked (the
        caller says so: "not there" and "could not look" are different answers)."""
        return self.backend.exists(self.key_object(dep, key))

    def fetch(self, dep: str, key: str, staging: Path) -> tuple[bool, str]:
        """Download the artifact of ``key`` into ``staging`` (a new directory): (whether it is
        there now, what happened, for the report)."""
        shutil.rmtree(staging, ignore_errors=True)
        try:
            raw = self.backend.get(self.key_object(dep, key), KEY_OBJECT_LIMIT)
            if raw is None:
                return False, "not in the shared store"
            entry = jsonfile.loads(raw, f"shared store: key object for {dep}/{key}")
            digest, size = entry["digest"], entry["size"]
            if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
                return False, f"shared store: key object for {dep} names no digest; rebuilt"
            if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= BLOB_LIMIT:
                return False, (f"shared store: key object for {dep} declares size {size!r}, not 0 to {BLOB_LIMIT} "
                               "bytes; rebuilt")
            staging.parent.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(staging.parent).free
            if 2 * size > free:  # the blob, then its unpacked copy
                return False, (f"shared store: {dep}'s artifact is {size} bytes, {staging.parent} has {free} "
                               "free; rebuilt")
            blob = staging.with_name(f"{staging.name}.tar")
            try:
                try:
                    if not self.backend.get_file(f"blobs/{digest}.tar", blob, size):
                        return False, f"shared store: blob {digest[:12]} is missing; rebuilt"
                except WrongSize as wrong:
                    shutil.rmtree(staging, ignore_errors=True)
                    return False, f"shared store: download of {dep} is corrupt or partial ({wrong}); rebuilt"
                found, length = file_digest(blob)
                if found != digest or length != size:
                    return False, (f"shared store: download of {dep} is corrupt or partial (sha256 {found[:12]}, "
                                   f"{length} bytes; expected {digest[:12]}, {size} bytes); rebuilt")
                unpack(blob, staging)
            finally:
                blob.unlink(missing_ok=True)
            recorded = jsonfile.loads(read_regular(staging / "artifact.json", KEY_OBJECT_LIMIT << 8),
                                      staging / "artifact.json")
            if recorded.get("key") != key or recorded.get("dep") != dep:
                shutil.rmtree(staging, ignore_errors=True)
                return False, (f"shared store: blob under {dep}/{key} holds "
                               f"{recorded.get('dep')}/{recorded.get('key')}; rebuilt")
            return True, "downloaded"
        except StoreUnavailable as error:
            shutil.rmtree(staging, ignore_errors=True)
            return False, f"shared store unavailable: {error}"
        except (OSError, ValueError, KeyError, TypeError, AttributeError, tarfile.TarError) as error:
            shutil.rmtree(staging, ignore_errors=True)
            return False, f"shared store: unusable artifact for {dep} ({type(error).__name__}: {error}); rebuilt"

    def upload(self, artifact: Path, dep: str, key: str) -> str:
        """Pack and publish ``artifact`` (a complete local artifact directory) under ``key``:
        the blob first, then the key object that names it."""
        blob = artifact.with_name(f".{artifact.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tar")
        try:
            pack(artifact, blob)
            digest, size = file_digest(blob)
            self.backend.put_file(f"blobs/{digest}.tar", blob)
            entry = {"dep": dep, "key": key, "digest": digest, "size": size}
            self.backend.put(self.key_object(dep, key), (json.dumps(entry, sort_keys=True) + "\n").encode())
            return "uploaded"
        except (StoreUnavailable, OSError) as error:
            return f"upload to the shared store failed: {error}"
        finally:
            blob.unlink(missing_ok=True)


def file_digest(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def pack(directory: Path, target: Path) -> None:
    """An uncompressed tar of the regular files below ``directory``, in sorted order, with fixed
    owners and times (the same artifact packs to the same bytes)."""
    with tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(directory.rglob("*")):
            relative = path.relative_to(directory).as_posix()
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue
            info = tarfile.TarInfo(relative)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
                continue
            info.size = path.stat().st_size
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            with path.open("rb") as handle:
                archive.addfile(info, handle)


def unpack(blob: Path, target: Path) -> None:
    """Extract ``blob`` into the new directory ``target``: regular files and directories only,
    each below ``target``."""
    target.mkdir(parents=True)
    with tarfile.open(blob, "r:") as archive:
        for member in archive:
            parts = PurePosixPath(member.name).parts
            if not parts or member.name.startswith("/") or any(part in ("", ".", "..") for part in parts):
                raise ValueError(f"member {member.name!r} leaves the artifact")
            path = target.joinpath(*parts)
            if member.isdir():
                path.mkdir(parents=True, exist_ok=True)
                continue
            if not member.isreg() or member.issparse():
                raise ValueError(f"member {member.name!r} is not a regular file")
            path.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(member)
            assert source is not None
            with source, path.open("wb") as out:
                shutil.copyfileobj(source, out)
            path.chmod(0o755 if member.mode & 0o111 else 0o644)


def open_store(url: str | None, s3_endpoint: str | None = None,
               environ: dict[str, str] | None = None) -> SharedStore | None:
    """The shared store ``url`` names (``ASSEMBLE_ARTIFACT_STORE`` overrides it; empty: none)."""
    env = dict(os.environ) if environ is None else environ
    url = env.get(STORE_ENV, url) or None
    if url is None:
        return None
    if url.startswith("file://"):
        from assembler.store.files import FileBackend

        path = url.removeprefix("file://")
        if not path.startswith("/") or "/../" in f"{path}/":
            raise InputError(f"artifact store {url!r}: a file:// store needs an absolute path",
                             hint="write file:///shared/dir")
        return SharedStore(FileBackend(Path(path)))
    if url.startswith("s3://"):
        from assembler.store.s3 import S3Backend

        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        return SharedStore(S3Backend(bucket, prefix.strip("/"), s3_endpoint or env.get("AWS_ENDPOINT_URL") or None))
    raise InputError(f"artifact store {url!r}: expected file:///DIR or s3://BUCKET/PREFIX",
                     hint=f"fix [cache] artifacts in deps.toml or {STORE_ENV}")


__all__ = ["BLOB_LIMIT", "KEY_OBJECT_LIMIT", "STORE_ENV", "Backend", "SharedStore", "StoreUnavailable",
           "UnusableObject", "WrongSize", "open_store", "pack", "unpack"]
