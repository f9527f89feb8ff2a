"""The compile proof of `assemble migrate` and `assemble review`: a rewritten file is compiled
before it is committed, and a hunk of a series that does not compile is flagged.

A unit is compiled with the build's own compile model (``builder/units.py`` and check's
:func:`assembler.check.run.dep_model`: its -std, the recipe's flags, its -D/-I, torch's and
CUDA's include roots, the build torch environment), stopped before code generation: the host
C++ compiler's ``-fsyntax-only`` for a C++ unit; for a CUDA unit ``nvcc -cuda
-fdevice-syntax-only``, which runs the host preprocessor and cudafe++'s full C++ front end on
the host side and, per architecture of the build, the device preprocessor and cicc's front end
only (``--device-syntax-only``: no PTX, no ptxas work). ``-MD`` names the files each compile read.
What only device code generation finds (a host function called from a kernel: cicc reports it
after its front end) is left to the build; a full device compile per architecture would cost
minutes per kernel on a real tree.

Two models, the strictest one a unit compiles under: ``target``, the build's own defines
(``TORCH_TARGET_VERSION``, ``Py_LIMITED_API``: exactly what `check` and the build compile
with); else ``today``, without them, as assess preprocesses: a unit that still reaches an
unstable torch header stops at that header's ``#error`` under the target, so a migration under
way is proven in the model it compiles in today. A unit that compiles under neither before
the rewrite (a generated header missing, say) proves nothing: its files are "not proven".

Which units prove a file: a unit's own source proves itself; a changed header is proven by the
changed units that read it, else by one unit that reads it and compiled before (recipe order):
the dozens of kernel instantiations that read one launch template prove nothing more than one.
Which units read a header is read from the ``#include`` lines the build compiles (assess's
active lines), resolved against the unit's include directories, then confirmed by ``-MD``.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.builder.header_diagnostics import parse_diagnostics, torch_include_roots
from assembler.builder.units import TranslationUnit, translation_units
from assembler.check.unit_scan import C_ENV, Limits, Reader, parse_make_rule
from assembler.manifest import Dependency
from assembler.manifest.model import CUDA, CXX
from assembler.workspace import Workspace

Note = Callable[[str], None]
TARGET, TODAY = "target", "today"  # the two compile models, strictest first
MODEL_WORDS = {TARGET: "the build's defines (TORCH_TARGET_VERSION, Py_LIMITED_API)",
               TODAY: "without the torch-target (it still reaches an unstable torch header)"}
# nvcc's front ends (cudafe++, cicc) print "file(12): error: text"; gcc "file:12:3: error: text".
_EDG_ERROR = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?:catastrophic )?error(?: #[\w-]+)?: (?P<text>.*)$")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)
_MISSING = re.compile(r"No such file or directory|cannot open source file")
# EDG (cudafe++, cicc): "catastrophic error: out of memory"; gcc: "virtual memory exhausted", "out of memory
# allocating"; a tool that threw: "terminate called after throwing an instance of 'std::bad_alloc'"
_OUT_OF_MEMORY = re.compile(r"error: out of memory|virtual memory exhausted|out of memory allocating"
                            r"|instance of 'std::bad_alloc'")
GIB = 1 << 30


@dataclass(frozen=True)
class CompileError:
    """One error of one compile: where (as the report names it) and what."""

    at: str  # "csrc/a.cpp:12": relative to the checkout when inside it; a torch header as included
    text: str
    path: Path | None  # the file, when it is in the checkout
    line: int

    def __str__(self) -> str:
        return f"{self.at}: {self.text}"

    @property
    def missing_header(self) -> bool:
        """A header the machine does not have (a generated one, an absent submodule): the
        unit cannot be compiled here, which says nothing about a rewrite."""
        return _MISSING.search(self.text) is not None


@dataclass
class Compiled:
    """One unit compiled once."""

    unit: TranslationUnit
    mode: str
    errors: list[CompileError] = field(default_factory=list)
    reads: frozenset[Path] = frozenset()  # files of the checkout the compile read (-MD)
    guard: bool = False  # a torch header's Stable-ABI guard fired: the unit reaches an unstable header
    seconds: float = 0.0
    memory: bool = False  # stopped at its memory limit: says nothing about the code

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def first(self) -> str:
        """The first error, as a person reads it first (the compiler's own order)."""
        return str(self.errors[0]) if self.errors else ""

    def first_in(self, path: Path) -> CompileError | None:
        return next((error for error in self.errors if error.path == path), None)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.unit.source, "model": self.mode, "ok": self.ok, "error": self.first or None,
                "seconds": round(self.seconds, 3)}


