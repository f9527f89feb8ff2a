"""What an installed wheel holds that must load: its ELF shared objects, how each is loaded, what
CUDA libraries it needs, and which manifest dependency put it there."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from assembler.manifest.model import Dependency
from assembler.wheel.merge import glob_regex

# Libraries present only in a CUDA build of torch, or only where a GPU driver is installed: an
# extension that needs one cannot load on a CPU-only torch, which is a SKIP, not a failure.
CUDA_LIB_RE = re.compile(
    r"^lib(cudart|cuda|c10_cuda|torch_cuda|cublas|cublasLt|cudnn|cufft|curand|cusolver|cusparse|nccl|nvrtc|nvJitLink)[.-]"
)
ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class ExtensionFile:
    path: str  # relative to the install directory, "/"-separated
    module: str | None  # dotted Python name when it exports PyInit_<name>, else None (op library)
    cuda_libs: tuple[str, ...]


def scan(site: Path) -> list[ExtensionFile]:
    """Every ELF shared object under ``site``, in path order."""
    found = []
    for path in sorted(site.rglob("*.so*")):
        if not path.is_file() or path.is_symlink():
            continue
        with path.open("rb") as handle:
            if handle.read(4) != ELF_MAGIC:
                continue
            handle.seek(0)
            try:
                elf = ELFFile(handle)
                exported, needed = _dynamic(elf)
            except ELFError:
                continue
        rel = path.relative_to(site).as_posix()
        found.append(ExtensionFile(
            path=rel,
            module=_module_name(rel, exported),
            cuda_libs=tuple(sorted(lib for lib in needed if CUDA_LIB_RE.match(lib))),
        ))
    return found


def _dynamic(elf: ELFFile) -> tuple[set[str], list[str]]:
    """Defined dynamic symbols and DT_NEEDED entries."""
    exported: set[str] = set()
    needed: list[str] = []
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            needed.extend(tag.needed for tag in section.iter_tags() if tag.entry.d_tag == "DT_NEEDED")
        elif isinstance(section, SymbolTableSection) and section.name == ".dynsym":
            exported.update(s.name for s in section.iter_symbols() if s["st_shndx"] != "SHN_UNDEF")
    return exported, needed


def _module_name(rel: str, exported: set[str]) -> str | None:
    """``pkg/_C.abi3.so`` is the Python module ``pkg._C`` when it exports ``PyInit__C``."""
    parts = rel.split("/")
    stem = parts[-1].split(".", 1)[0]
    if f"PyInit_{stem}" not in exported or not all(p.isidentifier() for p in parts[:-1]):
        return None
    return ".".join([*parts[:-1], stem])


def owns(dep: Dependency, path: str) -> bool:
    """Whether ``dep`` put ``path`` into the wheel, judged from the manifest alone: through one
    of its ``[deps.X.install]`` rules (``pattern = "dest/"`` places the artifact files matching
    pattern under dest), or, with no rules, as one of its extensions or under one of its Python
    packages. For wheels without the merge's own record (assembler.json)."""
    if dep.install:
        return any(_rule_matches(pattern, dest, path) for pattern, dest in dep.install.items())
    stem = path.rsplit("/", 1)[-1].split(".", 1)[0]
    top = path.split("/", 1)[0]
    return stem in {ext.name for ext in dep.build.extensions} or top in dep.build.python_packages


def _rule_matches(pattern: str, dest: str, path: str) -> bool:
    prefix = dest.strip("/")
    prefix = "" if prefix in {"", "."} else prefix + "/"
    return path.startswith(prefix) and glob_regex(pattern).fullmatch(path[len(prefix):]) is not None


def recorded_files(site: Path) -> dict[str, set[str]] | None:
    """Wheel paths per dependency from ``<dist-info>/assembler.json``, which `assemble merge`
    writes; None for a wheel without it."""
    for record in site.glob("*.dist-info/assembler.json"):
        try:
            deps = json.loads(record.read_text())["deps"]
            return {name: set(entry["files"]) for name, entry in deps.items()}
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return None


def attribute(
    deps: list[Dependency], files: list[ExtensionFile], recorded: dict[str, set[str]] | None = None,
) -> tuple[dict[str, list[ExtensionFile]], list[ExtensionFile]]:
    """Extensions per dependency and those nobody claims. The merge's record decides when there
    is one; otherwise the manifest's install rules (first owner wins, in manifest order)."""
    owned: dict[str, list[ExtensionFile]] = {dep.name: [] for dep in deps}
    orphans = []
    for file in files:
        if recorded is not None:
            owner = next((dep for dep in deps if file.path in recorded.get(dep.name, ())), None)
        else:
            owner = next((dep for dep in deps if owns(dep, file.path)), None)
        if owner is None:
            orphans.append(file)
        else:
            owned[owner.name].append(file)
    return owned, orphans
