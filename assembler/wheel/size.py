"""Where a wheel's bytes come from: per bundled dependency, per shared object, and per CUDA
architecture inside each object's ``.nv_fatbin`` section, read in place like the audit does.

A wheel is never unpacked: the zip central directory gives every member's compressed and
uncompressed size; an ELF member is opened through :mod:`assembler.audit.member`, which inflates
only as far as the reads go (section headers come from the end, the fatbin headers are small
reads walking forward).

Attribution of members to dependencies, first that applies: the wheel's own
``*.dist-info/assembler.json`` (the files each dependency placed), else the install globs of
a deps.toml, else the member's top-level directory. Members no dependency claims are grouped as
``(wheel metadata)`` (``*.dist-info/``) or ``(unattributed)``; with the zip's own headers
(``(zip structure)``) every byte of the file is in exactly one group.

The fatbin layout (as nvcc 12/13 write it, read from the files themselves): ``.nv_fatbin`` holds
one or more containers, each a 16-byte header (magic 0xBA55ED50, version, header size, payload
size) followed by entries; an entry header gives its kind (1 PTX, 2 cubin ELF), its own header
size, the payload size, the SM number and flags (0x100000: an ``a`` architecture such as sm_90a,
0x200000: an ``f`` family one such as sm_100f; 0x2000/0x8000: the payload is compressed, with
the uncompressed size in the header). Containers are 8-byte aligned with zero padding between.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assembler.audit.elf import find_section
from assembler.audit.limits import MAX_JSON_DOCUMENT
from assembler.audit.member import DeflatedMember, FileSource, MemberInfo, StoredMember, open_member, read_small_member
from assembler.audit.zipindex import read_index
from assembler.errors import CheckFailed, InputError
from assembler.fsutil import walk
from assembler.jsonfile import loads
from assembler.system import available_cpus

if TYPE_CHECKING:
    from rich.console import Console

    from assembler.manifest import Manifest

SCHEMA = 1
FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTION = ".nv_fatbin"
KIND_PTX, KIND_CUBIN = 1, 2
FLAG_ARCH_SPECIFIC, FLAG_FAMILY = 0x100000, 0x200000
_CONTAINER = struct.Struct("<IHHQ")
# kind, ?, header size, payload size, compressed size, ?, minor, major, arch, name off/len, flags, ?, uncompressed size
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")
_PARALLEL_FROM = 16 << 20  # compressed bytes of shared objects worth a thread pool
_WINDOW = 1 << 20  # bytes of a .nv_fatbin read at once
_NONZERO = re.compile(rb"[^\x00]")
MAX_FATBIN_RECORDS = 1 << 20  # containers plus entries in one .nv_fatbin; real ones hold thousands
METADATA, UNATTRIBUTED, ZIP_STRUCTURE = "(wheel metadata)", "(unattributed)", "(zip structure)"


def format_size(size: int | float) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if abs(size) >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


@dataclass(frozen=True)
class ArchSize:
    """The fatbin entries of one (kind, architecture) in one object."""

    arch: str  # "sm_90a", "sm_100f", "sm_80" for cubins; "compute_90a" for PTX
    kind: str  # "cubin" | "ptx"
    entries: int
    size: int  # bytes in the section: entry headers and payloads as stored
    uncompressed: int  # payload bytes once decompressed (= stored payload when not compressed)

    def to_json(self) -> dict[str, Any]:
        return {"arch": self.arch, "kind": self.kind, "entries": self.entries, "size": self.size,
                "uncompressed": self.uncompressed}


@dataclass(frozen=True)
class Fatbin:
    size: int  # the .nv_fatbin section
    headers: int  # container headers and alignment padding
    archs: tuple[ArchSize, ...]

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "headers": self.headers, "archs": [a.to_json() for a in self.archs]}


@dataclass(frozen=True)
class ObjectSize:
    path: str
    dep: str
    compressed: int
    uncompressed: int
    fatbin: Fatbin | None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "dep": self.dep, "compressed": self.compressed, "uncompressed": self.uncompressed,
                "fatbin": self.fatbin.to_json() if self.fatbin else None}


@dataclass
class GroupSize:
    name: str
    files: int = 0
    compressed: int = 0
    uncompressed: int = 0
    budget: int | None = None

    @property
    def over(self) -> bool:
        return self.budget is not None and self.compressed > self.budget

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "files": self.files, "compressed": self.compressed,
                "uncompressed": self.uncompressed,
                "budget": self.budget, "over": self.over}


@dataclass
class SizeReport:
    path: str
    kind: str  # wheel | directory
    size: int  # the wheel file (or the directory's files)
    attribution: str  # assembler.json | deps.toml | top-level directory
    deps: list[GroupSize] = field(default_factory=list)
    objects: list[ObjectSize] = field(default_factory=list)
    budget: int | None = None  # whole wheel
    seconds: float = 0.0

    @property
    def over(self) -> list[str]:
        """One line per exceeded budget."""
        lines = []
        if self.budget is not None and self.size > self.budget:
            lines.append(f"{Path(self.path).name} is {format_size(self.size)}, over the wheel budget of "
                         f"{format_size(self.budget)}")
        lines += [f"{g.name} ships {format_size(g.compressed)} (compressed), over its budget of "
                  f"{format_size(g.budget or 0)}"
                  for g in self.deps if g.over]
        return lines

    def archs(self) -> list[ArchSize]:
        """Per (arch, kind) over all objects."""
        total: dict[tuple[str, str], list[int]] = {}
        for obj in self.objects:
            for a in obj.fatbin.archs if obj.fatbin else ():
                sums = total.setdefault((a.arch, a.kind), [0, 0, 0])
                sums[0] += a.entries
                sums[1] += a.size
                sums[2] += a.uncompressed
        return [ArchSize(arch, kind, *sums) for (arch, kind), sums in sorted(total.items(), key=_arch_order)]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "path": self.path, "kind": self.kind, "size": self.size, "budget": self.budget,
            "attribution": self.attribution, "deps": [g.to_json() for g in self.deps],
            "objects": [o.to_json() for o in self.objects], "archs": [a.to_json() for a in self.archs()],
            "over_budget": self.over, "seconds": round(self.seconds, 3),
        }


def _arch_order(item: tuple[tuple[str, str], Any]) -> tuple[int, str, str]:
    (arch, kind), _ = item
    digits = re.sub(r"\D", "", arch)
    return (int(digits) if digits else 0, arch, kind)


# -- fatbin --------------------------------------------------------------------------------------


def arch_name(sm: int, flags: int, kind: int = KIND_CUBIN) -> str:
    """nvcc's spelling: sm_90a for a cubin, compute_90a for PTX."""
    suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
    return f"{'compute' if kind == KIND_PTX else 'sm'}_{sm}{suffix}"