# A CPU build of torch ships c10/cuda's headers but not the one CMake generates for a CUDA build,
# so a unit that reaches c10/cuda (FlashKDA's, FlashMLA's, FA2's, every one through
# CUDAException.h) never compiles as it was, and proves nothing before the rewrite. The stand-in
# says what that generated header says, and refuses a stable-only compile as it does.
GENERATED_CUDA_HEADER = "c10/cuda/impl/cuda_cmake_macros.h"
CUDA_HEADER_STAND_IN = """// Written by assemble's compile proof: a CPU build of torch lacks this generated header.
#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
#else
#error "c10/cuda is outside the Stable ABI: not with TORCH_TARGET_VERSION or TORCH_STABLE_ONLY"
#endif
"""


# What torch's cpp_extension (its common nvcc flags) and vLLM's CMake give every .cu unit, and FA2's
# own CMakeLists.txt too: without it, its launch templates' constexpr host calls in device code do
# not compile, and the proof of a cmake-built dependency (whose flags live in its CMake) proves nothing.
RELAXED_CONSTEXPR = frozenset({"--expt-relaxed-constexpr", "-expt-relaxed-constexpr"})
PROOF_MEMORY_CAP = 16 << 30  # bytes of address space: past it, a compile is runaway, not CUTLASS


def cpu_torch_stand_ins(torch_dir: Path) -> list[str]:
    """``-isystem DIR`` of the stand-in, searched after torch's own roots, when ``torch_dir`` is a
    CPU build (it lacks the generated header); else nothing. Kept in the check cache."""
    from assembler.cache import KINDS, cache_root
    from assembler.fsutil import atomic_write

    if (torch_dir / "include" / GENERATED_CUDA_HEADER).is_file():
        return []
    try:
        root = cache_root() / KINDS["checks"] / "cpu-torch-stand-ins"
        header = root / GENERATED_CUDA_HEADER
        if not header.is_file() or header.read_text() != CUDA_HEADER_STAND_IN:
            header.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(header, CUDA_HEADER_STAND_IN)
    except OSError:
        return []  # a read-only cache: the proof runs as before, without it
    return ["-isystem", str(root)]


