"""The hand-written binary readers of `audit` and `size` against the libraries, doing the same work.

Each reader is timed beside its library, on the same wheel, with the outputs checked equal
(the timing of a reader that reads something else would mean nothing):

1. **index**: every member of the wheel as the audit keeps it (name, offsets, sizes, where its
   data must end, the overlap refusal): the hand-written central-directory walk (zipindex.py as
   of ``--hand-index``, loaded from git) against ``zipfile.ZipFile`` plus the overlap pass the
   audit adds (``zipfile_index``); and bare ``zipfile.ZipFile(...).infolist()`` (the figure
   zipindex's docstring quoted: "zipfile costs 80 ms" on vLLM's wheel).
2. **elf, in the wheel**: per ELF member, what the audit reads (DT_NEEDED, DT_SONAME, the search
   path, every dynamic symbol with defined / local / weak) without unpacking the wheel:
   ``audit.member`` + ``audit.elf`` against (a) ``audit.elf`` reading through ``ZipFile.open``
   (zipfile as the byte source: what member.py's lazy inflate and tail decode are worth),
   (b) pyelftools over the member inflated whole into memory, and with ``--pyelftools-stream``
   (c) pyelftools over ``ZipFile.open`` (seeking back inflates again from the start: minutes).
   The audit reads no symbol versions (nothing asks for them), so neither side does.
3. **elf, on disk**: the same read of the members extracted to files (``assemble audit DIR``,
   verify, loadscope): the cost of the ELF parse alone, no inflating.
4. **section**: where ``.nv_fatbin`` is (`assemble size`): ``audit.elf.find_section`` against
   pyelftools' ``get_section_by_name``, on the extracted files.

Times are the best of ``--rounds`` (page cache warm: one untimed run first); ratio = hand /
library (under 1: the hand-written reader is faster). ``held`` is the most bytes of one member a
reader keeps in memory at once.

    python benchmarks/readers.py [--rounds 5] [WHEEL ...]   (default: vLLM 0.33.0, downloaded once)

Results (issue 31; 2 shared cores under load 5-8, CPython 3.11.7, pyelftools 0.33; best of 5,
index rows best of 15 interleaved, pyelftools over zipfile once; ms):

                                              vLLM 0.33.0 (336 MB)       torch 2.15.0 (539 MB)
                                              5,802 members, 14 ELF      13,187 members, 17 ELF
                                              hand    library  ratio     hand    library  ratio
  index: hand walk vs zipfile + overlap pass   52.3     40.3   1.30     216.0    229.7   0.94
  index: hand walk vs bare zipfile             52.3     34.7   1.51     216.0    127.8   1.69
  index: zipindex now (zipfile) vs bare        52.9     34.7   1.52     250.5    127.8   1.96
  elf in wheel: member.py vs zipfile.open     592     9450     0.063   3621     7182     0.50
  elf in wheel: member+elf vs pyelftools      592    10589     0.056   3621     9233     0.39
     (pyelftools over ZipFile.read holds the largest member whole: 308 MB / 520 MB)
  elf on disk: elf.py vs pyelftools            14.9   1214     0.012    148     2679     0.055
  section: elf.find_section vs pyelftools       0.9     67.9   0.013      0.6     29.5   0.021
  pyelftools over ZipFile.open (--pyelftools-stream), vLLM only: 187 s against 1.0 s.

Acted on: the central-directory walk is no faster than zipfile doing the same work (within the
noise of this machine either way), so zipindex.py is zipfile now, plus the refusals zipfile does
not make; "zipfile costs 80 ms" measured 27-46 ms bare on vLLM's wheel. member.py (lazy inflate,
tail decode) and elf.py stay: 2-16x and 18-80x faster than the libraries, with bounded memory.
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import re
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assembler.audit.elf import DynamicInfo, DynSymbol, find_section, read_dynamic  # noqa: E402
from assembler.audit.member import FileSource, MemberInfo, open_member  # noqa: E402
from assembler.audit.wheelsource import elf_members  # noqa: E402
from assembler.audit.zipindex import read_index  # noqa: E402

T = TypeVar("T")
EVERY = re.compile(rb"")
HAND_INDEX = "ee9395ecca5d3961dc0291fd0676d6c0fffae1a9"  # the last zipindex.py that walked the directory by hand


def best(rounds: int, work: Callable[[], T]) -> tuple[float, T]:
    """(best wall seconds of ``rounds`` runs after an untimed one, the last result)."""
    result = work()
    times = []
    for _ in range(rounds):
        gc.collect()
        started = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - started)
    return min(times), result


def interleaved(rounds: int, works: dict[str, Callable[[], Any]]) -> dict[str, tuple[float, Any]]:
    """``best`` of each, the rounds taking turns: a machine that slows down meanwhile (a shared
    one) slows all of them alike."""
    results = {name: work() for name, work in works.items()}
    times: dict[str, list[float]] = {name: [] for name in works}
    for _ in range(rounds):
        for name, work in works.items():
            gc.collect()
            started = time.perf_counter()
            results[name] = work()
            times[name].append(time.perf_counter() - started)
    return {name: (min(times[name]), results[name]) for name in works}


# -- the library side: what the audit would write with zipfile and pyelftools -------------------


def zipfile_index(wheel: str) -> list[MemberInfo]:
    """read_index's answer from zipfile: the entries, plus where each one's data must end (the next
    local header, or the central directory), which the audit needs to refuse overlapping entries."""
    with zipfile.ZipFile(wheel) as archive:
        infos = archive.infolist()
        directory_at = archive.start_dir
    spans = sorted((info.header_offset, n) for n, info in enumerate(infos))
    following: dict[int, tuple[int, str | None]] = {}
    for (offset, n), (next_offset, next_n) in zip(spans, [*spans[1:], (directory_at, -1)], strict=True):
        info = infos[n]
        if offset + 30 + len(info.orig_filename.encode()) + info.compress_size > next_offset:
            raise zipfile.BadZipFile(f"{wheel}: {info.filename} overlaps the next entry")
        following[offset] = (next_offset, infos[next_n].filename if next_n >= 0 else None)
    return [MemberInfo(wheel, i.filename, i.header_offset, i.compress_type, i.compress_size, i.file_size,
                       *following[i.header_offset]) for i in infos]


def pyelftools_dynamic(stream: IO[bytes]) -> DynamicInfo:
    """read_dynamic's answer from pyelftools (sections, as ``nm -D`` and auditwheel read them)."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    elf = ELFFile(stream)
    dynamic = next((s for s in elf.iter_sections() if isinstance(s, DynamicSection)), None)
    dynsym = next((s for s in elf.iter_sections() if isinstance(s, SymbolTableSection)
                   and s["sh_type"] == "SHT_DYNSYM"),
                  None)
    if dynamic is None or dynsym is None:
        return DynamicInfo(symbols=(), needed=(), soname=None)
    symbols = tuple(
        DynSymbol(s.name, s["st_shndx"] != "SHN_UNDEF", s["st_info"]["bind"] == "STB_LOCAL",
                  s["st_info"]["bind"] == "STB_WEAK")
        for n, s in enumerate(dynsym.iter_symbols()) if n
    )
    tags: dict[str, list[Any]] = {}
    for tag in dynamic.iter_tags():
        tags.setdefault(tag.entry.d_tag, []).append(tag)
    runpath = [t.runpath for t in tags.get("DT_RUNPATH", [])] or [t.rpath for t in tags.get("DT_RPATH", [])]
    return DynamicInfo(
        symbols=symbols,
        needed=tuple(t.needed for t in tags.get("DT_NEEDED", [])),
        soname=tags["DT_SONAME"][0].soname if "DT_SONAME" in tags else None,
        runpath=tuple(entry for value in runpath for entry in value.split(":") if entry),
    )


