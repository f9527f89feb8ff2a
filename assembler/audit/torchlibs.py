"""What torch's own libraries export and pull in: can an object's torch symbols be resolved?

An extension is loaded with ``RTLD_LOCAL``, and so is ``torch._C``: the dynamic loader looks an
undefined symbol up in the global scope (the interpreter, and ``libtorch_global_deps.so``,
which ``import torch`` loads ``RTLD_GLOBAL``) and in the object's own dependency tree, its
``DT_NEEDED`` libraries breadth first and theirs in turn. A symbol that torch exports from a
library outside that scope is unresolved at load time, whatever the symbol's name promises
(``aoti_torch_get_current_cuda_stream`` lives in ``libtorch_cuda.so``; an extension that needs
only ``libtorch_cpu.so`` fails with "undefined symbol").

Where the tables come from, one place for all of them:

- a torch's ``torch/lib`` (a build environment, a verify environment, ``audit --torch-lib``),
  read with the audit's own ELF reader and cached per torch build under
  ``<cache>/torch-exports`` (every defined dynamic symbol and ``DT_NEEDED``; gzip'd);
- a torch wheel, read in place (``audit --refresh-torch-table --from-torch WHEEL`` rewrites the
  shipped table from it);
- the shipped table, ``assembler/data/torch_libraries.json``: for each library of a CUDA build
  of torch its ``DT_NEEDED`` and the shim symbols (``aoti_torch_*``, ``torch_*``) it exports,
  so a bare ``assemble audit X.whl`` and a CPU-only build environment (which lacks
  ``libtorch_cuda.so``) still know where each CUDA shim lives. Shim symbols do not move between
  libraries across releases; a real table at hand takes precedence library by library.

Only torch's own symbols are judged: shim symbols and C++ symbols in torch's namespaces
(``at::``, ``c10::``, ``torch::``) that some torch library exports. Anything else (libc,
libstdc++, CUDA's runtime, a sibling library of the wheel) comes from libraries the table does
not describe, so nothing is claimed about it. Weak references need no definition.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from assembler import jsonfile
from assembler.audit.elf import ELF_MAGIC, read_dynamic
from assembler.audit.gate import NOT_EXPORTED
from assembler.audit.member import ByteSource, FileSource
from assembler.audit.torch_abi import SHIM_PREFIXES
from assembler.errors import InputError

EXPORTS_DIR = "torch-exports"
_SCHEMA = 2  # 2: each library's DT_NEEDED too
SHIPPED = Path(__file__).resolve().parents[1] / "data" / "torch_libraries.json"
GLOBAL_DEPS = "libtorch_global_deps.so"  # `import torch` loads it RTLD_GLOBAL: its tree is global scope
_TORCH_NAMESPACES = ("2at", "3c10", "5torch")  # Itanium source names of at::, c10::, torch::


def is_torch_symbol(name: str) -> bool:
    """A symbol only torch defines: a shim symbol, or a mangled name in torch's namespaces."""
    return name.startswith(SHIM_PREFIXES) or (name.startswith("_Z") and any(ns in name for ns in _TORCH_NAMESPACES))


def not_exported(torch: str, expected: Iterable[str]) -> str:
    """The provider an UNRESOLVED torch symbol is recorded with when the torch audited against
    exports it from no library: ``not exported by torch 2.13.0 (expected from libtorch_cpu.so)``."""
    return f"{NOT_EXPORTED}{torch} (expected from {', '.join(expected) or 'its libraries'})"