def proof_memory(jobs: int, physical: int | None = None) -> int:
    """The address space one proof compile may take: a share of the machine's memory per
    concurrent compile, at least a scan's (check's ``MEMORY``), at most ``PROOF_MEMORY_CAP``.
    cudafe++ on FA2's launch-template unit peaks at 3.9 GB resident; under a scan's 4 GiB of
    address space it stopped with "out of memory", which made the unit prove nothing and cost a
    compile of the next reader, and the next."""
    from assembler.check.unit_scan import MEMORY

    if physical is None:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(MEMORY, min(PROOF_MEMORY_CAP, physical // max(1, jobs)))


def alone_memory() -> int:
    """The address space a compile run alone may take: what the machine has free, less the
    headroom the build keeps (``builder.memory``)."""
    from assembler.builder.memory import HEADROOM, available_memory

    return int(available_memory() * HEADROOM)


def proof_archs(archs: tuple[str, ...]) -> tuple[str, ...]:
    """The one architecture a CUDA unit's proof compiles for: the newest, whose ``__CUDA_ARCH__``
    branches hold the most code. The host code torch's API lives in is the same for every
    architecture; each more one repeats only the device front end (FA2's launch-template unit:
    about 46 s for 9.0a and 10.0a)."""
    if len(archs) < 2:
        return archs
    return (max(archs, key=lambda arch: float(re.sub(r"[^0-9.]", "", arch) or 0)),)


class Prover:
    """The compile model of one dependency's checkout and the compiles made with it."""

    def __init__(self, workspace: Workspace, dep: Dependency, checkout: Path, note: Note = lambda _: None,
                 units: list[TranslationUnit] | None = None, jobs: int = 0) -> None:
        from assembler.check.run import CheckOptions, CheckToolchain, dep_model
        from assembler.system import available_cpus

        self.checkout = checkout.resolve()
        self.note = note
        self.name = dep.name
        self.tools = CheckToolchain(workspace, CheckOptions(), note)
        self.units = units if units is not None else translation_units(workspace, dep, self.checkout)
        self.model = dep_model(workspace, dep, self.units, self.tools)
        self.components = dep.cuda_components
        self.reader = Reader(self.checkout, torch_include_roots(self.tools.env.torch_dir), self.tools.python_include)
        self.jobs = jobs or available_cpus()
        self.limits = Limits(memory=proof_memory(self.jobs))
        self.alone: set[Path] = set()  # units that ran out of a share of memory: compiled one at a time
        self.modes: dict[Path, str] = {}  # unit path -> the model its first good compile used
        self.stand_ins = cpu_torch_stand_ins(self.tools.env.torch_dir)

    def command(self, unit: TranslationUnit, mode: str, depfile: Path,
                scratch: Path) -> tuple[list[str], dict[str, str]]:
        """The unit's compile, stopped before code generation, in ``mode``."""
        from assembler.check.compilers import gencode, syntax_pass

        std = unit.std or self.model.default_std
        defines = None if mode == TARGET else ()
        env = {**os.environ, **C_ENV}
        if unit.language != CUDA:
            command = [*syntax_pass(self.tools.cxx, self.model.flags, unit, std, defines).command]
            return [*command[:-1], *self.stand_ins, "-MD", "-MF", str(depfile), command[-1]], env
        toolkit = self.model.toolkit or self.tools.cuda(self.components)
        relaxed = [] if RELAXED_CONSTEXPR & set(unit.flags) else ["--expt-relaxed-constexpr"]
        command = [str(toolkit.nvcc), "-cuda", "-fdevice-syntax-only", f"-std={std}", *unit.flags, *relaxed,
                   *gencode(proof_archs(self.model.archs)), *self.model.flags.for_unit(unit, defines), *self.stand_ins,
                   "-MD", "-MF", str(depfile),
                   "-x", "cu", str(unit.path), "-o", str(scratch / "unit.cu.cpp.ii")]
        return command, {**toolkit.environment(env), **C_ENV}

    def probe(self, source: str) -> Compiled:
        """``source``, a C++ file of migrate's own (never the checkout's), compiled as a C++ unit of
        this build under the target: the proof of a rewrite on lines no unit of the build
        compiles (the #else of an arch dispatch), made on the same text in a context of its own."""
        with tempfile.TemporaryDirectory(prefix="assemble-probe-") as scratch:
            path = Path(scratch) / "assemble_probe.cpp"
            path.write_text(source, encoding="utf-8")
            return self.compile(TranslationUnit(path, "(migrate's probe)", CXX), TARGET)

    def compile(self, unit: TranslationUnit, mode: str, memory: int | None = None) -> Compiled:
        """One compile of ``unit`` in ``mode``, under ``memory`` bytes of address space (by
        default the share of one of the compiles run at once)."""
        started = time.monotonic()
        result = Compiled(unit, mode)
        limits = Limits(self.limits.seconds, memory or self.limits.memory)
        with tempfile.TemporaryDirectory(prefix="assemble-proof-") as scratch:
            depfile = Path(scratch) / "unit.d"
            command, env = self.command(unit, mode, depfile, Path(scratch))
            try:
                done = subprocess.run(limits.wrap(command), cwd=self.checkout, capture_output=True, text=True,
                                      errors="replace", env=env, timeout=limits.seconds, check=False)
            except subprocess.TimeoutExpired:
                why = f"the compile ran past its limit of {self.limits.seconds:g} s"
                result.errors.append(CompileError(unit.source, why, None, 0))
                done = None
            except OSError as error:
                why = f"cannot run {command[0]}: {error.strerror or error}"
                result.errors.append(CompileError(unit.source, why, None, 0))
                done = None
            if done is not None:
                self._read(result, done, depfile)
                if done.returncode != 0 and _OUT_OF_MEMORY.search(done.stderr):
                    result.memory = True
                    why = (f"the compile ran out of memory under its limit of {limits.memory / GIB:.1f} GiB of "
                           "address space (ulimit -v)")
                    result.errors = [CompileError(unit.source, why, None, 0)]
        result.seconds = time.monotonic() - started
        return result

    def _read(self, result: Compiled, done: subprocess.CompletedProcess[str], depfile: Path) -> None:
        _, diagnostics = parse_diagnostics(done.stderr)
        for diagnostic in diagnostics:
            result.guard = result.guard or diagnostic.is_stable_guard
            result.errors.append(self._error(diagnostic.file, diagnostic.line, diagnostic.text))
        for line in done.stderr.splitlines():
            edg = _EDG_ERROR.match(line)
            if edg:
                result.errors.append(self._error(edg["file"], int(edg["line"]), edg["text"].strip()))
        if done.returncode != 0 and not result.errors:
            last = next((line.strip() for line in reversed(done.stderr.splitlines()) if line.strip()),
                        f"exit status {done.returncode}")
            result.errors.append(CompileError(result.unit.source, last, None, 0))
        try:
            written = parse_make_rule(depfile.read_text(errors="replace"))
        except OSError:
            written = []
        reads = {self.reader.in_checkout(self.reader.absolute(name, self.checkout)) for name in written}
        result.reads = frozenset(path for path in reads if path is not None)

    def _error(self, file: str, line: int, text: str) -> CompileError:
        path = self.reader.absolute(file, self.checkout)
        inside = self.reader.in_checkout(path)
        name = self.reader.name(path)
        return CompileError(f"{name}:{line}" if line else name, text, inside, line)

    def compile_all(self, jobs: list[tuple[TranslationUnit, str]]) -> list[Compiled]:
        """Each (unit, model) compiled, ``--jobs`` at a time, in order. A compile that ran out
        of its share of memory runs again alone, with what the machine has free (QuTLASS's
        gemm.cu: cudafe++ takes 13 GB), and so does every later compile of that unit."""
        if not jobs:
            return []
        results: list[Compiled | None] = [None] * len(jobs)
        shared = [index for index, (unit, _) in enumerate(jobs) if unit.path not in self.alone]
        if shared:
            workers = max(1, min(self.jobs, len(shared)))
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="proof") as pool:
                for index, result in zip(shared, pool.map(lambda i: self.compile(*jobs[i]), shared), strict=True):
                    results[index] = result
        whole = alone_memory()
        for index, (unit, mode) in enumerate(jobs):
            found = results[index]
            if found is None or (found.memory and whole > self.limits.memory):
                if found is not None:  # the heartbeat repeats this line while the compile runs
                    self.note(f"{self.name}: {unit.source} ran out of {self.limits.memory / GIB:.1f} GiB; "
                              f"compiling it again alone, under {whole / GIB:.1f} GiB")
                self.alone.add(unit.path)
                again = self.compile(unit, mode, max(whole, self.limits.memory))
                if found is not None:
                    again.seconds += found.seconds
                results[index] = again
        return [result for result in results if result is not None]

    def baseline(self, units: Iterable[TranslationUnit]) -> dict[Path, Compiled]:
        """Each unit compiled as it stands, under the target first, else as it compiles today;
        the model of a unit that compiled is kept for every later compile of it."""
        pending = [unit for unit in units if unit.path not in self.modes]
        first = self.compile_all([(unit, TARGET) for unit in pending])
        found = {result.unit.path: result for result in first}
        again = self.compile_all([(result.unit, TODAY) for result in first if not result.ok])
        for result in again:  # under the target it may have stopped at a guard: today's errors are the ones to read
            found[result.unit.path] = result
        for path, result in found.items():
            if result.ok:
                self.modes[path] = result.mode
        return found

    def once(self, units: Iterable[TranslationUnit]) -> list[Compiled]:
        """Each unit compiled once as it stands (review: no before to compare with): under the
        target, and again without it only where an unstable torch header's guard stopped it."""
        results = self.compile_all([(unit, TARGET) for unit in units])
        redo = [index for index, result in enumerate(results) if result.guard]
        for index, result in zip(redo, self.compile_all([(results[i].unit, TODAY) for i in redo]), strict=True):
            results[index] = result
        return results

    def again(self, units: Iterable[TranslationUnit]) -> list[Compiled]:
        """Units whose baseline compiled, compiled again in the model they compiled in."""
        return self.compile_all([(unit, self.modes[unit.path]) for unit in units])


def static_reads(unit: TranslationUnit, root: Path,
                 text_of: Callable[[Path], tuple[str, list[bool] | None] | None]) -> set[Path]:
    """The files of the checkout ``unit`` reads through ``#include`` lines the build compiles
    (``text_of`` gives a file's text and its active lines, None for a file not read), each name
    looked up as the compiler does: a quoted one next to its includer first, then the unit's
    include directories. A computed ``#include MACRO`` is not followed (``-MD`` of a compile is)."""
    seen = {unit.path}
    todo = [unit.path]
    while todo:
        current = todo.pop()
        found = text_of(current)
        if found is None:
            continue
        text, active = found
        for match in _INCLUDE.finditer(text):
            line = text.count("\n", 0, match.start())
            if active is not None and (line >= len(active) or not active[line]):
                continue
            directories = ([current.parent] if match[1] == '"' else []) + list(unit.include_dirs)
            for directory in directories:
                candidate = Path(os.path.normpath(directory / match[2]))
                if candidate.is_relative_to(root) and candidate.is_file():
                    if candidate not in seen:
                        seen.add(candidate)
                        todo.append(candidate)
                    break
    return seen


def read_file(path: Path) -> tuple[str, list[bool] | None] | None:
    """A file's text with every line counted as compiled (review has no assess to say which)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace"), None
    except OSError:
        return None


@dataclass
class Cover:
    """The units that prove a set of changed files, and which file each proves."""

    units: list[TranslationUnit]
    proves: dict[Path, list[TranslationUnit]]  # changed file -> the chosen units that read it
    unread: list[Path]  # changed files no unit of the build reads


def cover(changed: Iterable[Path], units: list[TranslationUnit], reads: dict[Path, set[Path]],
          usable: Callable[[TranslationUnit], bool] = lambda _: True) -> Cover:
    """Every changed unit, and for the changed headers none of them reads, the fewest ``usable``
    units that read them all, greedily: the unit reading the most still-unproven headers
    first, recipe order among equals (FA2's sparse kernel unit reads both launch templates
    migrate changes, so one CUTLASS compile proves the two)."""
    changed = set(changed)
    order = {unit.path: index for index, unit in enumerate(units)}
    chosen = [unit for unit in units if unit.path in changed and usable(unit)]
    readers = {path: [unit for unit in units if path in reads.get(unit.path, ())] for path in sorted(changed)}
    unread = [path for path, found in readers.items() if not found]
    mine = {unit.path for unit in chosen}
    pending = {path for path, found in readers.items() if found and not {unit.path for unit in found} & mine}
    while pending:
        candidates = {unit.path: unit for path in pending for unit in readers[path] if usable(unit)}
        if not candidates:
            break
        best = max(candidates.values(),
                   key=lambda unit: (sum(path in reads.get(unit.path, ()) for path in pending), -order[unit.path]))
        chosen.append(best)
        pending = {path for path in pending if path not in reads.get(best.path, ())}
    proves = {path: [unit for unit in chosen if unit in found] for path, found in readers.items() if found}
    return Cover(sorted(chosen, key=lambda unit: order[unit.path]), proves, unread)


def baseline_cover(prover: Prover, changed: Iterable[Path], reads: dict[Path, set[Path]],
                   tries: int = 3) -> tuple[Cover, dict[Path, Compiled]]:
    """The units that prove ``changed``, each compiled as it stands first: a header whose first
    reader does not compile before the rewrite is given up to ``tries`` readers. ``reads`` (the
    static guess per unit) is corrected by what each compile read (``-MD``)."""
    changed = set(changed)
    results: dict[Path, Compiled] = {}
    for _ in range(tries):
        chosen = cover(changed, prover.units, reads, lambda unit: unit.path not in results or results[unit.path].ok)
        new = [unit for unit in chosen.units if unit.path not in results]
        if not new:
            break
        for path, result in prover.baseline(new).items():
            results[path] = result
            if result.ok:
                reads[path] = set(result.reads) | {path}
    final = cover(changed, prover.units, reads, lambda unit: unit.path in results and results[unit.path].ok)
    return final, results
