"""Dynamic symbols and DT_NEEDED of an ELF shared object, read through a :class:`ByteSource`.

Everything comes from where the dynamic loader looks: the program headers (at the start) give
``PT_DYNAMIC``; ``.dynamic`` gives ``DT_SYMTAB``, ``DT_STRTAB``, ``DT_STRSZ``, the hash table and
``DT_NEEDED``.  The number of symbols comes from the section headers when they are at hand (as
``nm`` counts), else from ``DT_GNU_HASH`` / ``DT_HASH`` (as the loader does).  When the end of
the file was decoded from the middle of a deflate stream (see :mod:`assembler.audit.deflate`),
the section headers must agree with the program headers and ``.dynamic`` or that decode is
discarded and the member inflated from the start.

Every table read whole is capped (:mod:`assembler.audit.limits`): a header that declares a
390 MB string table is refused, not honoured.  Any malformed input ends in InputError naming
the object.

Kept by hand because the numbers demand it (benchmarks/readers.py, issue 31): the same read
(DT_NEEDED, DT_SONAME, the search path, every dynamic symbol) of vLLM 0.33.0's 14 ELF members,
extracted, takes 15 ms here and 1.2 s with pyelftools (80x); torch 2.15.0's 17 take 0.15 s
against 2.7 s (18x). `assemble size` finds sections with :func:`find_section` (0.9 ms against
68 ms for pyelftools' get_section_by_name).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from assembler.audit.limits import MAX_NAME, MAX_STRING_TABLE, MAX_TABLE, PIECE, STRING_TABLE_IN_MEMORY
from assembler.audit.member import ByteSource
from assembler.errors import InputError

ELF_MAGIC = b"\x7fELF"  # the first four bytes of every ELF file
PT_LOAD, PT_DYNAMIC = 1, 2
SHT_DYNAMIC, SHT_NOBITS, SHT_DYNSYM = 6, 8, 11
DT_NULL, DT_NEEDED, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT, DT_SONAME = 0, 1, 4, 5, 6, 10, 11, 14
DT_RPATH, DT_RUNPATH = 15, 29  # the loader's search path, "$ORIGIN/..." for a library shipped alongside
DT_GNU_HASH = 0x6FFFFEF5
STB_LOCAL, STB_WEAK = 0, 2


class DynSymbol(NamedTuple):
    name: str
    defined: bool
    local: bool
    weak: bool = False  # a weak reference: the object loads without a definition


@dataclass(frozen=True)
class DynamicInfo:
    symbols: tuple[DynSymbol, ...]  # .dynsym without its null entry
    needed: tuple[str, ...]
    soname: str | None
    runpath: tuple[str, ...] = ()  # DT_RUNPATH's entries, else DT_RPATH's (the loader ignores RPATH beside RUNPATH)


@dataclass(frozen=True)
class _Layout:
    """struct formats for one ELF class and byte order."""

    endian: str
    header: str
    phdr: str
    shdr: str
    dyn: str
    sym: str
    word: int  # bytes in a GNU hash bloom word

    def unpack(self, fmt: str, data: bytes, offset: int = 0) -> tuple[Any, ...]:
        return struct.unpack_from(self.endian + fmt, data, offset)

    def size(self, fmt: str) -> int:
        return struct.calcsize(self.endian + fmt)


_ELF64 = ("16sHHIQQQIHHHHHH", "IIQQQQQQ", "IIQQQQIIQQ", "qQ", "IBBHQQ", 8)
_ELF32 = ("16sHHIIIIIHHHHHH", "IIIIIIII", "IIIIIIIIII", "iI", "IIIBBH", 4)


class _TailMismatch(Exception):
    """Section headers decoded from the tail do not fit the rest of the file."""


class _Segment(NamedTuple):
    offset: int
    vaddr: int
    filesz: int


def read_dynamic(src: ByteSource, defined_prefixes: tuple[bytes, ...] | None = None) -> DynamicInfo:
    """The dynamic symbols, DT_NEEDED and DT_SONAME of ``src``; InputError when it is not a sound ELF.

    With ``defined_prefixes``, defined symbols are only kept (and their names only decoded) when
    their name starts with one of them: large objects export thousands of symbols an audit skips.
    """
    try:
        try:
            return _read(src, defined_prefixes)
        except (_TailMismatch, InputError):
            if not src.used_tail:
                raise
            src.forget_tail()  # whatever looked wrong may be the decoded tail's fault: read it the slow way
        return _read(src, defined_prefixes)
    except (struct.error, IndexError, ValueError, OverflowError, KeyError) as error:
        # A layout the checks above do not foresee: still one line naming the object (the fuzz
        # suite fails on this message, so each one found gets its own check and wording).
        raise InputError(f"{src.name}: corrupt ELF (unexpected layout: {type(error).__name__}: {error})") from None


def _table(src: ByteSource, offset: int, length: int, what: str, limit: int = MAX_TABLE) -> bytes:
    """``length`` bytes of a table read whole, refused over ``limit`` (or past the object's end)."""
    if length > limit:
        raise InputError(f"{src.name}: {what} of {length} bytes is over the {limit}-byte limit (corrupt or "
                         "hostile ELF)")
    return src.read(offset, length)


def find_section(src: ByteSource, name: str) -> tuple[int, int] | None:
    """(offset, size) of the section called ``name`` whose bytes are in the file (not SHT_NOBITS);
    None when there is none, or no section headers. `assemble size` finds ``.nv_fatbin`` with it:
    the section headers and their name table are read like every table here (capped, bounded),
    from the decoded tail of a deflated member when that is cheaper than inflating up to them."""
    lay = _layout(src)
    hdr = lay.unpack(lay.header, src.read(0, lay.size(lay.header)))
    shoff, shentsize, shnum, shstrndx = hdr[6], hdr[11], hdr[12], hdr[13]
    if not shoff or shentsize < lay.size(lay.shdr) or not shnum or shstrndx >= shnum:
        return None
    src.prefetch_tail(shoff)
    table = _table(src, shoff, shnum * shentsize, "section header table")
    sections = [lay.unpack(lay.shdr, table, i * shentsize) for i in range(shnum)]
    names_at, names_size = sections[shstrndx][4], sections[shstrndx][5]
    src.prefetch_tail(names_at)  # .shstrtab sits just before the section headers
    names = _table(src, names_at, names_size, "section name table")
    wanted = name.encode() + b"\0"
    for sh_name, sh_type, _flags, _addr, sh_offset, sh_size, *_ in sections:
        if names[sh_name : sh_name + len(wanted)] == wanted and sh_type != SHT_NOBITS:
            return int(sh_offset), int(sh_size)
    return None


def _layout(src: ByteSource) -> _Layout:
    ident = src.read(0, min(16, src.size))
    if ident[:4] != ELF_MAGIC:
        raise InputError(f"{src.name}: not an ELF file (a shared object was expected)")
    if len(ident) < 16:
        raise InputError(f"{src.name}: truncated ELF ({len(ident)} bytes, shorter than the 16-byte ELF identification)")
    if ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise InputError(f"{src.name}: unknown ELF class {ident[4]} / byte order {ident[5]}")
    header, phdr, shdr, dyn, sym, word = _ELF64 if ident[4] == 2 else _ELF32
    return _Layout("<" if ident[5] == 1 else ">", header, phdr, shdr, dyn, sym, word)


def _read(src: ByteSource, defined_prefixes: tuple[bytes, ...] | None) -> DynamicInfo:
    lay = _layout(src)
    hdr = lay.unpack(lay.header, src.read(0, lay.size(lay.header)))
    e_phoff, e_shoff = hdr[5], hdr[6]
    e_phentsize, e_phnum, e_shentsize, e_shnum = hdr[9], hdr[10], hdr[11], hdr[12]
    if e_phnum and e_phentsize < lay.size(lay.phdr):
        raise InputError(f"{src.name}: corrupt ELF program header size {e_phentsize}")
    raw = _table(src, e_phoff, e_phnum * e_phentsize, "program header table")
    loads: list[_Segment] = []
    dynamic: _Segment | None = None
    for i in range(e_phnum):
        p = lay.unpack(lay.phdr, raw, i * e_phentsize)
        # ELF64 puts p_flags second; ELF32 puts it sixth: offset, vaddr, filesz are at fixed spots.
        seg = _Segment(p[2], p[3], p[5]) if lay.word == 8 else _Segment(p[1], p[2], p[4])
        if p[0] == PT_LOAD:
            loads.append(seg)
        elif p[0] == PT_DYNAMIC:
            dynamic = seg
    if dynamic is None:
        return DynamicInfo(symbols=(), needed=(), soname=None)
    for seg in loads:
        if seg.offset == 0:
            src.retain_head(seg.filesz)
    src.prefetch_tail(min(dynamic.offset, e_shoff) if e_shoff else dynamic.offset)

    entries = _dynamic_entries(src, lay, dynamic)

    def address(tag: int) -> int | None:
        values = entries.get(tag)
        return _file_offset(src, loads, values[0], tag) if values else None

    symtab, strtab = address(DT_SYMTAB), address(DT_STRTAB)
    if symtab is None or strtab is None:
        raise InputError(f"{src.name}: .dynamic has no DT_SYMTAB or DT_STRTAB (corrupt ELF)")
    syment = entries.get(DT_SYMENT, [lay.size(lay.sym)])[0]
    strsz = entries.get(DT_STRSZ, [None])[0]

    count: int | None = None
    sections = _section_headers(src, lay, e_shoff, e_shnum, e_shentsize)
    if sections is not None:
        count, sh_strsz = _check_sections(src, sections, dynamic, entries, symtab)
        strsz = strsz if strsz is not None else sh_strsz
    elif src.used_tail:
        raise _TailMismatch  # nothing to cross-check the decoded tail with
    if count is None:
        count = _hash_count(src, lay, address(DT_GNU_HASH), address(DT_HASH))
    if count is None or strsz is None:
        raise InputError(f"{src.name}: cannot size .dynsym / .dynstr (no section headers, hash table or DT_STRSZ)")

    if syment != lay.size(lay.sym):
        raise InputError(f"{src.name}: unexpected dynamic symbol size {syment} (corrupt ELF)")
    if strsz > MAX_STRING_TABLE:
        raise InputError(
            f"{src.name}: dynamic string table (DT_STRSZ) of {strsz} bytes is over the {MAX_STRING_TABLE}-byte limit "
            "(corrupt or hostile ELF)"
        )
    table = _table(src, symtab, count * syment, "dynamic symbol table")
    name_at, info_at, shndx_at = (0, 1, 3) if lay.word == 8 else (0, 3, 5)
    entries_ = list(struct.iter_unpack(lay.endian + lay.sym, table[syment:]))
    soname = entries.get(DT_SONAME)
    strings: _Strings
    if strsz <= STRING_TABLE_IN_MEMORY:
        strings = _WholeStrings(src, src.read(strtab, strsz))
    else:  # large (intel-extension-for-pytorch's is 40.9 MB): read only around the names used, in order
        offsets = [st[name_at] for st in entries_]
        offsets += entries.get(DT_NEEDED, []) + (soname or []) + entries.get(DT_RUNPATH, []) + entries.get(DT_RPATH, [])
        strings = _StreamedStrings(src, strtab, strsz, offsets)
    symbols = []
    for st in entries_:
        defined = st[shndx_at] != 0
        if defined and defined_prefixes is not None and not strings.startswith(defined_prefixes, st[name_at]):
            continue
        bind = st[info_at] >> 4
        symbols.append(DynSymbol(strings.get(st[name_at]), defined, bind == STB_LOCAL, bind == STB_WEAK))
    return DynamicInfo(
        symbols=tuple(symbols),
        needed=tuple(strings.get(v) for v in entries.get(DT_NEEDED, [])),
        soname=strings.get(soname[0]) if soname else None,
        runpath=tuple(entry for v in entries.get(DT_RUNPATH, entries.get(DT_RPATH, []))
                      for entry in strings.get(v).split(":") if entry),
    )


class _Strings:
    """Names from ``.dynstr`` by offset."""

    def get(self, offset: int) -> str:
        raise NotImplementedError

    def startswith(self, prefixes: tuple[bytes, ...], offset: int) -> bool:
        raise NotImplementedError


class _WholeStrings(_Strings):
    """The table read whole (every real object but the very largest)."""

    def __init__(self, src: ByteSource, data: bytes) -> None:
        self._src, self._data = src, data

    def get(self, offset: int) -> str:
        return _string(self._src, self._data, offset)

    def startswith(self, prefixes: tuple[bytes, ...], offset: int) -> bool:
        return self._data.startswith(prefixes, offset)


class _StreamedStrings(_Strings):
    """A large table read forward once, a window at a time, keeping only the names asked for.

    Memory is one window (PIECE, grown to the longest name, at most MAX_NAME) plus the names."""

    def __init__(self, src: ByteSource, base: int, size: int, offsets: list[int]) -> None:
        self._src = src
        self._names: dict[int, bytes] = {}
        start, window = 0, b""
        for offset in sorted(set(offsets)):
            if offset >= size:
                continue  # get() reports it
            if not start <= offset < start + len(window):
                start, window = offset, src.read(base + offset, min(PIECE, size - offset))
            end = window.find(b"\0", offset - start)
            while end < 0:
                if start + len(window) >= size:
                    raise InputError(f"{src.name}: string at offset {offset} runs past the end of .dynstr "
                                     "(corrupt ELF)")
                if start + len(window) - offset > MAX_NAME:
                    raise InputError(f"{src.name}: a symbol name over the {MAX_NAME}-byte limit at .dynstr offset "
                                     f"{offset} (corrupt or hostile ELF)")
                window = window[offset - start :] + src.read(base + start + len(window),
                                                             min(PIECE, size - start - len(window)))
                start = offset
                end = window.find(b"\0")
            self._names[offset] = window[offset - start : end]

    def get(self, offset: int) -> str:
        name = self._names.get(offset)
        if name is None:
            raise InputError(f"{self._src.name}: string offset {offset} outside .dynstr (corrupt ELF)")
        return name.decode("utf-8", "replace")

    def startswith(self, prefixes: tuple[bytes, ...], offset: int) -> bool:
        return self._names.get(offset, b"").startswith(prefixes)


def _dynamic_entries(src: ByteSource, lay: _Layout, dynamic: _Segment) -> dict[int, list[int]]:
    raw = _table(src, dynamic.offset, dynamic.filesz, "PT_DYNAMIC segment")
    entries: dict[int, list[int]] = {}
    for tag, value in struct.iter_unpack(lay.endian + lay.dyn, raw[: len(raw) - len(raw) % lay.size(lay.dyn)]):
        if tag == DT_NULL:
            return entries
        entries.setdefault(tag, []).append(value)
    if src.used_tail:
        raise _TailMismatch
    raise InputError(f"{src.name}: .dynamic has no DT_NULL terminator (corrupt ELF)")


def _file_offset(src: ByteSource, loads: list[_Segment], vaddr: int, tag: int) -> int:
    for seg in loads:
        if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
            return vaddr - seg.vaddr + seg.offset
    if src.used_tail:
        raise _TailMismatch
    raise InputError(f"{src.name}: dynamic tag {tag:#x} points outside every loaded segment (corrupt ELF)")


def _section_headers(src: ByteSource, lay: _Layout, shoff: int, shnum: int,
                     shentsize: int) -> list[tuple[Any, ...]] | None:
    """Section headers, when present and cheap to read (a file, or inside the decoded tail)."""
    if not shoff or shentsize < lay.size(lay.shdr):
        return None
    if shnum == 0:  # extended numbering: the count sits in section 0's sh_size
        if not src.cheap(shoff, shentsize):
            return None
        shnum = lay.unpack(lay.shdr, src.read(shoff, shentsize))[5]
    if not src.cheap(shoff, shnum * shentsize) or shoff + shnum * shentsize > src.size:
        return None
    raw = _table(src, shoff, shnum * shentsize, "section header table")
    return [lay.unpack(lay.shdr, raw, i * shentsize) for i in range(shnum)]


def _check_sections(
    src: ByteSource, sections: list[tuple[Any, ...]], dynamic: _Segment, entries: dict[int, list[int]], symtab: int
) -> tuple[int | None, int | None]:
    """The .dynsym entry count and .dynstr size from the section headers, if they agree with .dynamic.

    Fields of a section header: name, type, flags, addr, offset, size, link, info, align, entsize.
    """
    dynsym = next((s for s in sections if s[1] == SHT_DYNSYM and s[4] == symtab), None)
    dynsec = next((s for s in sections if s[1] == SHT_DYNAMIC), None)
    agree = (
        dynsym is not None
        and dynsec is not None
        and dynsec[4] == dynamic.offset
        and dynsym[3] == entries[DT_SYMTAB][0]
        and dynsym[9] > 0
        and dynsym[6] < len(sections)
        and sections[dynsym[6]][3] == entries[DT_STRTAB][0]
        and (DT_STRSZ not in entries or sections[dynsym[6]][5] == entries[DT_STRSZ][0])
    )
    if not agree:
        if src.used_tail:
            raise _TailMismatch
        return None, None  # odd section headers (stripped by a tool?): the loader's view decides
    assert dynsym is not None
    return dynsym[5] // dynsym[9], sections[dynsym[6]][5]


def _hash_count(src: ByteSource, lay: _Layout, gnu_hash: int | None, sysv_hash: int | None) -> int | None:
    """Number of .dynsym entries from DT_GNU_HASH (last chain's end) or DT_HASH (nchain)."""
    if sysv_hash is not None:
        return int(lay.unpack("I", src.read(sysv_hash + 4, 4))[0])
    if gnu_hash is None:
        return None
    nbuckets, symoffset, bloom_size, _shift = lay.unpack("4I", src.read(gnu_hash, 16))
    buckets_at = gnu_hash + 16 + bloom_size * lay.word
    buckets = lay.unpack(f"{nbuckets}I", _table(src, buckets_at, 4 * nbuckets, "DT_GNU_HASH bucket table"))
    last = max(buckets, default=0)
    if last < symoffset:
        return int(symoffset)
    chain_at = buckets_at + 4 * nbuckets
    index = last
    while True:  # walk the last bucket's chain to its terminator (low bit set)
        n = min(256, (src.size - (chain_at + 4 * (index - symoffset))) // 4)
        if n <= 0:
            raise InputError(f"{src.name}: unterminated DT_GNU_HASH chain (corrupt ELF)")
        if 4 * (index - symoffset) > MAX_TABLE:
            raise InputError(f"{src.name}: DT_GNU_HASH chain over the {MAX_TABLE}-byte limit (corrupt or hostile ELF)")
        chain = lay.unpack(f"{n}I", src.read(chain_at + 4 * (index - symoffset), 4 * n))
        for value in chain:
            if value & 1:
                return index + 1
            index += 1


def _string(src: ByteSource, strings: bytes, offset: int) -> str:
    end = strings.find(b"\0", offset)
    if offset >= len(strings) or end < 0:
        raise InputError(f"{src.name}: string offset {offset} outside .dynstr (corrupt ELF)")
    return strings[offset:end].decode("utf-8", "replace")