class _Window:
    """Forward reads of a section through ``read(offset, length)``, a window at a time: one call
    per ``_WINDOW`` bytes, however small the headers it is asked for."""

    def __init__(self, read: Any, offset: int, size: int) -> None:
        self._read, self._offset, self._size = read, offset, size
        self.start, self.data = 0, b""

    def at(self, pos: int, length: int) -> bytes:
        """Bytes [pos, pos + length) of the section (the caller keeps them inside it and moves forward)."""
        end = self.start + len(self.data)
        if not (self.start <= pos and pos + length <= end):
            if self.start <= pos <= end:  # the next window begins where this one ends: a member inflates on
                more = self._read(self._offset + end, min(max(length, _WINDOW), self._size - end))
                self.data = self.data[pos - self.start :] + more
            else:
                self.data = self._read(self._offset + pos, min(max(length, _WINDOW), self._size - pos))
            self.start = pos
        return self.data[pos - self.start : pos - self.start + length]

    def zeros_from(self, pos: int) -> int:
        """How many zero bytes start at ``pos``, up to the end of the window holding it."""
        self.at(pos, 1)
        found = _NONZERO.search(self.data, pos - self.start)
        return (found.start() if found else len(self.data)) - (pos - self.start)


def split_fatbin(read: Any, offset: int, size: int, name: str) -> Fatbin:
    """Walk the fatbin containers of the section at [offset, offset + size) through ``read(offset,
    length)`` (forward reads, a window at a time) and add up each architecture's entries.

    Time follows the headers, not the bytes: zero padding is skipped a run at a time (a section
    of zeros is one search per window, not a step per 8 bytes), and more than
    ``MAX_FATBIN_RECORDS`` containers and entries is refused (no compiler writes that many)."""
    sums: dict[tuple[str, str], list[int]] = {}
    headers = 0
    pos = 0
    records = 0
    window = _Window(read, offset, size)
    while pos < size:
        if size - pos < _CONTAINER.size:
            headers += size - pos  # trailing padding
            break
        magic, _version, header_size, payload = _CONTAINER.unpack(window.at(pos, _CONTAINER.size))
        if magic == 0:  # alignment padding between containers: to the next 8-byte boundary, or the whole zero run
            step = 8 - pos % 8 if pos % 8 else max(8, (zeros := window.zeros_from(pos)) - zeros % 8)
            step = min(step, size - pos)
            headers += step
            pos += step
            continue
        records += 1
        if magic != FATBIN_MAGIC or header_size < _CONTAINER.size or pos + header_size + payload > size:
            raise InputError(f"{name}: corrupt {FATBIN_SECTION} (no fatbin header at section offset {pos})")
        headers += header_size
        entry, end = pos + header_size, pos + header_size + payload
        while entry < end:
            records += 1
            if records > MAX_FATBIN_RECORDS:
                break
            if end - entry < _ENTRY.size:
                raise InputError(f"{name}: corrupt {FATBIN_SECTION} (entry header cut at section offset {entry})")
            fields = _ENTRY.unpack(window.at(entry, _ENTRY.size))
            kind, entry_header, stored, compressed, sm, flags, uncompressed = (
                fields[0], fields[2], fields[3], fields[4], fields[8], fields[11], fields[13])
            if entry_header < _ENTRY.size or entry + entry_header + stored > end:
                raise InputError(f"{name}: corrupt {FATBIN_SECTION} (entry at section offset {entry} overruns its "
                                 "container)")
            label = "ptx" if kind == KIND_PTX else "cubin" if kind == KIND_CUBIN else f"kind-{kind}"
            sums_for = sums.setdefault((arch_name(sm, flags, kind), label), [0, 0, 0])
            sums_for[0] += 1
            sums_for[1] += entry_header + stored
            sums_for[2] += uncompressed if compressed and uncompressed else stored
            entry += entry_header + stored
        if records > MAX_FATBIN_RECORDS:
            raise InputError(
                f"{name}: {FATBIN_SECTION} holds more than {MAX_FATBIN_RECORDS} fatbin containers and entries "
                "(no compiler writes that many: a corrupt or hostile object)",
                hint="rebuild the object; `assemble audit` reads it without walking its device code",
            )
        pos = end
    archs = tuple(ArchSize(arch, kind, *values) for (arch, kind), values in sorted(sums.items(), key=_arch_order))
    return Fatbin(size=size, headers=headers, archs=archs)


