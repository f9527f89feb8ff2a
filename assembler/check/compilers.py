"""The compiler invocations of `assemble check`: the preprocessor runs the build would run, with
the build's defines and include paths, turned into dependency scans that keep going past
missing headers.

C++ units go to the host C++ compiler (``$CXX``, else ``c++``). For a ``.cu`` unit, nvcc itself
cannot keep going past a missing header (it has no ``-MG``), so the check runs the host
preprocessor passes nvcc runs, taken verbatim from ``nvcc --dryrun`` (its ``-D__CUDACC__``,
``-D__CUDA_ARCH__=...``, ``-include cuda_runtime.h``, CUDA and CCCL include dirs): one host
pass and one device pass per CUDA architecture of the dependency, each with ``-M -MG``.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from assembler.builder.units import TranslationUnit
from assembler.errors import ToolchainError
from assembler.toolchain.cuda import CudaToolkit

DEFAULT_STD = "c++17"  # the CMake helper's floor (cxx_std_17, CUDA_STANDARD 17)
_DRYRUN_LINE = re.compile(r"^#\$ (?P<command>.+)$")
_ARCH_DEFINE = re.compile(r"^-D__CUDA_ARCH__=(\d+)$")


def torch_extension_std(torch_dir: Path) -> str:
    """The -std= torch.utils.cpp_extension gives a setuptools build that names none (c++20 since
    torch 2.10, c++17 before), read from the build torch's own cpp_extension.py."""
    try:
        text = (torch_dir / "utils" / "cpp_extension.py").read_text()
    except OSError:
        return DEFAULT_STD
    match = re.search(r"common_cflags \+= \['-std=(c\+\+\d+)'", text)
    return match.group(1) if match else DEFAULT_STD


@functools.cache
def python_include_dir(python: Path) -> Path:
    """The CPython headers the build's interpreter compiles against (sysconfig's ``include``)."""
    try:
        out = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('include'))"],
            capture_output=True, text=True, check=True, timeout=120,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        raise ToolchainError(f"cannot ask {python} for its include directory",
                             hint="delete the build environment under the cache's venvs/ and re-run") from None
    return Path(out)


@dataclass(frozen=True)
class Pass:
    """One scan of one unit: what to run, and which pass it is ("c++", "host", "device sm_90a")."""

    name: str
    command: tuple[str, ...]


@dataclass(frozen=True)
class Flags:
    """What every unit of one dependency is preprocessed with, besides its own -I and -D."""

    defines: tuple[str, ...]  # TORCH_TARGET_VERSION=..., Py_LIMITED_API=...
    system_includes: tuple[Path, ...]  # units without a compile model: torch's include roots, then CUDA's
    python_include: Path
    roots: tuple[tuple[str, Path], ...] = ()  # what the compile model's system includes are relative to

    def unit_system_includes(self, unit: TranslationUnit) -> list[Path]:
        """The unit's system include dirs: its compile model's (helper backend), resolved against
        this run's torch and toolkit, the ones that exist (as the compiler skips missing ones);
        else the dependency's default."""
        if unit.system_includes is None:
            return list(self.system_includes)
        roots = dict(self.roots)
        found = []
        for root, relative in unit.system_includes:
            if root not in roots:
                raise ToolchainError(f"{unit.source}: the build compiles it against the {root} headers, "
                                     "which this check has not",
                                     hint="pass --cuda X.Y (a local toolkit, else installed from PyPI), "
                                          "or set CUDA_HOME")
            directory = roots[root] / relative
            if directory.is_dir():
                found.append(directory)
        return found

    def for_unit(self, unit: TranslationUnit, defines: tuple[str, ...] | None = None, *,
                 system: bool = True) -> list[str]:
        args = [f"-D{d}" for d in (defines if defines is not None else self.defines)]
        args += [f"-D{d}" for d in unit.defines]
        args += [f"-I{d}" for d in unit.include_dirs]
        args.append(f"-I{self.python_include}")
        for directory in self.unit_system_includes(unit) if system else ():
            args += ["-isystem", str(directory)]
        return args


SCAN = ("-E", "-M", "-MG", "-H")  # dependencies (missing ones kept) and the include tree, no output


def cxx_pass(compiler: str, flags: Flags, unit: TranslationUnit, std: str) -> Pass:
    """The build's compile command of a C++ unit (its -std, the recipe's cxx-flags, its -D/-I
    and system dirs), as a scan."""
    return Pass("c++", (compiler, f"-std={std}", *unit.flags, *flags.for_unit(unit), *SCAN, str(unit.path)))


def syntax_pass(compiler: str, flags: Flags, unit: TranslationUnit, std: str,
                defines: tuple[str, ...] | None = None) -> Pass:
    return Pass("syntax",
                (compiler, f"-std={std}", *unit.flags, *flags.for_unit(unit, defines), "-fsyntax-only", str(unit.path)))


