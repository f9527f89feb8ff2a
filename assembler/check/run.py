"""`assemble check`: every translation unit of every selected dependency, preprocessed the way
its build would compile it, judged CLEAN / UNSTABLE / NOT-LIMITED / INCOMPLETE, in parallel.

Results are stored in the user's cache, ``<cache>/checks/<dep>-<key>.json``, under a key made of the
same parts as a build's artifact key (source commit and uncommitted edits, series, recipe,
torch, torch-target, python-abi, compilers, archs), so an unchanged dependency is not scanned
again and `assemble patches` can read the evidence (:mod:`assembler.check.evidence`).
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from assembler import jsonfile
from assembler.audit.gate import Verdict, passes, worst_source
from assembler.builder.artifact_keys import KeyParts, digest_texts
from assembler.builder.backends import for_dep, limited_api_version, torch_target_version
from assembler.builder.header_diagnostics import torch_include_roots
from assembler.builder.units import CUDA_ROOT, TORCH_ROOT, TranslationUnit, compile_commands_path, translation_units
from assembler.check import compilers
from assembler.check.compilers import Flags, NvccPasses, Pass
from assembler.check.evidence import RECORD_SCHEMA, publish_check, recipe_digest, record_path, units_summary
from assembler.check.share import Sharing, derive, unit_key, uses
from assembler.check.unit_scan import Limits, Reader, ScanOutput, UnitResult, classify, run_pass, undeclared
from assembler.errors import AssembleError, ExitCode, InputError, ToolchainError
from assembler.fsutil import atomic_write
from assembler.git.state import CheckoutState
from assembler.manifest import Dependency
from assembler.manifest.model import CUDA, CXX
from assembler.system import available_cpus
from assembler.toolchain.cuda import CudaToolkit
from assembler.toolchain.cxx import host_compiler
from assembler.toolchain.torchenv import BuildEnv
from assembler.workspace import Workspace

# The code a check's result depends on (part of its key): the checker, the compile model, the link
# rule and the source globs; the recipe's flag shapes (manifest/flags.py) decide what may run.
_PACKAGE = Path(__file__).resolve().parents[1]
CODE = (*sorted(Path(__file__).resolve().parent.glob("*.py")),
        *(_PACKAGE / part
          for part in ("builder/units.py", "builder/links.py", "manifest/globs.py", "manifest/flags.py")))

Note = Callable[[str], None]
DepDone = Callable[["DepCheck"], None]


@dataclass(frozen=True)
class CheckOptions:
    cuda: str | None = None  # X.Y; default: the newest toolkit already on the machine
    torch: str | None = None  # default: [bundle] torch
    jobs: int = 0  # 0: one per CPU
    syntax: bool = True  # a -fsyntax-only pass on C++ units the preprocessor found clean
    # each compiler process's time and memory (a unit past them is INCOMPLETE)
    limits: Limits = field(default_factory=Limits)
    share: bool = True  # units with one directive skeleton share one scan (check.share); False: every unit scans itself


@dataclass
class DepCheck:
    dep: str
    units: list[UnitResult] = field(default_factory=list)
    seconds: float = 0.0
    cached: bool = False
    key: str | None = None
    obtained: str | None = None  # ISO 8601, UTC: when the scans ran
    error: AssembleError | None = None  # what kept it from being checked

    @property
    def clean(self) -> int:
        return sum(unit.verdict == Verdict.CLEAN for unit in self.units)

    @property
    def total(self) -> int:
        return len(self.units)

    @property
    def verdict(self) -> Verdict | None:
        """The worst unit's verdict (UNSTABLE > NOT-LIMITED > INCOMPLETE > CLEAN); "no extensions"
        when the recipe compiles nothing; None when the dependency could not be checked."""
        if self.error is not None:
            return None
        if not self.units:
            return Verdict.NO_EXTENSIONS
        return worst_source(unit.verdict for unit in self.units)

    @property
    def summary(self) -> str:
        return units_summary(self.clean, self.total)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": None if self.verdict is None else self.verdict.value, "clean": self.clean, "total": self.total,
            "summary": self.summary,
            "cached": self.cached, "seconds": round(self.seconds, 3), "key": self.key, "obtained": self.obtained,
            "units": [unit.to_json() for unit in self.units],
            "error": None if self.error is None else self.error.to_json(),
        }


@dataclass
class CheckReport:
    deps: list[DepCheck] = field(default_factory=list)
    torch: str | None = None
    cxx: str | None = None
    cuda: str | None = None  # X.Y of the toolkit whose nvcc passes ran, when any
    nvcc: str | None = None
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        """The first operational error's code (2 for bad input, 7 toolchain, ...); else 1 when
        any unit is not CLEAN (INCOMPLETE included: it proves nothing); else 0."""
        for dep in self.deps:
            if dep.error is not None:
                return int(dep.error.exit_code)
        if any(dep.verdict is None or not passes(dep.verdict) for dep in self.deps):
            return int(ExitCode.CHECK_FAILED)
        return int(ExitCode.OK)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_json(self) -> dict[str, Any]:
        return {
            # schema 2: deps is a list of {"name", ...}, as in every command (1: a dict by name)
            "schema": 2, "command": "check", "ok": self.ok, "exit_code": self.exit_code,
            "torch": self.torch, "cxx": self.cxx, "cuda": self.cuda, "nvcc": self.nvcc,
            "seconds": round(self.seconds, 3),
            "deps": [{"name": dep.dep, **dep.to_json()} for dep in self.deps],
        }


@dataclass
class _Plan:
    """One dependency, ready to scan."""

    dep: Dependency
    check: DepCheck
    checkout: Path
    units: list[TranslationUnit]
    flags: Flags
    archs: tuple[str, ...]
    reader: Reader
    record: dict[str, Any]
    started: float
    default_std: str  # for units whose recipe does not say (setuptools: torch's cpp_extension default)


class CheckToolchain:
    """The build's torch environment and compilers, the CUDA toolkit chosen on first need; shared with
    migration (assess, the compile proof), which compile with check's model."""

    def __init__(self, workspace: Workspace, options: CheckOptions, note: Note) -> None:
        from assembler.builder.builder import host_compiler_version
        from assembler.toolchain.torchenv import ensure_build_env

        torch = options.torch or workspace.manifest.bundle.torch
        if torch is None:
            raise InputError("deps.toml: [bundle] torch is not set, so there are no torch headers to check against",
                             hint='set torch = "2.13.0" in [bundle] of deps.toml, or pass --torch')
        self.options = options
        self.note = note
        self.env: BuildEnv = ensure_build_env(torch, progress=note)
        self.cxx = host_compiler()
        self.cxx_version = host_compiler_version(dict(os.environ))
        self.python_include = compilers.python_include_dir(self.env.python)
        self._cuda: dict[tuple[str, ...], CudaToolkit | ToolchainError] = {}
        self._passes: dict[tuple[tuple[str, ...], tuple[str, ...], str, tuple[str, ...]], NvccPasses] = {}
        self._lock = threading.Lock()

    @property
    def torch_release(self) -> str:
        """MAJOR.MINOR of the build's torch: the newest target its headers know."""
        return ".".join(self.env.torch.split("+")[0].split(".")[:2])

    def cuda(self, components: tuple[str, ...] = ()) -> CudaToolkit:
        """The toolkit the build of a dependency with ``components`` compiles against."""
        if components not in self._cuda:
            from assembler.toolchain.cuda import select_cuda

            version = self.options.cuda or compilers.default_cuda()
            try:
                if version is None:
                    raise ToolchainError("no CUDA toolkit on this machine to preprocess .cu units with",
                                         hint="pass --cuda X.Y (a local toolkit, else installed from PyPI), "
                                              "or set CUDA_HOME")
                self._cuda[components] = select_cuda(version, progress=self.note, components=components)
            except ToolchainError as error:
                self._cuda[components] = error
        found = self._cuda[components]
        if isinstance(found, ToolchainError):
            raise found
        return found

    def cuda_includes(self, required: bool, wanted: bool, components: tuple[str, ...] = ()) -> list[Path]:
        """CUDA's include dirs (and CCCL's, where CUDA 13 keeps libcu++, CUB and Thrust) for the
        C++ units of a dependency that compiles CUDA (``required``: a missing toolkit is an
        error), or may (``wanted``: used when a toolkit is there); the .cu units get nvcc's own."""
        if not (required or wanted):
            return []
        try:
            include = self.cuda(components).root / "include"
        except ToolchainError:
            if required:
                raise
            return []
        return [include, *([include / "cccl"] if (include / "cccl").is_dir() else [])]

    @property
    def selected_cuda(self) -> CudaToolkit | None:
        """The toolkit chosen for this run, when one was needed and found."""
        return next((found for found in self._cuda.values() if isinstance(found, CudaToolkit)), None)

    def nvcc_passes(self, components: tuple[str, ...], archs: tuple[str, ...], std: str,
                    extra: tuple[str, ...]) -> NvccPasses:
        """nvcc's preprocessor commands for one toolkit, arch list, standard and cuda-flags (read
        once per combination, from the scan's worker threads)."""
        key = (components, archs, std, extra)
        with self._lock:
            if key not in self._passes:
                self._passes[key] = compilers.nvcc_passes(self.cuda(components), archs, std, extra)
            return self._passes[key]