def object_fatbin(source: FileSource | StoredMember | DeflatedMember) -> Fatbin | None:
    found = find_section(source, FATBIN_SECTION)
    if found is None:
        return None
    offset, size = found
    return split_fatbin(source.read, offset, size, source.name)


# -- wheels and directories --------------------------------------------------------------------


@dataclass(frozen=True)
class _Member:
    path: str
    compressed: int
    uncompressed: int
    info: MemberInfo | None = None  # in a wheel
    file: Path | None = None  # in a directory


def owners_from_record(record: Mapping[str, Any], where: str = "assembler.json") -> dict[str, str]:
    """wheel path -> dependency, from an assembler.json document; InputError (exit 2) naming the
    key when a field has the wrong type (the document is data from the wheel, never trusted)."""
    deps = record.get("deps", {}) if isinstance(record, dict) else {}
    hint = "rebuild the wheel with `assemble build` (assembler.json is written by the merge)"
    if not isinstance(deps, dict):
        raise InputError(f"{where}: deps is {type(deps).__name__}, not an object of dependencies", hint=hint)
    owners: dict[str, str] = {}
    for dep, entry in deps.items():
        if not isinstance(entry, dict):
            raise InputError(f"{where}: deps.{dep} is {type(entry).__name__}, not an object", hint=hint)
        files = entry.get("files", [])
        if not isinstance(files, list) or not all(isinstance(path, str) for path in files):
            raise InputError(f"{where}: deps.{dep}.files is not a list of paths", hint=hint)
        owners.update((path, str(dep)) for path in files)
    return owners


