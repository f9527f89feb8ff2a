"""Can every symbol an object imports be found in its load scope, not only torch's?

:mod:`assembler.audit.torchlibs` judges torch's own symbols against torch's tables. The rest of an
extension's imports (its own kernels, CUDA's runtime, libstdc++) come from the other libraries of
its ``DT_NEEDED`` tree, which the loader searches the same way. A symbol none of them defines is
"undefined symbol" at ``import`` time: a kernel unit left out of the build, a library not linked.
The build's own linker does not say so, because a shared object may leave symbols undefined.

A symbol is only judged when every library of the tree is known here with all its exports:

- torch's libraries from a real ``torch/lib`` (a table read from a wheel or the shipped table has
  the shim symbols only, so a tree through one of those is not judged);
- any other library found in ``library_dirs`` (the build's CUDA toolkit) or the dynamic linker's
  cache (``ldconfig -p``), read with the audit's own ELF reader;
- ``libcuda.so.1``, the GPU driver, which no builder has: it is taken to define the driver API
  (``cu*``) and nothing else.

A library shipped in the same wheel is found as the loader finds it, through an ``$ORIGIN`` entry
of the requesting object's RUNPATH/RPATH (:class:`Bundled`). Every import defined by a known
library resolves whatever else is unknown; an import none of the known ones defines is claimed
missing only when every library of the tree is known, else the object is left unjudged with the
reasons (a library of another machine, a torch known by its shim symbols only). The
interpreter's symbols (``Py*``, ``_Py*``) are the CPython audit's, its libc and libm are global
scope, and weak references need no definition.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from assembler.audit.elf import ELF_MAGIC, read_dynamic
from assembler.audit.member import DeflatedMember, FileSource
from assembler.audit.torchlibs import GLOBAL_DEPS, TorchLibraries, is_torch_symbol
from assembler.errors import InputError

# Libraries only a GPU machine has, and the symbol prefixes they are taken to define.
RUNTIME_ONLY: dict[str, tuple[str, ...]] = {"libcuda.so.1": ("cu",)}
INTERPRETER_PREFIXES = ("Py", "_Py")
# The interpreter's own tree is global scope for every extension: it always brings libc.
INTERPRETER_LIBRARIES = ("libc.so.6", "libm.so.6")
# x86-64 ld.so's default directories, searched when ldconfig is missing or says nothing.
_DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
_LDCONFIG_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$")


@dataclass(frozen=True)
class Judgement:
    """What the load scope says of an object's other imports: the symbols nothing defines, or
    why they were not judged."""

    missing: tuple[str, ...] = ()
    unjudged: str | None = None


@dataclass(frozen=True)
class Library:
    """What the load scope needs of one library: its defined exports, DT_NEEDED and search path."""

    exports: frozenset[str]
    needed: tuple[str, ...]
    runpath: tuple[str, ...] = ()


@dataclass(frozen=True)
class Bundled:
    """The shared objects shipped in the same wheel (or directory), by their path in it: where
    the loader finds a DT_NEEDED through an ``$ORIGIN`` entry of the requesting object's
    RUNPATH/RPATH (``libdgl.so`` beside its extension, ``$ORIGIN/../lib/libOpen3D.so.0.20``)."""

    paths: frozenset[str]  # POSIX paths of the target's ELF objects
    read: Callable[[str], Library | None]  # the full exports of the object at a path (None: unreadable)

    def locate(self, name: str, origin: str, runpath: Sequence[str]) -> tuple[str, Library] | None:
        """The object the loader would take for DT_NEEDED ``name`` of an object in directory
        ``origin`` with ``runpath``; only ``$ORIGIN`` entries lead into the wheel."""
        if "/" in name:
            return None
        for entry in runpath:
            if "$ORIGIN" not in entry and "${ORIGIN}" not in entry:
                continue
            directory = entry.replace("${ORIGIN}", origin or ".").replace("$ORIGIN", origin or ".")
            candidate = posixpath.normpath(posixpath.join(directory, name))
            if candidate in self.paths and (library := self.read(candidate)) is not None:
                return candidate, library
        return None


@cache
def _linker_cache() -> dict[str, str]:
    """soname -> path for this machine's x86-64 libraries, as ``ldconfig -p`` lists them."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        for ldconfig in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
            try:
                listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=20,
                                         check=False).stdout
            except FileNotFoundError:
                continue
            for line in listing.splitlines():
                match = _LDCONFIG_LINE.match(line)
                if match and "x86-64" in match[2]:
                    found.setdefault(match[1], match[3])
            break
    return found