@dataclass(frozen=True)
class TorchLibraries:
    """One torch build's libraries: exported symbols and DT_NEEDED, by library file name."""

    torch: str  # the version, e.g. "2.14.1+cu130"
    source: str  # where it was read: a torch/lib directory, a wheel, or the shipped table
    libs: Mapping[str, frozenset[str]]
    needed: Mapping[str, tuple[str, ...]]
    complete: frozenset[str] = frozenset()  # libraries read with every export (a real torch/lib), not shim symbols only

    def exporter(self, symbol: str) -> str | None:
        """The library of this torch that exports ``symbol``, or None."""
        return next((name for name, symbols in sorted(self.libs.items()) if symbol in symbols), None)

    def all(self) -> frozenset[str]:
        return frozenset().union(*self.libs.values())

    def scope(self, needed: Iterable[str]) -> list[str]:
        """The torch libraries the loader searches for an object with this DT_NEEDED: the global
        scope's tree, then the object's own, breadth first (torch libraries only)."""
        order: list[str] = []
        queue = [GLOBAL_DEPS, *(Path(n).name for n in needed)]
        while queue:
            name = queue.pop(0)
            if name in order or name not in self.needed:
                continue
            order.append(name)
            queue += self.needed[name]
        return order

    def unresolved(self, undefined: Iterable[str], needed: Iterable[str]) -> dict[str, str]:
        """Torch symbols of ``undefined`` that no library in the scope exports: symbol -> the
        library of this torch that provides it, or, where this torch's libraries are all read
        whole (a real torch/lib) and none exports it, ``not_exported(...)`` naming the torch
        libraries the object expected it from (torchrl's ``_wrap_outputs`` on a torch that
        dropped it). With shim tables only, such a symbol is not judged: they list no C++ name."""
        needed = list(needed)
        scope = self.scope(needed)
        reachable = [self.libs[name] for name in scope if name in self.libs]
        whole = bool(scope) and all(name in self.complete for name in scope)
        expected = [Path(n).name for n in needed if Path(n).name in self.needed] or scope
        missing: dict[str, str] = {}
        for symbol in undefined:
            if not is_torch_symbol(symbol) or any(symbol in lib for lib in reachable):
                continue
            provider = self.exporter(symbol)
            if provider is not None:
                missing[symbol] = provider
            elif whole:
                missing[symbol] = not_exported(self.torch, expected)
        return dict(sorted(missing.items()))

    def overlaid(self, base: TorchLibraries | None) -> TorchLibraries:
        """These libraries, plus those of ``base`` that this torch lacks (a CPU torch's missing
        ``libtorch_cuda.so`` from the shipped table)."""
        if base is None:
            return self
        extra = [name for name in base.needed if name not in self.needed]
        if not extra:
            return self
        return TorchLibraries(
            torch=self.torch,
            source=f"{self.source}; {', '.join(extra)} from {base.source}",
            libs={**{n: base.libs[n] for n in extra if n in base.libs}, **self.libs},
            needed={**{n: base.needed[n] for n in extra}, **self.needed},
            complete=self.complete,
        )

    def describe(self) -> str:
        return f"torch {self.torch} libraries ({self.source})"


def _record(source: ByteSource, keep: tuple[bytes, ...] | None) -> tuple[list[str], tuple[str, ...]] | None:
    """(exported symbols, DT_NEEDED) of one library; None when it is not a readable ELF."""
    try:
        if source.size < len(ELF_MAGIC) or source.read(0, len(ELF_MAGIC)) != ELF_MAGIC:
            return None
        info = read_dynamic(source, defined_prefixes=keep)
    except (InputError, OSError):
        return None
    return sorted({s.name for s in info.symbols if s.defined and not s.local}), info.needed


def _libraries(lib_dir: Path) -> list[Path]:
    return sorted(p for p in lib_dir.glob("lib*.so*") if p.is_file() and not p.is_symlink())


def _cache_file(cache_dir: Path, torch: str, libs: list[Path]) -> Path:
    """One file per torch build: the version and the name and size of each of its libraries."""
    key = hashlib.sha256("\0".join(f"{p.name}:{p.stat().st_size}" for p in libs).encode()).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9.+_-]", "_", torch)[:64]
    return cache_dir / EXPORTS_DIR / f"{safe}-{key}.json.gz"


def _from_json(data: Mapping[str, object], source: str, complete: bool = False) -> TorchLibraries:
    libs = data["libs"]
    if not isinstance(libs, dict):
        raise TypeError("libs")
    return TorchLibraries(
        torch=str(data["torch"]),
        source=source,
        libs={str(name): frozenset(map(str, entry["exports"])) for name, entry in libs.items()},
        needed={str(name): tuple(map(str, entry["needed"])) for name, entry in libs.items()},
        complete=frozenset(map(str, libs)) if complete else frozenset(),
    )


def _to_json(table: TorchLibraries, **extra: object) -> dict[str, object]:
    return {
        "schema": _SCHEMA, "torch": table.torch, **extra,
        "libs": {name: {"needed": list(table.needed[name]), "exports": sorted(table.libs.get(name, ()))}
                 for name in sorted(table.needed)},
    }


