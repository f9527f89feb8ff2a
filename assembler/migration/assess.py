"""`assemble assess`: the inventory a Stable-ABI migration starts from. Every LibTorch use in the
translation units the recipe builds (``builder/units.py``), on the lines the build's defines
keep (:mod:`assembler.migration.active`, check's preprocessor commands), each at ``file:line``,
grouped by API family with its stable equivalent, the torch release that provides it and
whether the rewrite is mechanical; the torch floor the migration implies; the pybind11 surface
to convert.

The preprocessing leaves out the dependency-wide TORCH_TARGET_VERSION and Py_LIMITED_API: the
inventory is of the code as it compiles today (under TORCH_TARGET_VERSION torch's unstable
headers stop at their ``#error`` and define nothing later code may test).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.builder.units import CUDA_ROOT, TORCH_ROOT, TranslationUnit, translation_units
from assembler.errors import AssembleError
from assembler.manifest import Dependency
from assembler.manifest.model import CUDA
from assembler.migration import syntax
from assembler.migration.active import ActiveLines, Stamps, active_lines
from assembler.migration.lexer import blank_comments_and_strings
from assembler.migration.progress import (
    MigrationProgress,
    ProgressEvidence,
    evidence_record,
    migration_progress,
    publish_progress,
)
from assembler.migration.rules import Kind, Match, RuleSet, defined_macros, load_rules, match_rules
from assembler.migration.versions import Provided, Versions
from assembler.workspace import Workspace

Note = Callable[[str], None]
SCHEMA = 2  # of `assess --json`: 2, deps is a list keyed name (as check's), progress an object with its evidence


@dataclass(frozen=True)
class Use:
    file: str  # relative to the checkout
    line: int
    column: int
    text: str
    rule: str

    @property
    def at(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class UnitUses:
    source: str
    language: str
    uses: int = 0
    judgment: int = 0
    stand_ins: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return self.uses == 0 and not self.errors

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "language": self.language, "uses": self.uses, "judgment": self.judgment,
                "clean": self.clean, "stand_ins": self.stand_ins, "errors": self.errors,
                "seconds": round(self.seconds, 3)}


@dataclass
class Pybind11Surface:
    modules: int = 0
    defs: int = 0
    args: int = 0
    tuple_parameters: int = 0
    tuple_returns: int = 0
    reference_scalars: int = 0  # const int& and the like: plain int64_t in a schema
    functions: list[dict[str, Any]] = field(default_factory=list)
    helpers: int = 0  # functions taking the module (pybind11::module_& m) whose m.def calls count too

    def to_json(self) -> dict[str, Any]:
        return {"modules": self.modules, "helpers": self.helpers, "defs": self.defs, "args": self.args,
                "tuple_parameters": self.tuple_parameters,
                "tuple_returns": self.tuple_returns, "reference_scalars": self.reference_scalars,
                "functions": self.functions}


@dataclass
class DepAssessment:
    dep: str
    torch_target: str
    uses: list[Use] = field(default_factory=list)
    units: list[UnitUses] = field(default_factory=list)
    versions: dict[str, Provided] = field(default_factory=dict)
    pybind11: Pybind11Surface = field(default_factory=Pybind11Surface)
    active: dict[Path, set[int]] = field(default_factory=dict)  # the lines the build compiles, per file of the checkout
    error: AssembleError | None = None
    seconds: float = 0.0
    evidence: ProgressEvidence | None = None  # this run, as the progress line names it

    def kind_of(self, use: Use, ruleset: RuleSet) -> Kind:
        return ruleset.by_id(use.rule).kind

    def floor(self, ruleset: RuleSet) -> tuple[str | None, list[str]]:
        """The torch release the migrated code needs (the newest equivalent it uses) and the
        rules that set it."""
        best: tuple[int, ...] | None = None
        setters: list[str] = []
        for rule_id in sorted({use.rule for use in self.uses}):
            since = self.versions[rule_id].since
            if since is None:
                continue
            key = tuple(int(p) for p in since.split("."))
            if best is None or key > best:
                best, setters = key, [rule_id]
            elif key == best:
                setters.append(rule_id)
        return (None if best is None else ".".join(map(str, best))), setters

    def to_json(self, ruleset: RuleSet) -> dict[str, Any]:
        if self.error is not None:
            return {"error": self.error.to_json(), "seconds": round(self.seconds, 3)}
        by_rule: dict[str, list[Use]] = defaultdict(list)
        for use in self.uses:
            by_rule[use.rule].append(use)
        families = []
        for family, description in ruleset.families.items():
            apis: list[dict[str, Any]] = []
            for rule in ruleset.rules:
                if rule.family != family or rule.id not in by_rule:
                    continue
                provided = self.versions[rule.id]
                apis.append({
                    "rule": rule.id, "api": rule.api, "stable": rule.stable, "since": provided.since,
                    "since_source": provided.source, "kind": rule.kind.value, "way_round": rule.way_round,
                    "hazard": rule.hazard, "count": len(by_rule[rule.id]),
                    "uses": [{"at": u.at, "column": u.column, "text": u.text} for u in by_rule[rule.id]],
                })
            if apis:
                families.append({"family": family, "description": description, "count": sum(a["count"] for a in apis),
                                 "apis": apis})
        floor, setters = self.floor(ruleset)
        kinds = {kind.value: sum(1 for u in self.uses if ruleset.by_id(u.rule).kind is kind) for kind in Kind}
        return {
            "torch_target": self.torch_target, "seconds": round(self.seconds, 3),
            "summary": {
                "uses": len(self.uses), "apis": len(by_rule), "files": len({u.file for u in self.uses}),
                "kinds": kinds, "torch_floor": floor, "floor_set_by": setters,
                "raises_torch_target": floor is not None and _newer(floor, self.torch_target),
                "units_clean": sum(1 for u in self.units if u.clean), "units": len(self.units),
                "progress": None if self.evidence is None else self.progress(ruleset).to_json(),
            },
            "pybind11": self.pybind11.to_json(),
            "families": families,
            "units": [unit.to_json() for unit in self.units],
            "error": None,
        }

    def progress_inputs(self, ruleset: RuleSet) -> tuple[list[bool], list[Kind]]:
        return [u.clean for u in self.units], [ruleset.by_id(u.rule).kind for u in self.uses]

    def progress(self, ruleset: RuleSet) -> MigrationProgress:
        """The migration progress line ``patches`` and ``assess`` share (migration/progress.py)."""
        assert self.evidence is not None
        return migration_progress(*self.progress_inputs(ruleset), self.evidence)


def _newer(a: str, b: str) -> bool:
    return tuple(int(p) for p in a.split(".")) > tuple(int(p) for p in b.split(".")[:2])


@dataclass
class AssessReport:
    ruleset: RuleSet
    deps: list[DepAssessment] = field(default_factory=list)
    torch: str | None = None
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        for dep in self.deps:
            if dep.error is not None:
                return int(dep.error.exit_code)
        return 0

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "rules_version": self.ruleset.version, "torch": self.torch,
                "seconds": round(self.seconds, 3),
                "deps": [{"name": dep.dep, **dep.to_json(self.ruleset)} for dep in self.deps]}


def run_assess(workspace: Workspace, names: list[str], jobs: int = 0, torch: str | None = None,
               note: Note = lambda _: None, sync: bool = True) -> AssessReport:
    """Assess the named dependencies (all when none); a dependency that cannot be read is
    reported with its error and the others go on. ``sync``: bring the checkout up to date
    first (migrate assesses the checkout as it stands)."""
    from datetime import UTC, datetime

    from assembler.builder.builder import source_identity
    from assembler.builder.evidence import is_exactly_pinned
    from assembler.builder.header_diagnostics import torch_include_roots
    from assembler.check.compilers import Flags
    from assembler.check.run import CheckOptions, CheckToolchain
    from assembler.git.state import pinned_state
    from assembler.git.sync import sync_checkouts
    from assembler.system import available_cpus

    started = time.monotonic()
    ruleset = load_rules()
    report = AssessReport(ruleset)
    deps = workspace.manifest.select(names)
    with workspace.lock():
        tools = CheckToolchain(workspace, CheckOptions(torch=torch), note)
        report.torch = tools.env.torch
        include_root = tools.env.torch_dir / "include"
        versions = Versions(include_root).all(ruleset)
        for dep in deps:
            assessment = DepAssessment(dep.name, dep.torch_target, versions=versions)
            report.deps.append(assessment)
            began = time.monotonic()
            try:
                checkout = (sync_checkouts(workspace, [dep], lambda name, step: note(f"{name}: {step}"))[dep.name].path
                            if sync else workspace.fork_path(dep))
                units = translation_units(workspace, dep, checkout)
                # check's own toolchain and flags (check/run.py _plan), less the dependency-wide guards
                has_cu = any(unit.language == CUDA for unit in units)
                components = dep.cuda_components
                needs_cuda = has_cu or any(root == CUDA_ROOT for unit in units
                                           for root, _ in unit.system_includes or ())
                toolkit = tools.cuda(components) if needs_cuda else None
                system = list(torch_include_roots(tools.env.torch_dir))[::-1]
                system += tools.cuda_includes(required=needs_cuda, wanted=dep.build.backend != "helper",
                                              components=components)
                flags = Flags(defines=(), system_includes=tuple(system), python_include=tools.python_include,
                              roots=((TORCH_ROOT, tools.env.torch_dir),
                                     *(((CUDA_ROOT, toolkit.root),) if toolkit is not None else ())))
                archs = tuple(dep.build.cuda_archs if dep.build.cuda_archs is not None
                              else workspace.manifest.bundle.cuda_archs)
                note(f"{dep.name}: preprocessing {len(units)} units")
                head, dirty = source_identity(checkout)
                obtained = datetime.now(UTC).isoformat(timespec="seconds")
                _assess(assessment, dep, checkout, units, flags, tools, archs, ruleset, jobs or available_cpus())
                assessment.evidence = ProgressEvidence(obtained, head, tools.env.torch, ruleset.version)
                state = pinned_state(checkout, dep)
                if state is not None and is_exactly_pinned(workspace, dep, head, state.head, dirty is not None):
                    publish_progress(dep, evidence_record(*assessment.progress_inputs(ruleset), assessment.evidence))
            except AssembleError as error:
                assessment.error = error
            assessment.seconds = time.monotonic() - began
    report.seconds = time.monotonic() - started
    return report


def _assess(assessment: DepAssessment, dep: Dependency, checkout: Path, units: list[TranslationUnit], flags: Any,
            tools: Any, archs: tuple[str, ...], ruleset: RuleSet, jobs: int) -> None:
    from assembler.check import compilers
    from assembler.check.compilers import Pass

    default_std = (compilers.torch_extension_std(tools.env.torch_dir) if dep.build.backend == "setuptools"
                   else compilers.DEFAULT_STD)

    def scans(unit: TranslationUnit) -> list[Pass]:
        std = unit.std or default_std
        if unit.language == CUDA:
            return list(tools.nvcc_passes(dep.cuda_components, archs, std, unit.flags).passes(flags, unit))
        return [compilers.cxx_pass(tools.cxx, flags, unit, std)]

    from assembler.migration.proof import cpu_torch_stand_ins

    planned = [(unit, scans(unit)) for unit in units]
    others = _submodules(checkout)
    skip, extra = tuple(others), tuple(cpu_torch_stand_ins(tools.env.torch_dir))
    stamps: Stamps = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="assess") as pool:
        kept: list[ActiveLines] = list(pool.map(
            lambda item: active_lines(item[1], checkout, checkout, skip, extra, stamps), planned))
    merged: dict[Path, set[int]] = defaultdict(set)
    for lines in kept:
        for path, numbers in lines.lines.items():
            if not _below(path, others):
                merged[path] |= numbers
    assessment.active = dict(merged)
    matches: dict[Path, list[Match]] = {}
    codes: dict[Path, str] = {}
    for path in sorted(merged):
        try:
            codes[path] = blank_comments_and_strings(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    defined = defined_macros(codes.values())  # the project's own CHECK is no use of c10's
    for path, code in codes.items():
        matches[path] = match_rules(ruleset, code, merged[path], defined)
        rel = path.relative_to(checkout).as_posix()
        assessment.uses += [Use(rel, m.line, m.column, m.text, m.rule.id) for m in matches[path]]
    for (unit, _), lines in zip(planned, kept, strict=True):
        result = UnitUses(unit.source, unit.language, stand_ins=lines.stand_ins, errors=lines.errors,
                          seconds=lines.seconds)
        for path, numbers in lines.lines.items():
            for match in matches.get(path, []):
                if match.line in numbers:
                    result.uses += 1
                    result.judgment += match.rule.kind is not Kind.MECHANICAL
        assessment.units.append(result)
    assessment.pybind11 = pybind11_surface({path: _active_only(code, merged[path]) for path, code in codes.items()})


def _submodules(checkout: Path) -> list[Path]:
    """The checkout's submodules: their files are another project's (CUTLASS's own
    ``.contiguous()`` is no LibTorch use), neither counted nor rewritten here."""
    from assembler.git.process import WorkTree

    return [checkout / path for path in WorkTree(checkout).submodule_paths()]


def _below(path: Path, folders: list[Path]) -> bool:
    return any(folder == path or folder in path.parents for folder in folders)


def _active_only(code: str, active: set[int]) -> str:
    """``code`` with the lines the build drops blanked (line numbers kept)."""
    return "\n".join(line if number in active else "" for number, line in enumerate(code.split("\n"), start=1))


_MODULE = re.compile(r"\bPYBIND11_MODULE\s*\(\s*\w+\s*,\s*(\w+)\s*\)")
_ARG = re.compile(r"\bpy::arg\s*\(")
# a function a module hands itself to
_HELPER = re.compile(r"\b\w+\s*\(\s*(?:pybind11|py)::module_?\s*&\s*(\w+)\s*\)\s*\{")
_SCALAR_REF = re.compile(r"\b(?:const\s+)?(?:int|int64_t|int32_t|long|double|float|bool|size_t)\s*(?:const\s*)?&")


def pybind11_surface(codes: dict[Path, str]) -> Pybind11Surface:
    """What a move from pybind11 to a torch library has to convert: the modules, their
    ``m.def`` calls and ``py::arg`` s (also those of functions a module hands itself to,
    ``register_apis(pybind11::module_& m)``), and the bound functions' tuple parameters, tuple
    returns and scalars taken by reference (a schema has plain int, float and bool)."""
    surface = Pybind11Surface()
    bound: list[str] = []

    def registrations(body: str, var: str) -> None:
        for found in re.finditer(rf"\b{re.escape(var)}\s*\.\s*def\s*\(\s*\"", body):
            surface.defs += 1
            target = re.match(r"\s*\"[^\"]*\"\s*,\s*&?\s*([\w:]+)", body[found.end() - 1:])
            if target:
                bound.append(target.group(1).split("::")[-1])
        surface.args += len(_ARG.findall(body))

    for code in codes.values():
        for module in _MODULE.finditer(code):
            surface.modules += 1
            registrations(_braced_body(code, module.end()), module.group(1))
        for helper in _HELPER.finditer(code):  # register_apis(pybind11::module_& m) { m.def(...); }, called by a module
            surface.helpers += 1
            registrations(_braced_body(code, helper.end() - 1), helper.group(1))
    for name in bound:
        signature = _signature(codes, name)
        if signature is None:
            surface.functions.append({"name": name, "found": False})
            continue
        returns, parameters = signature
        tuples = sum(1 for p in parameters if "tuple<" in p)
        refs = sum(1 for p in parameters if _SCALAR_REF.search(p))
        surface.tuple_parameters += tuples
        surface.reference_scalars += refs
        surface.tuple_returns += "tuple<" in returns
        surface.functions.append({"name": name, "found": True, "returns": returns, "parameters": parameters,
                                  "tuple_parameters": tuples, "reference_scalars": refs})
    return surface


def _braced_body(code: str, start: int) -> str:
    """The text of the ``{...}`` block that starts at or after ``start``."""
    opening = code.find("{", start)
    if opening < 0:
        return ""
    depth = 0
    for index in range(opening, len(code)):
        if code[index] == "{":
            depth += 1
        elif code[index] == "}":
            depth -= 1
            if depth == 0:
                return code[opening + 1:index]
    return code[opening + 1:]


# What comes before a function's name where it is declared or defined: its return type (words,
# '::', one template argument list, '&' and '*'), then any qualification (ns::). One spelling for
# assess's signatures, the registration step's declarations and the proof's linked files.
DECLARATION_HEAD = r"(?P<ret>(?:[\w:]+(?:\s*<[^;{}()]*>)?[\s&*]+)+?)(?:\w+::)*"


def _signature(codes: dict[Path, str], name: str) -> tuple[str, list[str]] | None:
    """The return type and parameters of the first declaration or definition of ``name``."""
    pattern = re.compile(DECLARATION_HEAD + re.escape(name) + r"\s*\(")
    for code in codes.values():
        for found in pattern.finditer(code):
            written = found.group("ret")
            lines = [line for line in written.split("\n") if line.strip()]
            returns = " ".join(lines[-1].split()) if lines else ""  # not a directive line above it
            if returns.split()[-1:] in (["return"], ["new"]) or "=" in returns:
                continue
            parameters = _parameters(code, found.end())
            if parameters is not None:
                return returns, parameters
    for code in codes.values():  # a return type the token reading misses (std::function<T(U)>)
        from_tree = syntax.signature(code, name)
        if from_tree is not None:
            return from_tree
    return None


def _definition_body(codes: dict[Path, str], name: str, whole: dict[Path, str] | None = None) -> str | None:
    """The body of the first definition of ``name`` (a declaration has none): what the
    registration step reads to see which tensors the function writes. ``whole``: the same
    files with the lines ``codes`` blanks kept (a macro the body defines, whose lines the
    build never compiles as such), the body then taken from there."""
    pattern = re.compile(rf"(?<![\w.>]){re.escape(name)}\s*\(")
    for path, code in codes.items():
        for found in pattern.finditer(code):
            depth = 1
            index = found.end()
            while index < len(code) and depth:
                depth += {"(": 1, ")": -1}.get(code[index], 0)
                index += 1
            after = re.match(r"\s*(?:const\s*|noexcept\s*|override\s*)*\{", code[index:index + 200])
            if depth == 0 and after:
                body = _braced_body(code, index)
                if whole is None or path not in whole:
                    return body
                return _same_span(code, whole[path], code.find("{", index) + 1, len(body))
    return None


def _same_span(code: str, other: str, start: int, length: int) -> str:
    """``other``'s text from where ``code[start]`` is to where ``code[start + length]`` is, by
    line and column (``code`` blanks whole lines of ``other``)."""
    def place(offset: int) -> int:
        line = code.count("\n", 0, offset)
        column = offset - (code.rfind("\n", 0, offset) + 1)
        starts = [0, *(m.end() for m in re.finditer("\n", other))]
        return starts[line] + column if line < len(starts) else len(other)
    return other[place(start):place(start + length)]


def _parameters(code: str, start: int) -> list[str] | None:
    depth, angle = 1, 0
    current: list[str] = []
    out: list[str] = []
    for index in range(start, min(len(code), start + 4000)):
        char = code[index]
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                last = " ".join("".join(current).split())
                if last:
                    out.append(last)
                return out
        elif char == "<":
            angle += 1
        elif char == ">":
            angle = max(0, angle - 1)
        elif char == "," and depth == 1 and angle == 0:
            out.append(" ".join("".join(current).split()))
            current = []
            continue
        elif char in ";{}" and depth == 1:
            return None
        current.append(char)
    return None