def pyelftools_section(path: Path, name: str) -> tuple[int, int] | None:
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as f:
        section = ELFFile(f).get_section_by_name(name)
        return (None if section is None or section["sh_type"] == "SHT_NOBITS"
                else (section["sh_offset"], section["sh_size"]))


# -- the hand-written side, as the audit and size call it ---------------------------------------


class ZipFileSource:
    """audit.elf's ByteSource over ``ZipFile.open``: zipfile inflating, seeking as asked."""

    used_tail = False

    def __init__(self, archive: zipfile.ZipFile, name: str) -> None:
        self.name, self.size = name, archive.getinfo(name).file_size
        self._member = archive.open(name)

    def read(self, offset: int, length: int) -> bytes:
        self._member.seek(offset)
        return self._member.read(length)

    def retain_head(self, length: int) -> None:
        """zipfile keeps nothing but its read buffer."""

    def prefetch_tail(self, offset: int) -> None:
        """zipfile reaches the end by inflating up to it."""

    def cheap(self, offset: int, length: int) -> bool:
        return True

    def forget_tail(self) -> None:
        """No tail is decoded."""


def elf_over_zipfile(wheel: str, name: str) -> DynamicInfo:
    with zipfile.ZipFile(wheel) as archive:
        return read_dynamic(ZipFileSource(archive, name))


