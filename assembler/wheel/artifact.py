"""Per-dependency build artifacts as the merge reads them.

An artifact is a directory ``<dep>/`` holding ``artifact.json`` (provenance and toolchain,
written by the build) and its payload, in one of two forms:

* ``files.zip`` or a single ``*.whl`` (preferred when present): an archive whose deflated
  members the merge copies as they are. Any top-level ``*.dist-info/`` directory in the
  archive is metadata, not payload. ``pack_files`` makes one from ``files/``; a
  scikit-build-core wheel qualifies as it is. Packing once per artifact is what makes merging
  as fast as copying.
* ``files/``: loose files; every merge deflates them again (tens of MB/s per core).

An artifact is data, never trusted: the merge computes every digest from the bytes it writes
and checks each copied member's CRC and size (``writer.ReproducibleZip.verified``); the digests
of the archive's ``*.dist-info/RECORD`` (at most ``RECORD_LIMIT`` bytes) must agree with them.
Archives, ``artifact.json`` and loose files must be regular files: a symbolic link, FIFO or
device is refused, never followed to a file of the merging machine or read until it ends; so is
an archive member whose mode says link or device. (What a link in a dependency's checkout points
at is kept out before: ``builder.links``.)
"""

from __future__ import annotations

import csv
import io
import os
import stat
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from assembler import jsonfile
from assembler.errors import InputError
from assembler.fsutil import UnsafeFile, open_regular, read_regular
from assembler.manifest.model import PROFILE_NAME_RE
from assembler.wheel.metadata import record_text
from assembler.wheel.writer import ZIP_EPOCH, RawMember, ReproducibleZip

ARTIFACT_JSON = "artifact.json"
FILES_DIR = "files"
PACK_NAME = "files.zip"
PACK_RECORD = "payload.dist-info/RECORD"
# 64 MiB is ~50x the RECORD of the torch 2.14.1 CUDA wheel (13,043 files, 1.3 MB, measured), the
# largest wheel we read, so any real artifact fits and a bomb is refused unread.
RECORD_LIMIT = 64 << 20
ARTIFACT_JSON_LIMIT = 16 << 20  # artifact.json is a few KB


@dataclass(frozen=True)
class PayloadFile:
    """One file an artifact offers: its path below the payload root and where its bytes are."""

    relpath: str
    size: int
    path: Path | None = None  # a loose file
    member: RawMember | None = None  # or a member of an archive
    sha256: str | None = None  # the digest the archive's RECORD claims (checked when copied), urlsafe base64


@dataclass(frozen=True)
class Artifact:
    dep: str
    root: Path
    commit: str  # the upstream commit deps.toml pins
    source: str
    patches: tuple[str, ...]
    key: str
    toolchain: dict[str, Any]
    archs: tuple[str, ...]
    head: str | None = None  # the checkout's HEAD the build compiled
    dirty: bool = False  # uncommitted edits were compiled too
    series_head: str | None = None  # the commit that applying the series produced
    series_digest: str | None = None  # the patch series' content it was built from (git.state.series_digest)
    build_seconds: float = 0.0
    # The build profile it was built on ([deps.X.profiles.NAME]); None: the full build. Read from
    # artifact.json, not deps.toml: artifacts from CI runners say what they were built as.
    profile: str | None = None

    def provenance(self) -> dict[str, Any]:
        """What the wheel records about this artifact; only fields that are the same on every
        rebuild of the same inputs (so not build_seconds). ``head`` and ``dirty`` say what was
        really compiled, which is more than commit + patches when forks/ held local work.
        "profile" only for a reduced build: its absence says full (verify reads exactly this key)."""
        return {
            "commit": self.commit, "source": self.source, "patches": list(self.patches),
            "head": self.head, "dirty": self.dirty,
            "key": self.key, "toolchain": self.toolchain, "archs": list(self.archs),
            **({"profile": self.profile} if self.profile is not None else {}),
        }

    def payload(self) -> list[PayloadFile]:
        """The packed form when there is one (its members are copied, not deflated again), else
        the loose files."""
        archives = sorted(p for p in self.root.iterdir() if p.name == PACK_NAME or p.suffix == ".whl")
        if len(archives) == 1:
            return archive_payload(archives[0])
        files = self.root / FILES_DIR
        if not archives and files.is_symlink():
            raise InputError(f"{files} is a symbolic link",
                             hint="artifacts hold regular files only; rebuild that artifact")
        if not archives and files.is_dir():
            return _loose_payload(files)
        found = ", ".join(p.name for p in archives) or "nothing"
        raise InputError(
            f"{self.root}: expected {PACK_NAME}, one *.whl or {FILES_DIR}/ as the payload, found {found}",
            hint=f"rebuild it: assemble build --only {self.dep} --artifacts {self.root.parent}",
        )