def run_check(
    workspace: Workspace, names: list[str], options: CheckOptions,
    note: Note = lambda _: None, on_dep: DepDone = lambda _: None,
) -> CheckReport:
    """Check the named dependencies (all when none), keep going past every failure, and report."""
    from assembler.git.state import series_digest
    from assembler.git.sync import sync_checkouts

    started = time.monotonic()
    deps = workspace.manifest.select(names)
    report = CheckReport()
    with workspace.lock():
        tools = CheckToolchain(workspace, options, note)
        report.torch, report.cxx = tools.env.torch, tools.cxx_version
        plans: list[_Plan] = []
        for dep in deps:
            check = DepCheck(dep.name)
            report.deps.append(check)
            try:
                require_recipe(workspace, dep)
                checkout = sync_checkouts(workspace, [dep], lambda name, step: note(f"{name}: {step}"))[dep.name].path
                plan = _plan(workspace, dep, check, checkout, tools, options, CheckoutState.load(checkout),
                             series_digest(dep))
            except AssembleError as error:
                check.error = error
                on_dep(check)
                continue
            if plan is None:  # the stored result of this key
                on_dep(check)
            else:
                plans.append(plan)
        _scan(plans, tools, options, workspace, on_dep)
        cuda = tools.selected_cuda
        if cuda is not None:
            report.cuda, report.nvcc = cuda.version, cuda.release
    report.seconds = time.monotonic() - started
    return report