@cache
def _read_library(path: str, size: int, mtime_ns: int) -> Library | None:
    """Every defined export and the DT_NEEDED of one library (size and mtime key the cache)."""
    try:
        source = FileSource(path, Path(path).name)
    except (InputError, OSError):
        return None
    return library_of(source)


def library_of(source: FileSource | DeflatedMember) -> Library | None:
    """What the load scope needs of the ELF object ``source`` (closed here); None when it is
    not one, or cannot be read."""
    try:
        if source.size < len(ELF_MAGIC) or source.read(0, len(ELF_MAGIC)) != ELF_MAGIC:
            return None
        info = read_dynamic(source)
    except (InputError, OSError):
        return None
    finally:
        source.close()
    return Library(frozenset(s.name for s in info.symbols if s.defined and not s.local), info.needed, info.runpath)


def _locate(name: str, library_dirs: Sequence[Path]) -> Library | None:
    candidates = [directory / name for directory in library_dirs]
    cached = _linker_cache().get(name)
    candidates += [Path(cached)] if cached else [Path(d) / name for d in _DEFAULT_DIRS]
    for candidate in candidates:
        with contextlib.suppress(OSError):
            stat = candidate.stat()
            library = _read_library(str(candidate.resolve()), stat.st_size, stat.st_mtime_ns)
            if library is not None:
                return library
    return None


def judge(undefined: Iterable[str], needed: Sequence[str], torch: TorchLibraries | None,
          library_dirs: Sequence[Path] = (), *, origin: str = "", runpath: Sequence[str] = (),
          bundled: Bundled | None = None) -> Judgement:
    """The strong non-torch imports of an object with this DT_NEEDED that no library of its load
    scope defines (torch's are :meth:`TorchLibraries.unresolved`'s). With ``bundled``, a library
    the object (at ``origin`` in the wheel, with ``runpath``) or one of its libraries reaches
    through ``$ORIGIN`` is taken from the wheel, as the loader would."""
    wanted = sorted({s for s in undefined if not is_torch_symbol(s) and not s.startswith(INTERPRETER_PREFIXES)})
    if not wanted:
        return Judgement()
    exports: list[frozenset[str]] = []
    prefixes: list[str] = []
    global_scope = [*INTERPRETER_LIBRARIES, *([GLOBAL_DEPS] if torch is not None and GLOBAL_DEPS in torch.needed
                                              else [])]
    queue: list[tuple[str, str, Sequence[str]]] = [(name, "", ()) for name in global_scope]
    queue += [(Path(n).name if "/" not in n else n, origin, runpath) for n in needed]
    seen: set[str] = set()
    unknown: list[str] = []  # why a library of the scope is not known whole
    while queue:
        name, requester, search = queue.pop(0)
        shipped = bundled.locate(name, requester, search) if bundled is not None else None
        key = shipped[0] if shipped is not None else Path(name).name
        if key in seen:
            continue
        seen.add(key)
        if shipped is not None:
            exports.append(shipped[1].exports)
            queue += [(n, posixpath.dirname(shipped[0]), shipped[1].runpath) for n in shipped[1].needed]
            continue
        name = Path(name).name
        if name in RUNTIME_ONLY:
            prefixes += RUNTIME_ONLY[name]
            continue
        if torch is not None and name in torch.needed:
            if name not in torch.complete:
                unknown.append(f"{name}: only its shim symbols are known ({torch.describe()}); give a torch/lib with "
                               "--torch-lib")
                continue
            exports.append(torch.libs.get(name, frozenset()))
            queue += [(n, "", ()) for n in torch.needed[name]]
            continue
        library = _locate(name, library_dirs)
        if library is None:
            unknown.append(f"{name} is not on this machine"
                           + (" (nor in this wheel through $ORIGIN)" if bundled is not None else ""))
            continue
        exports.append(library.exports)
        queue += [(n, "", ()) for n in library.needed]  # a library of this machine: its $ORIGIN is not the wheel
    missing = tuple(s for s in wanted if not s.startswith(tuple(prefixes)) and not any(s in e for e in exports))
    if missing and unknown:  # a library not known whole may define them: nothing is claimed
        return Judgement(unjudged="; ".join(unknown))
    return Judgement(missing=missing)