def load_artifacts(paths: Iterable[Path]) -> list[Artifact]:
    """Each path is an artifact directory or a directory of them (``--artifacts DIR``)."""
    found: dict[str, Artifact] = {}
    for path in paths:
        path = path.resolve()
        if (path / ARTIFACT_JSON).is_file():
            candidates = [path]
        elif path.is_dir():
            candidates = sorted(p for p in path.iterdir() if (p / ARTIFACT_JSON).is_file())
            if not candidates:
                raise InputError(f"{path}: no {ARTIFACT_JSON} here or in its subdirectories",
                                 hint="pass the --artifacts directory of `assemble build --only DEP`")
        else:
            raise InputError(f"{path}: no such artifact directory",
                             hint="pass the --artifacts directory of `assemble build --only DEP`")
        for candidate in candidates:
            artifact = read_artifact(candidate)
            if artifact.dep in found:
                raise InputError(
                    f"two artifacts for {artifact.dep}: {found[artifact.dep].root} and {artifact.root}",
                    hint="pass each dependency's artifact once",
                )
            found[artifact.dep] = artifact
    return [found[name] for name in sorted(found)]


def read_artifact(root: Path) -> Artifact:
    """``root``/artifact.json, checked field by field; InputError naming the file otherwise."""
    where = root / ARTIFACT_JSON
    try:
        data = jsonfile.loads(read_regular(where, ARTIFACT_JSON_LIMIT), where)
    except (OSError, ValueError) as exc:
        raise InputError(f"{where}: unreadable ({exc})", hint="rebuild that dependency") from None

    def field(name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        value = data.get(name, default) if isinstance(data, dict) else None
        if not isinstance(value, kind):
            raise InputError(f"{where}: '{name}' must be {_kind_name(kind)}, got {value!r}",
                             hint="rebuild that dependency with this assembler")
        return value

    patches, archs = field("patches", list, []), field("archs", list, [])
    profile = field("profile", (str, type(None)))
    # a value that is no name is never a silent full build
    if profile is not None and not PROFILE_NAME_RE.match(profile):
        raise InputError(f"{where}: 'profile' must be a build profile's name, got {profile!r}",
                         hint="rebuild that dependency with this assembler")
    return Artifact(
        dep=field("dep", str), root=root, commit=field("commit", str), source=field("source", str, ""),
        patches=tuple(str(p) for p in patches), key=field("key", str, ""),
        toolchain=dict(field("toolchain", dict)), archs=tuple(str(a) for a in archs),
        head=field("head", (str, type(None))), dirty=field("dirty", bool, False),
        series_head=field("series_head", (str, type(None))), series_digest=field("series_digest", (str, type(None))),
        build_seconds=float(field("build_seconds", (int, float), 0.0)), profile=profile,
    )


def stored_artifact(root: Path) -> Artifact | None:
    """The artifact in ``root``, or None when there is none or it cannot be read (then: rebuild)."""
    try:
        return read_artifact(root)
    except InputError:
        return None


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else f"a {k.__name__}" for k in kinds)


def _safe_relpath(name: str, where: Path) -> str:
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or "\\" in name:
        raise InputError(f"{where}: unsafe path {name!r}", hint="artifact paths must stay inside the payload")
    return pure.as_posix()


def _loose_payload(files: Path) -> list[PayloadFile]:
    """Every file below ``files/``, walked without recursion (any depth) and sorted. Only regular
    files and directories: a symbolic link (to a file or a directory, inside or out), a FIFO, a
    socket or a device is an error, so no file of the merging machine reaches the wheel."""
    out = []
    pending = [files]
    while pending:
        directory = pending.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            raise InputError(f"{directory}: unreadable ({exc.strerror or exc})", hint="rebuild that artifact") from None
        subdirectories = []
        for entry in entries:
            path = Path(entry.path)
            if entry.is_symlink():
                raise InputError(f"{path}: a symbolic link in an artifact",
                                 hint="artifacts hold regular files only; fix the build so it ships the file itself")
            if entry.is_dir(follow_symlinks=False):
                subdirectories.append(path)
            elif entry.is_file(follow_symlinks=False):
                out.append(PayloadFile(relpath=path.relative_to(files).as_posix(),
                                       size=entry.stat(follow_symlinks=False).st_size, path=path))
            else:
                raise InputError(f"{path}: not a regular file (a FIFO, socket or device) in an artifact",
                                 hint="artifacts hold regular files only")
        pending.extend(reversed(subdirectories))
    return sorted(out, key=lambda f: f.relpath)