def require_recipe(workspace: Workspace, dep: Dependency) -> None:
    """Refuse a dependency with no build recipe at all: it compiles nothing, so "0 of 0
    translation units clean" would pass while proving nothing (a pure-Python recipe, with
    python-packages or data, is "no extensions" and passes). Checked before any checkout."""
    if not for_dep(dep).nothing_to_build(dep.build):
        return
    from assembler.manifest.load import value_position

    raise InputError(
        f"{value_position(workspace.manifest_path, ('deps', dep.name))}: deps.{dep.name} has no build recipe "
        f"([deps.{dep.name}.build]), so it has no translation units to check",
        hint=f'add [[deps.{dep.name}.build.extensions]] with name = "_C" and sources = ["csrc/*.cpp"] (or a '
             f'[deps.{dep.name}.build] with backend = "setuptools" or "cmake" and its sources), then '
             f"`assemble check {dep.name}` again",
    )


class DepModel(NamedTuple):
    """How every unit of one dependency compiles besides its own -D/-I/-std: check's scans and
    migrate's compile proof (migration/proof.py) read it from here."""

    flags: Flags
    toolkit: CudaToolkit | None  # when a unit needs CUDA
    archs: tuple[str, ...]
    default_std: str  # for units whose recipe does not say (setuptools: torch's cpp_extension default)