@dataclass(frozen=True)
class NvccPasses:
    """nvcc's own host-preprocessor command lines for a set of architectures, a standard and
    the recipe's cuda-flags (what nvcc turns them into: --use_fast_math's __USE_FAST_MATH__,
    -Xcompiler's host flags), with the unit's -D/-I and the source left to fill in."""

    nvcc: str  # the release, for the cache key
    templates: tuple[tuple[str, tuple[str, ...]], ...]  # (pass name, tokens with SOURCE_MARK)

    def passes(self, flags: Flags, unit: TranslationUnit) -> list[Pass]:
        ours = flags.for_unit(unit)
        found = []
        for name, template in self.templates:
            tokens = list(template)
            at = next((i for i, t in enumerate(tokens) if t.startswith(("-I", "-isystem"))), len(tokens) - 1)
            tokens[at:at] = ours  # before nvcc's own CUDA includes, as nvcc orders user -I
            found.append(Pass(name, tuple(str(unit.path) if t == SOURCE_MARK else t for t in tokens) + SCAN[1:]))
        return found


SOURCE_MARK = "assemble-check-unit.cu"


def gencode(archs: tuple[str, ...]) -> list[str]:
    """nvcc's -gencode flags for the manifest's arch spelling (9.0a -> compute_90a, sm_90a)."""
    return [f"-gencode=arch=compute_{a.replace('.', '')},code=sm_{a.replace('.', '')}" for a in archs]


def nvcc_passes(toolkit: CudaToolkit, archs: tuple[str, ...], std: str = DEFAULT_STD,
                extra: tuple[str, ...] = ()) -> NvccPasses:
    """Read what ``nvcc -M`` would run for ``archs`` (manifest spelling, 9.0a), ``std`` and the
    nvcc flags ``extra`` from ``--dryrun``: the host-compiler preprocessing of the device code
    per architecture and of the host code."""
    command = [str(toolkit.nvcc), "--dryrun", "-M", f"-std={std}", *extra, *gencode(archs), "-x", "cu", SOURCE_MARK,
               "-o", os.devnull]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                                env=toolkit.environment(dict(os.environ)), check=False)
    except (OSError, subprocess.SubprocessError) as error:
        raise ToolchainError(f"cannot run {toolkit.nvcc}: {error}", hint="check the CUDA toolkit") from None
    templates: list[tuple[str, tuple[str, ...]]] = []
    device_names = iter(f"device {arch}" for arch in archs)
    for line in result.stderr.splitlines() + result.stdout.splitlines():
        match = _DRYRUN_LINE.match(line)
        if not match or SOURCE_MARK not in match["command"] or " -E " not in f" {match['command']} ":
            continue
        tokens = shlex.split(match["command"])
        if "-o" in tokens:  # the .ii file nvcc would write: a scan writes nothing
            at = tokens.index("-o")
            del tokens[at:at + 2]
        tokens = [t for t in tokens if t != "-E"]
        tokens.insert(1, "-E")
        device = any(_ARCH_DEFINE.match(t) for t in tokens)  # nvcc runs the device passes in -gencode order
        templates.append((next(device_names, "device") if device else "host", tuple(tokens)))
    if not templates:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ToolchainError(f"`nvcc --dryrun -M` printed no preprocessor command ({tail[0]})",
                             hint=f"check the CUDA toolkit at {toolkit.root}")
    templates.sort(key=lambda item: item[0] != "host")  # the host pass first: it reports what the build reports first
    return NvccPasses(toolkit.release, tuple(templates))


def default_cuda() -> str | None:
    """The newest CUDA already on this machine, without downloading anything: a hermetic toolkit
    in the cache (toolchains/cuda-X.Y-*) or a local nvcc (CUDA_HOME, PATH, /usr/local/cuda*)."""
    from assembler.cache import cache_root
    from assembler.toolchain.cuda import MARKER, nvcc_release

    found: set[tuple[int, int]] = set()
    for marker in (cache_root() / "toolchains").glob(f"cuda-*/{MARKER}"):
        version = marker.parent.name.split("-")[1]
        if re.fullmatch(r"\d+\.\d+", version):
            found.add(_numbers(version))
    candidates = [Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"] if os.environ.get("CUDA_HOME") else []
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(Path(on_path))
    candidates += sorted(Path("/usr/local").glob("cuda*/bin/nvcc"))
    for nvcc in candidates:
        release = nvcc_release(nvcc) if nvcc.is_file() else None
        if release is not None:
            found.add(_numbers(release[0]))
    if not found:
        return None
    newest = max(found)
    return f"{newest[0]}.{newest[1]}"


def _numbers(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)
