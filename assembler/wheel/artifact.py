"""Per-dependency build artifacts as the merge reads them.

An artifact is a directory ``<dep>/`` holding ``artifact.json`` (provenance and toolchain,
written by the build) and its payload, in one of two forms:

* ``files.zip`` or a single ``*.whl`` (preferred when present): an archive whose deflated
  members the merge copies as they are, with the sha256 digests from the archive's
  ``*.dist-info/RECORD``. Any top-level ``*.dist-info/`` directory in the archive is metadata,
  not payload. ``pack_files`` makes one from ``files/``; a scikit-build-core wheel qualifies
  as it is. Packing once per artifact is what makes merging as fast as copying.
* ``files/``: loose files; every merge deflates them again (tens of MB/s per core).
"""

from __future__ import annotations

import csv
import io
import json
import os
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from assembler.errors import InputError
from assembler.wheel.metadata import record_text
from assembler.wheel.writer import ZIP_EPOCH, RawMember, ReproducibleZip

ARTIFACT_JSON = "artifact.json"
FILES_DIR = "files"
PACK_NAME = "files.zip"
PACK_RECORD = "payload.dist-info/RECORD"


@dataclass(frozen=True)
class PayloadFile:
    """One file an artifact offers: its path below the payload root and where its bytes are."""

    relpath: str
    size: int
    path: Path | None = None  # a loose file
    member: RawMember | None = None  # or a member of an archive
    sha256: str | None = None  # known digest (archive RECORD), urlsafe base64


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

    def provenance(self) -> dict[str, Any]:
        """What the wheel records about this artifact; only fields that are the same on every
        rebuild of the same inputs (so not build_seconds). ``head`` and ``dirty`` say what was
        really compiled, which is more than commit + patches when forks/ held local work."""
        return {
            "commit": self.commit, "source": self.source, "patches": list(self.patches),
            "head": self.head, "dirty": self.dirty,
            "key": self.key, "toolchain": self.toolchain, "archs": list(self.archs),
        }

    def payload(self) -> list[PayloadFile]:
        """The packed form when there is one (its members are copied, not deflated again), else
        the loose files."""
        archives = sorted(p for p in self.root.iterdir() if p.is_file() and (p.name == PACK_NAME or p.suffix == ".whl"))
        if len(archives) == 1:
            return archive_payload(archives[0])
        files = self.root / FILES_DIR
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
                raise InputError(f"{path}: no {ARTIFACT_JSON} here or in its subdirectories", hint="pass the --artifacts directory of `assemble build --only DEP`")
        else:
            raise InputError(f"{path}: no such artifact directory", hint="pass the --artifacts directory of `assemble build --only DEP`")
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
        data = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{where}: unreadable ({exc})", hint="rebuild that dependency") from None

    def field(name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        value = data.get(name, default) if isinstance(data, dict) else None
        if not isinstance(value, kind):
            raise InputError(f"{where}: '{name}' must be {_kind_name(kind)}, got {value!r}", hint="rebuild that dependency with this assembler")
        return value

    patches, archs = field("patches", list, []), field("archs", list, [])
    return Artifact(
        dep=field("dep", str), root=root, commit=field("commit", str), source=field("source", str, ""),
        patches=tuple(str(p) for p in patches), key=field("key", str, ""),
        toolchain=dict(field("toolchain", dict)), archs=tuple(str(a) for a in archs),
        head=field("head", (str, type(None))), dirty=field("dirty", bool, False),
        series_head=field("series_head", (str, type(None))), series_digest=field("series_digest", (str, type(None))),
        build_seconds=float(field("build_seconds", (int, float), 0.0)),
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
    """Every file below ``files/`` (symlinks followed to their content; a dangling one is an error)."""
    out = []
    for directory, dirnames, filenames in os.walk(files):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(directory, filename)
            try:
                info = path.stat()
            except FileNotFoundError:
                raise InputError(f"{path}: dangling symlink in an artifact", hint="fix the build so it ships the file itself") from None
            relpath = path.relative_to(files).as_posix()
            out.append(PayloadFile(relpath=relpath, size=info.st_size, path=path))
    return out


def _record_digests(archive: zipfile.ZipFile) -> dict[str, str]:
    """path -> urlsafe sha256 from every top-level ``*.dist-info/RECORD``."""
    digests: dict[str, str] = {}
    for info in archive.infolist():
        parts = info.filename.split("/")
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "RECORD":
            text = archive.read(info).decode("utf-8")
            for row in csv.reader(io.StringIO(text)):
                if len(row) >= 2 and row[1].startswith("sha256="):
                    digests[row[0]] = row[1].removeprefix("sha256=")
    return digests


def archive_payload(path: Path) -> list[PayloadFile]:
    try:
        with zipfile.ZipFile(path) as archive:
            digests = _record_digests(archive)
            out = []
            for info in archive.infolist():
                if info.is_dir() or info.filename.split("/")[0].endswith(".dist-info"):
                    continue
                relpath = _safe_relpath(info.filename, path)
                member = RawMember(path, info.header_offset, info.compress_type, info.compress_size, info.file_size, info.CRC)
                out.append(PayloadFile(relpath=relpath, size=info.file_size, member=member, sha256=digests.get(info.filename)))
    except (OSError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path}: not a readable zip ({exc})", hint="rebuild or re-download that artifact") from None
    return sorted(out, key=lambda f: f.relpath)


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