def dep_model(workspace: Workspace, dep: Dependency, units: list[TranslationUnit], tools: CheckToolchain) -> DepModel:
    """The build's compile model of ``dep``: torch's include roots, then CUDA's, the torch-target
    and limited-API defines, the CUDA archs and the default standard."""
    archs = tuple(dep.build.cuda_archs if dep.build.cuda_archs is not None else workspace.manifest.bundle.cuda_archs)
    has_cu = any(unit.language == CUDA for unit in units)
    components = dep.cuda_components
    needs_cuda = has_cu or any(root == CUDA_ROOT for unit in units for root, _ in unit.system_includes or ())
    toolkit = tools.cuda(components) if needs_cuda else None
    system = list(torch_include_roots(tools.env.torch_dir))[::-1]  # torch/include first, then the C++ API's
    system += tools.cuda_includes(
        # a dependency's own build may compile C++ against CUDA's headers
        required=needs_cuda, wanted=not for_dep(dep).from_extensions,
        components=components,
    )
    flags = Flags(
        defines=(f"TORCH_TARGET_VERSION={torch_target_version(dep.torch_target)}",
                 f"Py_LIMITED_API={limited_api_version(workspace.manifest.bundle.python_abi)}"),
        system_includes=tuple(system), python_include=tools.python_include,
        roots=((TORCH_ROOT, tools.env.torch_dir), *(((CUDA_ROOT, toolkit.root),) if toolkit is not None else ())),
    )
    default_std = (compilers.torch_extension_std(tools.env.torch_dir) if for_dep(dep).cpp_extension_std
                   else compilers.DEFAULT_STD)
    return DepModel(flags, toolkit, archs, default_std)


def _plan(
    workspace: Workspace, dep: Dependency, check: DepCheck, checkout: Path, tools: CheckToolchain,
    options: CheckOptions, state: CheckoutState | None, series: str,
) -> _Plan | None:
    from assembler.builder.builder import source_identity

    units = translation_units(workspace, dep, checkout)
    flags, toolkit, archs, default_std = dep_model(workspace, dep, units, tools)
    components = dep.cuda_components
    head, dirty = source_identity(checkout)
    compdb = compile_commands_path(workspace.state_dir, dep.name)
    origin_bytes = compdb.read_bytes() if any(unit.origin == "compile-commands" for unit in units) else b""
    code = [path.read_bytes() for path in CODE]
    parts = KeyParts(
        dep=dep.name,
        source=head if dirty is None else f"{head}+{dirty}",
        series=series,
        recipe=digest_texts(recipe_digest(dep), origin_bytes, *code),
        toolchain=(("c++", tools.cxx_version), *((("nvcc", toolkit.release),) if toolkit else ()),
                   *(sorted(toolkit.packages.items()) if toolkit else ()),
                   ("python-include", str(tools.python_include))),
        torch=tools.env.torch,
        torch_target=dep.torch_target,
        archs=archs if toolkit else (),
        flags=("check", "syntax" if options.syntax else "preprocess-only",
               "shared-scans" if options.share else "every-unit",
               f"limits={options.limits.seconds:g}s,{options.limits.memory}B"),  # a raised limit re-checks
        python_abi=workspace.manifest.bundle.python_abi,
    )
    key = parts.digest()
    check.key = key
    stored = _stored(record_path(dep.name, key), key)
    if stored is not None:
        check.units = [UnitResult.from_json(unit) for unit in stored["result"]["units"]]
        check.obtained, check.cached = stored["obtained"], True
        check.seconds = float(stored["result"]["seconds"])
        return None
    record = {
        "schema": RECORD_SCHEMA, "key": key, "dep": dep.name, "commit": dep.commit, "head": head,
        "dirty": dirty is not None, "series_head": state.head if state is not None else None, "series": series,
        "recipe": recipe_digest(dep), "torch": tools.env.torch, "torch_target": dep.torch_target,
    }
    reader = Reader(checkout, torch_include_roots(tools.env.torch_dir), tools.python_include)
    for unit in units:  # after the cache: `nvcc --dryrun` only when scanning, once per standard and cuda-flags
        if unit.language == CUDA:
            tools.nvcc_passes(components, archs, unit.std or default_std, unit.flags)
    return _Plan(dep, check, checkout, units, flags, archs, reader, record, time.monotonic(), default_std)


