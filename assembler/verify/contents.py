"""What an installed wheel holds that must load: its ELF shared objects, how each is loaded, what
CUDA libraries it needs, and which manifest dependency put it there."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from assembler.audit.elf import ELF_MAGIC, read_dynamic
from assembler.audit.member import FileSource
from assembler.errors import InputError
from assembler.wheel.merge import install_rules

# Libraries present only in a CUDA build of torch, or only where a GPU driver is installed: an
# extension that needs one cannot load on a CPU-only torch, which is a SKIP, not a failure.
CUDA_LIB_RE = re.compile(
    r"^lib(cudart|cuda|c10_cuda|torch_cuda|cublas|cublasLt|cudnn|cufft|curand|cusolver|cusparse|nccl|nvrtc|nvJitLink)[.-]"
)


class Claimant(Protocol):
    """What attribution needs of a dependency: a manifest Dependency or a verify spec."""

    @property
    def name(self) -> str: ...

    @property
    def install(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class ExtensionFile:
    path: str  # relative to the install directory, "/"-separated
    module: str | None  # dotted Python name when it exports PyInit_<name>, else None (op library)
    cuda_libs: tuple[str, ...]
    defines_ops: bool = False  # imports the shim calls behind STABLE_TORCH_LIBRARY(_FRAGMENT): it must register ops


# what STABLE_TORCH_LIBRARY and STABLE_TORCH_LIBRARY_FRAGMENT call (torch/csrc/stable/library.h)
LIBRARY_INIT_SYMBOLS = frozenset({"aoti_torch_library_init_def", "aoti_torch_library_init_fragment"})


def scan(site: Path) -> list[ExtensionFile]:
    """Every ELF shared object under ``site``, in path order (files that are not sound ELF are
    not extensions: the loader would refuse them as well)."""
    from assembler.fsutil import walk

    found = []
    candidates = [Path(top, name) for top, _, names in walk(site) for name in names if ".so" in name]  # no recursion
    for path in sorted(candidates):
        if not path.is_file() or path.is_symlink():
            continue
        rel = path.relative_to(site).as_posix()
        try:
            source = FileSource(str(path), rel)
        except OSError:
            continue
        try:
            if source.size < len(ELF_MAGIC) or source.read(0, len(ELF_MAGIC)) != ELF_MAGIC:
                continue
            info = read_dynamic(source, defined_prefixes=(b"PyInit_",))
        except (InputError, OSError):
            continue
        finally:
            source.close()
        exported = {symbol.name for symbol in info.symbols if symbol.defined}
        found.append(ExtensionFile(
            path=rel,
            module=_module_name(rel, exported),
            cuda_libs=tuple(sorted(lib for lib in info.needed if CUDA_LIB_RE.match(lib))),
            defines_ops=any(not symbol.defined and symbol.name in LIBRARY_INIT_SYMBOLS for symbol in info.symbols),
        ))
    return found


def _module_name(rel: str, exported: set[str]) -> str | None:
    """``pkg/_C.abi3.so`` is the Python module ``pkg._C`` when it exports ``PyInit__C``."""
    parts = rel.split("/")
    stem = parts[-1].split(".", 1)[0]
    if f"PyInit_{stem}" not in exported or not all(p.isidentifier() for p in parts[:-1]):
        return None
    return ".".join([*parts[:-1], stem])


def owns(dep: Claimant, path: str) -> bool:
    """Whether ``dep``'s install rules, applied as the merge applies them, could have put ``path``
    into the wheel (without an install table a dependency ships its whole payload at the root).
    For wheels without the merge's own record (assembler.json)."""
    return any(rule.source(path) is not None for rule in install_rules(dep.install))


def attribute(
    deps: Sequence[Claimant], files: list[ExtensionFile], recorded: dict[str, set[str]] | None = None,
) -> tuple[dict[str, list[ExtensionFile]], list[ExtensionFile]]:
    """Extensions per dependency and those nobody claims. The merge's record decides when there
    is one; otherwise the manifest's install rules: the first dependency in manifest order whose
    own install table matches, else the first without one (it may have shipped anything)."""
    owned: dict[str, list[ExtensionFile]] = {dep.name: [] for dep in deps}
    by_rules = sorted(deps, key=lambda dep: not dep.install)  # stable: manifest order within each group
    orphans = []
    for file in files:
        if recorded is not None:
            owner = next((dep for dep in deps if file.path in recorded.get(dep.name, ())), None)
        else:
            owner = next((dep for dep in by_rules if owns(dep, file.path)), None)
        if owner is None:
            orphans.append(file)
        else:
            owned[owner.name].append(file)
    return owned, orphans