def _owner(path: str, owners: Mapping[str, str], rules: Mapping[str, Sequence[Any]] | None) -> str:
    if path in owners:
        return owners[path]
    top = path.split("/", 1)[0]
    if top.endswith(".dist-info"):
        return METADATA
    if rules is not None:
        for dep, dep_rules in rules.items():
            if any(rule.source(path) is not None for rule in dep_rules):
                return dep
        return UNATTRIBUTED
    if owners or "/" not in path:
        return UNATTRIBUTED
    return f"{top}/"


def measure(path: Path, *, installs: Mapping[str, Mapping[str, str]] | None = None, budget: int | None = None,
            dep_budgets: Mapping[str, int] | None = None) -> SizeReport:
    """The size report of a wheel or directory. ``installs`` (deps.toml's install maps)
    attribute members when the wheel carries no assembler.json; budgets mark groups over them."""
    started = time.perf_counter()
    if path.is_dir():
        members, size, record = _directory(path)
        kind = "directory"
    elif path.is_file():
        members, size, record = _wheel(path)
        kind = "wheel"
    else:
        raise InputError(f"{path}: no such wheel or directory", hint="pass a .whl file or an unpacked wheel directory")
    owners = owners_from_record(record, f"{path}: assembler.json") if record else {}
    rules = None
    if owners:
        attribution = "assembler.json"
    elif installs is not None:
        from assembler.wheel.merge import install_rules

        rules = {dep: install_rules(install) for dep, install in installs.items()}
        attribution = "deps.toml install globs"
    else:
        attribution = "top-level directory"
    groups: dict[str, GroupSize] = {}
    shared: list[tuple[_Member, str]] = []
    elves = _elf_paths(path, members, kind)
    for member in members:
        dep = _owner(member.path, owners, rules)
        group = groups.setdefault(dep, GroupSize(dep))
        group.files += 1
        group.compressed += member.compressed
        group.uncompressed += member.uncompressed
        if member.path in elves:
            shared.append((member, dep))
    fatbins = _fatbins([member for member, _ in shared])
    objects = [ObjectSize(m.path, dep, m.compressed, m.uncompressed, fatbin) for (m, dep),
               fatbin in zip(shared, fatbins, strict=True)]
    if kind == "wheel":
        groups[ZIP_STRUCTURE] = GroupSize(ZIP_STRUCTURE, 0, size - sum(m.compressed for m in members), 0)
    for dep, limit in (dep_budgets or {}).items():
        groups.setdefault(dep, GroupSize(dep)).budget = limit
    special = (METADATA, UNATTRIBUTED, ZIP_STRUCTURE)
    ordered = sorted((g for g in groups.values() if g.name not in special), key=lambda g: (-g.compressed, g.name))
    ordered += [groups[name] for name in special if name in groups]
    return SizeReport(path=str(path), kind=kind, size=size, attribution=attribution, deps=ordered, objects=objects,
                      budget=budget, seconds=time.perf_counter() - started)