def read_lib_dir(torch: str, lib_dir: Path, progress: Callable[[str], None] = lambda _: None) -> TorchLibraries | None:
    """The libraries of the torch in ``lib_dir`` (its ``torch/lib``), every export, cached under
    ``<cache>/torch-exports``; None when there are none."""
    from assembler.cache import cache_root
    from assembler.fsutil import atomic_write

    libs = _libraries(lib_dir)
    if not libs:
        return None
    cached = _cache_file(cache_root(), torch, libs)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, EOFError, AttributeError):
        data = jsonfile.loads(gzip.decompress(cached.read_bytes()), cached)
        if data["schema"] == _SCHEMA and data["torch"] == torch:
            return _from_json(data, str(lib_dir), complete=True)
    progress(f"reading the symbols torch {torch} exports ({lib_dir}; once, cached in {cached.parent})")
    exports: dict[str, frozenset[str]] = {}
    needed: dict[str, tuple[str, ...]] = {}
    for path in libs:
        try:
            source = FileSource(str(path), path.name)
        except (InputError, OSError):
            continue
        try:
            found = _record(source, None)
        finally:
            source.close()
        if found is not None:
            exports[path.name], needed[path.name] = frozenset(found[0]), found[1]
    table = TorchLibraries(torch, str(lib_dir), exports, needed, complete=frozenset(exports))
    payload = gzip.compress(json.dumps(_to_json(table, lib_dir=str(lib_dir))).encode(), 6, mtime=0)
    with contextlib.suppress(OSError):  # a read-only cache: the table is simply read again next time
        atomic_write(cached, payload)
    return table


def lib_dir_version(lib_dir: Path) -> str:
    """torch's version for a ``torch/lib`` directory, from ``torch/version.py`` next to it (no import)."""
    try:
        text = (lib_dir.parent / "version.py").read_text(errors="replace")
    except OSError:
        return "unknown"
    match = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", text, re.M)
    return match[1] if match else "unknown"


@cache
def shipped(path: Path = SHIPPED) -> TorchLibraries | None:
    """The shipped table (shim symbols of a CUDA torch's libraries); None when it is missing."""
    try:
        data = jsonfile.load(path)
        return _from_json(data, f"{path.name}: {data.get('source', '?')}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise InputError(
            f"cannot read the torch library table {path}: {error}",
            hint="restore it from git, or rebuild it with `assemble audit --refresh-torch-table --from-torch WHEEL`",
        ) from None


def resolver(lib_dir: Path | None = None, torch: str | None = None) -> TorchLibraries | None:
    """The tables the gate resolves against: the torch at ``lib_dir`` when given (over the
    shipped table, for the libraries it lacks), else the shipped table alone."""
    base = shipped()
    if lib_dir is None:
        return base
    real = read_lib_dir(torch or lib_dir_version(lib_dir), lib_dir)
    if real is None:
        raise InputError(f"{lib_dir}: no torch libraries (lib*.so) there",
                         hint="give torch's lib directory: .../site-packages/torch/lib")
    return real.overlaid(base)


def refresh_from_wheel(wheel: Path, path: Path = SHIPPED) -> TorchLibraries:
    """Rewrite the shipped table from a torch wheel's ``torch/lib``, read in place."""
    from assembler.audit.member import open_member
    from assembler.audit.zipindex import read_index
    from assembler.fsutil import atomic_write

    entries = read_index(str(wheel), re.compile(rb"^torch/lib/lib[^/]*\.so(\.\d+)*$|^torch/version\.py$"))
    version = "unknown"
    exports: dict[str, frozenset[str]] = {}
    needed: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        source = open_member(entry)
        try:
            if entry.name == "torch/version.py":
                match = re.search(r"""__version__\s*=\s*['"]([^'"]+)['"]""",
                                  source.read(0, min(source.size, 1 << 16)).decode(errors="replace"))
                version = match[1] if match else version
                continue
            found = _record(source, tuple(p.encode() for p in SHIM_PREFIXES))
        finally:
            source.close()
        if found is not None:
            name = entry.name.rsplit("/", 1)[-1]
            exports[name], needed[name] = frozenset(found[0]), found[1]
    if not needed:
        raise InputError(f"{wheel}: no torch/lib/*.so in it (not a torch wheel?)")
    table = TorchLibraries(version, wheel.name, exports, needed)
    text = json.dumps(_to_json(table, source=f"{wheel.name} torch/lib, shim symbols only"), indent=1) + "\n"
    atomic_write(path, text.encode())
    shipped.cache_clear()
    return table