def hand_index(commit: str) -> Callable[[str], list[MemberInfo]]:
    """read_index of assembler/audit/zipindex.py at ``commit`` (the hand-written walk, before issue 31
    replaced it with zipfile), every member, as the audit asked for them."""
    import subprocess
    import types

    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:assembler/audit/zipindex.py"],
                            check=True, capture_output=True, text=True).stdout
    module = types.ModuleType("hand_zipindex")
    exec(compile(source, f"zipindex.py@{commit[:10]}", "exec"), module.__dict__)
    read: Callable[[str, re.Pattern[bytes]], list[MemberInfo]] = module.read_index
    return lambda path: read(path, EVERY)


def hand_member(info: MemberInfo) -> DynamicInfo:
    source = open_member(info)
    try:
        return read_dynamic(source)
    finally:
        source.close()


def hand_file(path: Path) -> DynamicInfo:
    source = FileSource(str(path), str(path))
    try:
        return read_dynamic(source)
    finally:
        source.close()


def hand_section(path: Path, name: str) -> tuple[int, int] | None:
    source = FileSource(str(path), str(path))
    try:
        return find_section(source, name)
    finally:
        source.close()


def zip_stream(wheel: str, name: str) -> DynamicInfo:
    with zipfile.ZipFile(wheel) as archive, archive.open(name) as member:
        return pyelftools_dynamic(member)


def zip_memory(wheel: str, name: str) -> DynamicInfo:
    with zipfile.ZipFile(wheel) as archive:
        return pyelftools_dynamic(io.BytesIO(archive.read(name)))


# -- the report -----------------------------------------------------------------------------------


def row(what: str, hand: float, library: float, note: str = "") -> str:
    return f"  {what:<46} {hand * 1000:10.1f} ms {library * 1000:10.1f} ms {hand / library:7.3f}  {note}"