def _elf_paths(path: Path, members: Sequence[_Member], kind: str) -> set[str]:
    """The members that are shared objects, by content (the ELF magic) as the audit finds them:
    a text file named ``x.so`` is no object, an ELF named ``_V`` is one."""
    from assembler.audit.wheelsource import elf_members, is_elf_file

    if kind == "wheel":
        found, _ = elf_members(str(path), [m.info for m in members if m.info is not None])
        return {info.name for info in found}
    return {m.path for m in members if m.file is not None and is_elf_file(str(m.file))}


def _fatbins(members: Sequence[_Member]) -> list[Fatbin | None]:
    """Each object's fatbin split. Walking a fatbin inflates the member up to its end (zlib,
    which releases the GIL), so large wheels spread the objects over threads, largest first."""
    if sum(m.compressed for m in members if m.info is not None) < _PARALLEL_FROM or len(members) < 2:
        return [_member_fatbin(m) for m in members]
    order = sorted(range(len(members)), key=lambda i: -members[i].compressed)
    with ThreadPoolExecutor(max_workers=available_cpus()) as pool:
        futures = {i: pool.submit(_member_fatbin, members[i]) for i in order}
        try:
            done = {i: future.result() for i, future in futures.items()}
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
    return [done[i] for i in range(len(members))]


def _member_fatbin(member: _Member) -> Fatbin | None:
    source: FileSource | StoredMember | DeflatedMember
    if member.info is not None:
        source = open_member(member.info)
    else:
        assert member.file is not None
        source = FileSource(str(member.file), str(member.file))
    try:
        return object_fatbin(source)
    finally:
        source.close()


def _wheel(path: Path) -> tuple[list[_Member], int, dict[str, Any] | None]:
    infos = read_index(str(path), re.compile(rb""))
    members = [_Member(i.name, i.compress_size, i.file_size, info=i) for i in infos if not i.name.endswith("/")]
    record = None
    found = [i for i in infos if re.fullmatch(r"[^/]+\.dist-info/assembler\.json", i.name)]
    if found:
        record = _json(read_small_member(found[0], MAX_JSON_DOCUMENT), f"{path}: {found[0].name}")
    return members, path.stat().st_size, record


def _directory(root: Path) -> tuple[list[_Member], int, dict[str, Any] | None]:
    members = []
    record = None
    for directory, dirnames, filenames in walk(root):  # no recursion: a 1,200-deep tree is walked too
        dirnames.sort()
        for filename in sorted(filenames):
            full = Path(directory, filename)
            if full.is_symlink() or not full.is_file():
                continue
            rel = full.relative_to(root).as_posix()
            size = full.stat().st_size
            members.append(_Member(rel, size, size, file=full))
            if re.fullmatch(r"[^/]+\.dist-info/assembler\.json", rel):
                record = _json(full.read_bytes(), str(full))
    return members, sum(m.uncompressed for m in members), record


def _json(data: bytes, where: str) -> dict[str, Any]:
    value = loads(data, where, hint="rebuild the wheel with `assemble build`")
    if not isinstance(value, dict):
        raise InputError(f"{where}: not an assembler.json object", hint="rebuild the wheel with `assemble build`")
    return value


def measure_for_manifest(path: Path, manifest: Manifest, budget: int | None = None) -> SizeReport:
    """``measure`` with deps.toml's install globs and budgets (``[bundle] max-wheel-size``,
    ``[deps.X] max-size``); ``budget`` overrides the wheel's."""
    return measure(
        path, installs={name: dep.install for name, dep in manifest.deps.items()},
        budget=budget if budget is not None else manifest.bundle.max_wheel_size,
        dep_budgets={name: dep.max_size for name, dep in manifest.deps.items() if dep.max_size is not None},
    )