def _stored(path: Path, key: str) -> dict[str, Any] | None:
    try:
        data = jsonfile.load(path)
        if data.get("schema") == RECORD_SCHEMA and data.get("key") == key and isinstance(data["result"]["units"], list):
            return dict(data)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _scan(plans: list[_Plan], tools: CheckToolchain, options: CheckOptions, workspace: Workspace,
          on_dep: DepDone) -> None:
    """All units of all plans on one pool of ``--jobs`` workers; a dependency is reported (and
    its record written) as soon as its last unit is done. Units that share a scan
    (:mod:`assembler.check.share`) are scanned once; the others then only read its output."""
    jobs = options.jobs or available_cpus()
    remaining = {id(plan): len(plan.units) for plan in plans}
    results: dict[int, dict[Path, UnitResult]] = {id(plan): {} for plan in plans}
    sharing = Sharing()

    def done(plan: _Plan, unit: TranslationUnit, result: UnitResult) -> None:
        results[id(plan)][unit.path] = result
        remaining[id(plan)] -= 1
        if remaining[id(plan)] == 0:
            _finish(plan, [results[id(plan)][u.path] for u in plan.units], workspace, on_dep)

    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="check") as pool:
        pending: dict[Future[Any], tuple[_Plan, list[TranslationUnit]]] = {}
        for plan in plans:
            if not plan.units:
                _finish(plan, [], workspace, on_dep)
            for group in _groups(plan, tools, options):
                pending[pool.submit(_scan_group, plan, group, tools, options, sharing)] = (plan, group)
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                plan, group = pending.pop(future)
                result, outputs, poisoned = future.result()
                done(plan, group[0], result)
                for unit in group[1:]:  # shared: classify its output; else the unit scans itself
                    if outputs is None or uses(unit.path, poisoned):
                        job = pool.submit(_scan_group, plan, [unit], tools, options, sharing)
                    else:
                        theirs = derive(outputs, str(group[0].path), str(unit.path))
                        job = pool.submit(_scan_group, plan, [unit], tools, options, sharing, theirs, group[0].source)
                    pending[job] = (plan, [unit])


def _groups(plan: _Plan, tools: CheckToolchain, options: CheckOptions) -> list[list[TranslationUnit]]:
    """The plan's units, those with one sharing key (check.share.unit_key) together, in order."""
    if not options.share:
        return [[unit] for unit in plan.units]
    groups: dict[object, list[TranslationUnit]] = {}
    for unit in plan.units:
        key = unit_key(unit.path, _passes(plan, unit, tools))
        groups.setdefault(unit.path if key is None else key, []).append(unit)
    return list(groups.values())