def compare(wheel: Path, args: argparse.Namespace, tmp: Path) -> list[str]:
    """The rows for one wheel; AssertionError when a library reads something else than the hand reader."""
    path, rounds, stream_rounds = str(wheel), args.rounds, args.stream_rounds
    lines = [f"{wheel.name}: {wheel.stat().st_size / 1e6:.0f} MB"]
    old = hand_index(args.hand_index)
    index = interleaved(3 * rounds, {"hand": lambda: old(path), "library": lambda: zipfile_index(path),
                                     "now": lambda: read_index(path, EVERY),
                                     "bare": lambda: zipfile.ZipFile(path).infolist()})
    (hand_s, hand_index_), (lib_s, lib_index), (now_s, now_index), (bare_s, bare) = index.values()
    assert hand_index_ == lib_index == now_index, "zipfile and the hand-written walk list different members"
    elves, _ = elf_members(path, now_index)
    lines[0] += f", {len(now_index):,} members, {len(elves)} ELF members"
    lines.append(f"  {'':<46} {'hand':>13} {'library':>13} {'ratio':>7}")
    lines.append(row("index: hand walk vs zipfile + overlap pass", hand_s, lib_s))
    lines.append(row("index: hand walk vs bare zipfile infolist", hand_s, bare_s, f"({len(bare):,} ZipInfo)"))
    lines.append(row("index: zipindex.read_index now vs bare zipfile", now_s, bare_s))

    largest = max(elves, key=lambda e: e.file_size)
    hand_s, hand_elf = best(rounds, lambda: [hand_member(e) for e in elves])
    over_s, over_elf = best(stream_rounds, lambda: [elf_over_zipfile(path, e.name) for e in elves])
    assert hand_elf == over_elf, "audit.elf reads differently through zipfile"
    lines.append(row("elf in wheel: member.py vs zipfile.open (+elf.py)", hand_s, over_s))
    mem_s, mem_elf = best(stream_rounds, lambda: [zip_memory(path, e.name) for e in elves])
    assert hand_elf == mem_elf, "pyelftools and audit.elf read different dynamic sections"
    lines.append(row("elf in wheel: member+elf vs pyelftools(read)", hand_s, mem_s,
                     f"held {largest.file_size / 1e6:.0f} MB by the library"))
    if args.pyelftools_stream:
        stream_s, stream_elf = best(stream_rounds, lambda: [zip_stream(path, e.name) for e in elves])
        assert hand_elf == stream_elf
        lines.append(row("elf in wheel: member+elf vs pyelftools(open)", hand_s, stream_s))
    most = max(elves, key=lambda e: len(hand_member(e).symbols))
    for one in dict.fromkeys((largest, most)):
        one_hand, _ = best(rounds, lambda one=one: hand_member(one))  # type: ignore[misc]
        one_lib, _ = best(stream_rounds, lambda one=one: zip_memory(path, one.name))  # type: ignore[misc]
        lines.append(row(f"  of which {Path(one.name).name}", one_hand, one_lib,
                         f"({one.file_size / 1e6:.0f} MB, {len(hand_member(one).symbols):,} dynamic symbols)"))

    files = []
    with zipfile.ZipFile(path) as archive:
        for n, e in enumerate(elves):
            target = tmp / f"{wheel.stem}-{n}.so"
            with archive.open(e.name) as member, target.open("wb") as out:
                while chunk := member.read(1 << 22):
                    out.write(chunk)
            files.append(target)
    hand_s, hand_disk = best(rounds, lambda: [hand_file(f) for f in files])
    lib_s, lib_disk = best(stream_rounds, lambda: [pyelftools_dynamic(f.open("rb")) for f in files])
    assert hand_disk == lib_disk == hand_elf
    lines.append(row("elf on disk: elf.read_dynamic vs pyelftools", hand_s, lib_s))
    hand_s, hand_sec = best(rounds, lambda: [hand_section(f, ".nv_fatbin") for f in files])
    lib_s, lib_sec = best(rounds, lambda: [pyelftools_section(f, ".nv_fatbin") for f in files])
    assert hand_sec == lib_sec, "pyelftools and audit.elf find .nv_fatbin in different places"
    lines.append(row("section: elf.find_section vs pyelftools", hand_s, lib_s,
                     f"({sum(s is not None for s in hand_sec)} with .nv_fatbin)"))
    for f in files:
        f.unlink()
    return lines


def default_wheels() -> list[Path]:
    from benchmarks.audit_vllm import fetch

    return [fetch()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheels", nargs="*", type=Path, help="wheels to read (default: vLLM 0.33.0)")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each fast reader (the best is reported)")
    parser.add_argument("--stream-rounds", type=int, default=2,
                        help="runs of each reader that inflates whole members (pyelftools over zipfile)")
    parser.add_argument("--pyelftools-stream", action="store_true",
                        help="also pyelftools over ZipFile.open (minutes: every seek back inflates from the start)")
    parser.add_argument("--hand-index", default=HAND_INDEX,
                        help="the commit whose zipindex.py is the hand-written central-directory walk timed")
    args = parser.parse_args(argv)
    import elftools

    print(f"CPython {sys.version.split()[0]}, pyelftools {elftools.__version__}, {len(os.sched_getaffinity(0))} CPUs, "
          f"load {os.getloadavg()[0]:.1f}; best of {args.rounds} (library over zipfile: best of {args.stream_rounds})")
    with tempfile.TemporaryDirectory() as tmp:
        for wheel in args.wheels or default_wheels():
            print("\n".join(compare(wheel, args, Path(tmp))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