def render(report: SizeReport, console: Console) -> None:
    """The breakdown for people: dependencies, then each object with a fatbin split by architecture."""
    from rich.markup import escape

    from assembler.report.table import Cell, TextTable

    total = max(report.size, 1)
    title = (f"{report.path}: {format_size(report.size)}"
             + (f" (budget {format_size(report.budget)})" if report.budget else ""))
    table = TextTable("dependency", "files", "compressed", "share", "uncompressed", "budget",
                      title=(title, f"by dependency ({report.attribution})"),
                      text=("compressed", "uncompressed"),
                      right=("files", "compressed", "share", "uncompressed", "budget"))
    for group in report.deps:
        budget: str | Cell = "-" if group.budget is None else format_size(group.budget)
        if group.over:
            budget = Cell(f"{budget} OVER", "bold", "red")
        compressed = format_size(group.compressed) if report.kind == "wheel" else "-"
        table.add_row(group.name, str(group.files), compressed, f"{100 * group.compressed / total:.1f}%",
                      format_size(group.uncompressed), budget)
    table.print(console.file)
    for obj in report.objects:
        if obj.fatbin is None:
            continue
        arch_table = TextTable("arch", "kind", "entries", "bytes", "of object", "uncompressed",
                               text=("of object", "uncompressed"),
                               right=("entries", "bytes", "of object", "uncompressed"),
                               title=f"{obj.path} ({obj.dep}): {format_size(obj.uncompressed)}, .nv_fatbin "
                                     f"{format_size(obj.fatbin.size)}")
        for arch in obj.fatbin.archs:
            arch_table.add_row(arch.arch, arch.kind, str(arch.entries), format_size(arch.size),
                               f"{100 * arch.size / max(obj.uncompressed, 1):.1f}%", format_size(arch.uncompressed))
        if obj.fatbin.headers:
            arch_table.add_row("(headers)", "", "", format_size(obj.fatbin.headers), "", "")
        arch_table.print(console.file)
    for line in report.over:
        console.print(f"[bold red]over budget:[/] {escape(line)}", soft_wrap=True)


def size_gate(wheel: Path, manifest: Manifest) -> tuple[dict[str, Any], CheckFailed | None]:
    """The build's size check: the breakdown for the build report, and the gate error (exit 1)
    when the wheel or a dependency is over its deps.toml budget."""
    report = measure_for_manifest(wheel, manifest)
    if not report.over:
        return report.to_json(), None
    breakdown = ", ".join(f"{g.name} {format_size(g.compressed)}" for g in report.deps if g.compressed)
    arch = ", ".join(f"{a.arch} {format_size(a.size)}" for a in report.archs())
    return report.to_json(), CheckFailed(
        "size budget: " + "; ".join(report.over) + f" (by dependency: {breakdown}"
        + (f"; by architecture: {arch})" if arch else ")"),
        hint="drop architectures or raise [bundle] max-wheel-size / [deps.X] max-size in deps.toml; `assemble size "
             f"{wheel}` shows the breakdown",
    )


def summary_lines(size: Mapping[str, Any]) -> list[str]:
    """The build report's lines for a ``SizeReport.to_json()``: per dependency, then per architecture."""
    deps = ", ".join(f"{g['name']} {format_size(g['compressed'])}"
                     + (f" (budget {format_size(g['budget'])})" if g["budget"] else "")
                     for g in size.get("deps", []) if g["compressed"])
    lines = [f"size {format_size(size['size'])}"
             + (f" (budget {format_size(size['budget'])})" if size.get("budget") else "") + f": {deps}"]
    archs = ", ".join(f"{a['arch']} {format_size(a['size'])}" for a in size.get("archs", []))
    if archs:
        lines.append(f"CUDA code by architecture: {archs}")
    return lines