def _finish(plan: _Plan, units: list[UnitResult], workspace: Workspace, on_dep: DepDone) -> None:
    check = plan.check
    check.units = units
    check.seconds = time.monotonic() - plan.started
    check.obtained = datetime.now(UTC).isoformat(timespec="seconds")
    record = {**plan.record, "obtained": check.obtained,
              "result": {"seconds": check.seconds, "units": [u.to_json() for u in units]}}
    try:
        path = record_path(plan.dep.name, str(plan.record["key"]), create=True)
        path.parent.mkdir(exist_ok=True)
        atomic_write(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    except OSError as exc:  # a read-only cache: the result stands, it is just not kept
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
    publish_check(workspace, plan.dep, record)  # the evidence every workspace reads
    on_dep(check)


def _passes(plan: _Plan, unit: TranslationUnit, tools: CheckToolchain) -> list[Pass]:
    std = unit.std or plan.default_std
    if unit.language == CUDA:  # nvcc's passes for this unit's standard and flags (read by _plan)
        return tools.nvcc_passes(plan.dep.cuda_components, plan.archs, std, unit.flags).passes(plan.flags, unit)
    return [compilers.cxx_pass(tools.cxx, plan.flags, unit, std)]


def _scan_group(
    plan: _Plan, group: list[TranslationUnit], tools: CheckToolchain, options: CheckOptions, sharing: Sharing,
    outputs: list[ScanOutput] | None = None, scanned_as: str | None = None,
) -> tuple[UnitResult, list[ScanOutput] | None, frozenset[str]]:
    """The first unit of ``group`` checked (from ``outputs``, another unit's scans, when given),
    its scans when they can answer for the rest of the group, and the names its headers poison
    (a unit whose text uses one scans itself)."""
    unit = group[0]
    if outputs is None:
        outputs = [run_pass(scan, plan.checkout, options.limits) for scan in _passes(plan, unit, tools)]
    result = _check_unit(plan, unit, tools, options, outputs)
    result.scanned_as = scanned_as
    poisoned = sharing.reusable(outputs, str(unit.path)) if len(group) > 1 else None
    return result, (outputs if poisoned is not None else None), poisoned or frozenset()


def _check_unit(plan: _Plan, unit: TranslationUnit, tools: CheckToolchain, options: CheckOptions,
                outputs: list[ScanOutput]) -> UnitResult:
    result = UnitResult(unit.source, unit.language, unit.extension, unit.origin)
    std = unit.std or plan.default_std
    classify(unit, outputs, plan.reader, result)
    clean = not (result.unstable or result.not_limited or result.missing or result.errors)
    if options.syntax and unit.language == CXX and clean:
        _syntax(plan, unit, tools, result, std, options.limits)
    result.decide()
    return result


def _syntax(plan: _Plan, unit: TranslationUnit, tools: CheckToolchain, result: UnitResult, std: str,
            limits: Limits) -> None:
    """Shim functions and stable wrappers newer than the torch-target vanish behind
    TORCH_FEATURE_VERSION guards: the preprocessor is happy, the compiler is not. When the
    same pass with the build torch's own version as target compiles, the names it missed are
    what the torch-target hides (UNSTABLE); otherwise the unit simply does not compile (INCOMPLETE)."""
    output = run_pass(compilers.syntax_pass(tools.cxx, plan.flags, unit, std), plan.checkout, limits)
    result.passes.append("syntax")
    result.seconds += output.seconds
    if not output.errors:
        return
    target = plan.dep.torch_target
    if tools.torch_release != target:
        newest = (f"TORCH_TARGET_VERSION={torch_target_version(tools.torch_release)}", plan.flags.defines[1])
        again = run_pass(compilers.syntax_pass(tools.cxx, plan.flags, unit, std, newest), plan.checkout, limits)
        result.passes.append(f"syntax (target {tools.torch_release})")
        result.seconds += again.seconds
        if not again.errors:  # the target alone makes the difference
            first = output.errors[0]
            result.symbols.extend(undeclared(output, plan.reader, plan.checkout) or [{
                "symbol": first.text, "since": None,
                "at": f"{plan.reader.name(plan.reader.absolute(first.file, plan.checkout))}:{first.line}",
            }])
            return
    first = output.errors[0]
    result.errors.append(f"{plan.reader.name(plan.reader.absolute(first.file, plan.checkout))}:{first.line}: "
                         f"{first.text}"
                         + (f" (+{len(output.errors) - 1} more errors)" if len(output.errors) > 1 else ""))