def _record_digests(archive: zipfile.ZipFile, path: Path) -> dict[str, str]:
    """path -> urlsafe sha256 claimed by every top-level ``*.dist-info/RECORD``: what the merge
    checks the digests it computes against. A RECORD over RECORD_LIMIT is refused unread, and
    zipfile never inflates past the declared size and checks the CRC."""
    digests: dict[str, str] = {}
    for info in archive.infolist():
        parts = info.filename.split("/")
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "RECORD":
            if info.file_size > RECORD_LIMIT:
                raise InputError(f"{path}: {info.filename} declares {info.file_size} bytes, over the limit of "
                                 f"{RECORD_LIMIT}",
                                 hint="rebuild or re-download that artifact")
            with archive.open(info) as handle:
                raw = handle.read(RECORD_LIMIT + 1)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{path}: {info.filename} is not UTF-8 ({exc.reason} at byte {exc.start})",
                                 hint="rebuild or re-download that artifact") from None
            try:
                for row in csv.reader(io.StringIO(text)):
                    if len(row) >= 2 and row[1].startswith("sha256="):
                        digests[row[0]] = row[1].removeprefix("sha256=")
            except csv.Error as exc:
                raise InputError(f"{path}: {info.filename} is not a CSV file ({exc})",
                                 hint="rebuild or re-download that artifact") from None
    return digests


def archive_payload(path: Path) -> list[PayloadFile]:
    try:
        fd, _ = open_regular(path)
    except UnsafeFile as unsafe:
        raise InputError(f"{unsafe}: an artifact's archive must be a regular file",
                         hint="rebuild or re-download that artifact") from None
    except OSError as exc:
        raise InputError(f"{path}: unreadable ({exc.strerror or exc})",
                         hint="rebuild or re-download that artifact") from None
    try:
        with os.fdopen(fd, "rb") as handle, zipfile.ZipFile(handle) as archive:
            digests = _record_digests(archive, path)
            out: dict[str, PayloadFile] = {}
            for info in archive.infolist():
                if info.is_dir() or info.filename.split("/")[0].endswith(".dist-info"):
                    continue
                relpath = _safe_relpath(info.filename, path)
                kind = stat.S_IFMT(info.external_attr >> 16)
                # a symbolic link's member holds its target: not a file of the payload
                if kind not in (0, stat.S_IFREG):
                    raise InputError(f"{path}: {relpath} is not a regular file (mode {kind:o}) in an "
                                     "artifact's archive",
                                     hint="artifacts hold regular files only; rebuild or re-download that artifact")
                if relpath in out:
                    raise InputError(f"{path}: {relpath} is in the archive twice",
                                     hint="rebuild or re-download that artifact")
                member = RawMember(path, info.header_offset, info.compress_type, info.compress_size, info.file_size,
                                   info.CRC)
                out[relpath] = PayloadFile(relpath=relpath, size=info.file_size, member=member,
                                           sha256=digests.get(info.filename))
    except (OSError, zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
        raise InputError(f"{path}: not a readable zip ({exc})", hint="rebuild or re-download that artifact") from None
    return sorted(out.values(), key=lambda f: f.relpath)


def pack_files(files: Path, dest: Path, *, jobs: int = 1) -> Path:
    """Deflate ``files/`` once into ``dest`` (conventionally ``<artifact>/files.zip``) so that
    every later merge copies compressed bytes instead of compressing again. The archive is
    reproducible and its RECORD carries each file's sha256."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with ReproducibleZip(tmp, epoch=ZIP_EPOCH, jobs=jobs) as archive:
            for item in _loose_payload(files):
                assert item.path is not None
                archive.write_file(item.relpath, item.path)
            archive.write_bytes(PACK_RECORD, record_text(archive.written, PACK_RECORD).encode())
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest
