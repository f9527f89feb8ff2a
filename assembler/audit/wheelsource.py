"""What a PATH names: a wheel (members read in place), a directory tree, or one shared object.

Nothing is extracted: a wheel's central directory gives each shared object's offset and sizes
(:class:`MemberInfo`), which :mod:`assembler.audit.member` reads lazily.  The wheel's abi3 tag
(``cp38-abi3`` -> Python 3.8) is the floor extensions are checked against.

Shared objects are found by content, never by name: every member (every regular file of a
tree) whose first bytes are the ELF magic is audited, whatever it is called (``_U.abi3.so.bak``,
``_V``, ``_W.pyd``), and a file named like one that is not ELF (a text ``x.so``, a linker
script) is listed as ``not_elf`` and not audited, as `assemble size` counts it. Member names
that would install outside the target directory (absolute, ``..``, a drive or a backslash) are
listed as ``unsafe_names``, which fails the gate (pip refuses such a wheel).

Only regular files are opened.  A directory is walked without following symbolic links to
directories (and without recursion: a tree thousands of directories deep is walked like any
other); a link to an ELF file is audited once, through its target, when that target lies inside
the directory, and refused (exit 2) when it leads outside it or nowhere.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from assembler.audit.elf import ELF_MAGIC
from assembler.audit.limits import MAX_WHEEL_METADATA
from assembler.audit.member import (
    DeflatedMember,
    FileSource,
    MemberInfo,
    OverlappingEntries,
    StoredMember,
    open_member,
    open_regular,
    peek,
    read_small_member,
)
from assembler.audit.zipindex import read_index
from assembler.errors import InputError

PyVersion = tuple[int, int]
_SHARED_OBJECT = re.compile(r"\.so(\.\d+)*$")
_WHEEL_FILE = re.compile(r"^[^/]+\.dist-info/WHEEL$")
_EVERY_MEMBER = re.compile(rb"")
_DRIVE = re.compile(r"^[A-Za-z]:")
_METADATA_FILE = re.compile(r"^[^/]+\.dist-info/METADATA$")


@dataclass(frozen=True)
class FileJob:
    path: str  # on disk
    name: str  # as reported: relative to the directory given, or the file's name


Job = MemberInfo | FileJob


@dataclass(frozen=True)
class Target:
    path: str
    kind: str  # "wheel" | "directory" | "file"
    tags: tuple[str, ...]  # wheel tags, e.g. ("cp38-abi3-manylinux_2_28_x86_64",)
    jobs: tuple[Job, ...]
    requires_torch: str | None = None  # METADATA's Requires-Dist on torch (without extras), e.g. "torch>=2.11"
    requires_python: str | None = None  # METADATA's Requires-Python, e.g. ">=3.9"
    not_elf: tuple[str, ...] = ()  # named like a shared object, but not ELF: not audited
    unsafe_names: tuple[str, ...] = ()  # member names that install outside the target directory

    @property
    def abi3_floor(self) -> PyVersion | None:
        """The Python version an abi3 tag promises (the highest when several are abi3)."""
        floors: list[PyVersion] = []
        for tag in self.tags:
            interpreters, _, rest = tag.partition("-")
            if rest.split("-")[0] == "abi3":
                floors += [v for i in interpreters.split(".") if (v := _cp_version(i))]
        return max(floors, default=None)


def _cp_version(interpreter: str) -> PyVersion | None:
    match = re.fullmatch(r"cp(\d)(\d+)", interpreter)
    return (int(match[1]), int(match[2])) if match else None


def is_shared_object_name(name: str) -> bool:
    return bool(_SHARED_OBJECT.search(name))


def unsafe_name(name: str) -> str | None:
    """Why a wheel member name would install outside the directory it is installed into, or None."""
    if name.startswith("/"):
        return "an absolute path"
    if _DRIVE.match(name):
        return "a drive-qualified path"
    if "\\" in name:
        return "a backslash (a separator on Windows)"
    if ".." in name.split("/"):
        return "a '..' component"
    return None


def is_elf_file(path: str) -> bool:
    """Whether the regular file at ``path`` starts with the ELF magic (False when unreadable)."""
    try:
        fd = open_regular(path)
    except InputError:
        return False
    try:
        return os.pread(fd, len(ELF_MAGIC), 0) == ELF_MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


def elf_members(wheel: str, entries: list[MemberInfo]) -> tuple[list[MemberInfo], list[MemberInfo]]:
    """(ELF members, members named like shared objects that are not ELF), judged by content.

    Every entry's local header is read (the peek), so entries whose bytes overlap are refused
    here, whatever their names (``OverlappingEntries``, exit 2). A member whose header or data
    cannot otherwise be peeked at is audited when its name says shared object (so the corruption
    is reported, as before) and otherwise left alone."""
    elves: list[MemberInfo] = []
    not_elf: list[MemberInfo] = []
    fd = open_regular(wheel)
    try:
        for entry in entries:
            try:
                magic: bytes | None = peek(fd, entry, len(ELF_MAGIC))
            except OverlappingEntries:
                raise
            except (InputError, OSError):
                magic = None
            if entry.name.endswith("/"):
                continue
            named = is_shared_object_name(entry.name)
            if entry.file_size < len(ELF_MAGIC):
                if named:
                    not_elf.append(entry)
            elif magic is None:
                if named:
                    elves.append(entry)  # its audit says what is wrong with it
            elif magic == ELF_MAGIC:
                elves.append(entry)
            elif named:
                not_elf.append(entry)
    finally:
        os.close(fd)
    return elves, not_elf


def open_target(path: Path) -> Target:
    if path.is_dir():
        return _directory(path)
    fd = open_regular(str(path))
    try:
        magic = os.pread(fd, 4, 0)
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None
    finally:
        os.close(fd)
    if path.suffix == ".whl" or magic == b"PK\x03\x04":
        return _wheel(path)
    if magic != ELF_MAGIC and is_shared_object_name(path.name):  # a text x.so: no object, as in a wheel or a tree
        return Target(str(path), "file", (), (), not_elf=(path.name,))
    return Target(str(path), "file", (), (FileJob(str(path), path.name),))


def _wheel(path: Path) -> Target:
    try:
        entries = read_index(str(path), _EVERY_MEMBER)
    except (struct.error, IndexError, ValueError, OverflowError) as error:
        # A layout zipindex's checks do not foresee: one line all the same (the fuzz suite fails on it).
        raise InputError(f"{path}: corrupt wheel (unexpected layout: {type(error).__name__}: {error})") from None
    wheel_files = [e for e in entries if _WHEEL_FILE.match(e.name)]
    if not wheel_files:
        raise InputError(f"{path}: a zip archive but not a wheel (no *.dist-info/WHEEL)")
    metadata = read_small_member(wheel_files[0], MAX_WHEEL_METADATA).decode(errors="replace")
    elves, not_elf = elf_members(str(path), entries)
    jobs = tuple(sorted(elves, key=lambda e: e.name))
    unsafe = tuple(f"{e.name} ({why})" for e in entries if (why := unsafe_name(e.name)))
    core = [e for e in entries if _METADATA_FILE.match(e.name)]
    try:
        torch, python = (declared_requirements(read_small_member(core[0], MAX_WHEEL_METADATA).decode(errors="replace"))
                         if core else (None, None))
    except InputError:  # an oversized METADATA: no declared floors to compare, the audit goes on
        torch, python = None, None
    return Target(str(path), "wheel", _wheel_tags(path.name, metadata), jobs, torch, python,
                  tuple(sorted(e.name for e in not_elf)), unsafe)


def declared_requirements(metadata: str) -> tuple[str | None, str | None]:
    """(Requires-Dist on torch, Requires-Python) from core metadata headers; a torch requirement
    that only holds under an extra is not one the wheel always has.

    METADATA is an email message, parsed as ``importlib.metadata`` parses it: a line that starts
    with whitespace continues the header above (real wheels fold ``License:`` texts over lines
    that hold only spaces), and only an empty line ends the headers."""
    from email.parser import HeaderParser

    from packaging.requirements import InvalidRequirement, Requirement

    headers = HeaderParser().parsestr(metadata)
    torch = python = None
    declared_python = headers.get_all("Requires-Python") or []
    if declared_python:
        python = " ".join(str(declared_python[0]).split())
    for value in headers.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(" ".join(str(value).split()))
        except InvalidRequirement:
            continue
        if requirement.name.lower() == "torch" and "extra" not in str(requirement.marker or ""):
            torch = f"torch{requirement.specifier}"
    return torch, python


def _wheel_tags(filename: str, metadata: str) -> tuple[str, ...]:
    """Tags as pip sees them (from the file name), else from the WHEEL file's Tag lines."""
    parts = filename.removesuffix(".whl").split("-")
    if len(parts) in (5, 6):
        pythons, abis, platforms = parts[-3:]
        return tuple(f"{p}-{a}-{pl}" for p in pythons.split(".") for a in abis.split(".")
                     for pl in platforms.split("."))
    return tuple(line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Tag:"))


def _directory(root: Path) -> Target:
    from assembler.fsutil import walk

    jobs: list[FileJob] = []
    not_elf: list[str] = []
    seen: set[str] = set()
    tags: tuple[str, ...] = ()
    declared: tuple[str | None, str | None] = (None, None)
    inside = os.path.realpath(root)
    errors: list[OSError] = []
    for dirpath, dirnames, filenames in walk(root, onerror=errors.append):  # links to directories: not followed
        dirnames.sort()
        here = Path(dirpath)
        if here.name.endswith(".dist-info") and "WHEEL" in filenames and here.parent == root:
            tags = _wheel_tags("", _read_small_file(here / "WHEEL", MAX_WHEEL_METADATA))
            if "METADATA" in filenames:
                declared = declared_requirements(_read_small_file(here / "METADATA", MAX_WHEEL_METADATA))
        for name in sorted(filenames):
            full = here / name
            real = os.path.realpath(full)
            named = is_shared_object_name(name)
            if not named and not (os.path.commonpath([inside, real]) == inside and is_elf_file(real)):
                continue  # not called a shared object and not an ELF file inside the tree
            rel = full.relative_to(root).as_posix()
            if os.path.commonpath([inside, real]) != inside:
                raise InputError(
                    f"{full}: symbolic link to {real}, outside the directory audited",
                    hint="audit the link's target by its own path",
                )
            try:
                mode = os.stat(real).st_mode
            except OSError as error:
                raise InputError(f"{full}: {error.strerror or error}") from None
            if not stat.S_ISREG(mode):
                raise InputError(f"{full}: not a regular file (only files and directories are audited)")
            if not is_elf_file(real):
                not_elf.append(rel)
            elif real not in seen:
                seen.add(real)
                jobs.append(FileJob(str(full), rel))
    if errors:
        first = errors[0]
        raise InputError(f"{first.filename or root}: {first.strerror or first}")
    return Target(str(root), "directory", tags, tuple(jobs), *declared, tuple(not_elf))


def _read_small_file(path: Path, limit: int) -> str:
    """A metadata file of a directory tree, refused over ``limit`` bytes."""
    fd = open_regular(str(path))
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None
    if len(data) > limit:
        raise InputError(f"{path}: over the {limit}-byte limit for a WHEEL file")
    return data.decode(errors="replace")


def open_job(job: Job) -> FileSource | StoredMember | DeflatedMember:
    if isinstance(job, FileJob):
        return FileSource(job.path, job.path)
    return open_member(job)
