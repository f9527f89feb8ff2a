"""`assemble build --plan`: what a build would compile, resolved against the checkouts, without
compiling: per dependency its backend, its translation units (from ``builder.units``) and the
GPU architectures each CUDA unit is compiled for, and the compiler processes that makes.

A CUDA unit is one nvcc process that compiles every architecture (one ``-gencode`` each), as
both CMake and ``torch.utils.cpp_extension`` run it; the helper backend adds one generated
PyInit stub per extension. A recipe path missing from the checkout is an error naming its
deps.toml line; the plan goes on with the other dependencies and fails at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.builder import backends, links, recipe
from assembler.builder.builder import dep_archs
from assembler.errors import AssembleError, InputError
from assembler.manifest import Dependency
from assembler.manifest.model import CUDA
from assembler.toolchain.cxx import cxx_name
from assembler.workspace import Workspace

PLAN_SCHEMA = 2  # 2: deps is a list of {"name", ...}, as in every command (1: a dict by name)


@dataclass
class DepPlan:
    dep: str
    backend: str
    checkout: Path | None
    torch_target: str
    archs: list[str] = field(default_factory=list)
    defines: list[str] = field(default_factory=list)  # what every unit gets: the torch and Python floors, the recipe's
    # None: not known before the first build (no sources, no compile commands)
    units: list[dict[str, Any]] | None = None
    jobs: int = 0  # compiler processes
    arch_compilations: int = 0  # units x archs: one per C++ unit, one per architecture of each CUDA unit
    note: str | None = None
    error: AssembleError | None = None
    profile: str | None = None  # the build profile planned (None: the full build)

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend, "profile": self.profile, "checkout": str(self.checkout) if self.checkout else None,
            "torch_target": self.torch_target, "archs": self.archs, "defines": self.defines,
            "units": self.units, "jobs": self.jobs, "arch_compilations": self.arch_compilations, "note": self.note,
            "error": None if self.error is None else self.error.to_json(),
        }


@dataclass
class BuildPlan:
    deps: list[DepPlan]

    @property
    def ok(self) -> bool:
        return all(plan.error is None for plan in self.deps)

    @property
    def error(self) -> AssembleError | None:
        """What the command exits with: the one dependency's error, or one naming every failure."""
        failed = [plan for plan in self.deps if plan.error is not None]
        if not failed:
            return None
        first = failed[0].error
        assert first is not None
        if len(failed) == 1:
            return first
        messages = "; ".join(plan.error.message for plan in failed if plan.error is not None)
        return InputError(f"build --plan: {len(failed)} dependencies cannot be planned: {messages}", hint=first.hint)

    def to_json(self) -> dict[str, Any]:
        return {"schema": PLAN_SCHEMA, "command": "build-plan", "ok": self.ok,
                "deps": [{"name": plan.dep, **plan.to_json()} for plan in self.deps]}


def plan_build(workspace: Workspace, only: tuple[str, ...] = (), note: Callable[[str], None] = lambda _: None,
               profile: str | None = None) -> BuildPlan:
    """The plan of the build (on ``profile``, when given: Manifest.with_profile)."""
    full = workspace.manifest
    workspace.manifest = full.with_profile(profile)
    try:
        return _plan_build(workspace, only, note)
    finally:
        workspace.manifest = full


def _plan_build(workspace: Workspace, only: tuple[str, ...], note: Callable[[str], None]) -> BuildPlan:
    """Check out (as `build` does), then plan every selected dependency. Checkouts already at
    the pin with the series are read as they are, without the workspace lock: a plan never
    waits for a running build; only a dependency that needs checking out takes the lock."""
    from assembler.errors import AssembleError
    from assembler.git.state import pinned_state
    from assembler.git.sync import refuse_during_rebase, sync_each

    deps = workspace.manifest.select(list(only))
    refuse_during_rebase(workspace, deps)
    paths: dict[str, Path] = {}
    for dep in deps:
        try:
            if pinned_state(workspace.fork_path(dep), dep) is not None:
                paths[dep.name] = workspace.fork_path(dep)
        except AssembleError:
            continue  # the checkout below reports it
    stale = [dep for dep in deps if dep.name not in paths]
    failures: dict[str, AssembleError] = {}
    if stale:
        checkouts, failures = sync_each(workspace, stale, lambda dep, step: note(f"{dep}: {step}"))  # under the lock
        paths.update({name: result.path for name, result in checkouts.items()})
    plans = []
    for dep in deps:
        if dep.name in failures:  # keep going: the others are still planned
            plans.append(DepPlan(dep.name, dep.build.backend, workspace.fork_path(dep), dep.torch_target,
                                 error=failures[dep.name]))
        else:
            plans.append(plan_dep(workspace, dep, paths[dep.name]))
    return BuildPlan(plans)


def plan_dep(workspace: Workspace, dep: Dependency, checkout: Path) -> DepPlan:
    """The plan of one dependency at ``checkout``; a problem is the plan's ``error``, not raised."""
    from assembler.builder import units as unit_resolver

    bundle = workspace.manifest.bundle
    plan = DepPlan(dep.name, dep.build.backend, checkout, dep.torch_target,
                   defines=list(backends.stable_defines(dep, bundle.python_abi)), profile=dep.profile)
    plan.error = recipe.missing_recipe(workspace.manifest.path, dep)
    if plan.error is not None:
        return plan
    backend = backends.for_dep(dep)
    try:
        plan.archs = list(dep_archs(dep, bundle.cuda_archs, backend.uses_cuda(dep.build)))
        compdb = unit_resolver.compile_commands_path(workspace.state_dir, dep.name)
        if not backend.from_extensions and not dep.build.sources and not compdb.is_file():
            links.refuse_escaping(workspace.root, dep.name, checkout)  # translation_units does it for the others
            plan.note = ("the recipe names no sources and no build recorded compile commands yet: its "
                         f"{dep.build.backend} build decides (add sources = [...] to plan them)")
            return plan
        found = unit_resolver.translation_units(workspace, dep, checkout)
    except AssembleError as error:
        plan.error = error
        return plan
    plan.units = []
    for unit in found:
        archs = plan.archs if unit.language == CUDA else []
        item = unit.as_dict()
        item["archs"] = archs
        item["compiler"] = "nvcc" if unit.language == CUDA else cxx_name()
        plan.units.append(item)
        plan.arch_compilations += max(1, len(archs))
    plan.jobs = len(found) + len(backend.extension_modules(dep))  # a stub compile per module
    return plan


def render(plan: BuildPlan, print_line: Callable[[str], None]) -> None:
    """The plan as text: a line per dependency, then one per unit."""
    for item in plan.deps:
        archs = " ".join(item.archs) or "-"
        if item.error is not None:
            print_line(f"{item.dep} ({item.backend}): ERROR {item.error.message}")
            continue
        if item.units is None:
            print_line(f"{item.dep} ({item.backend}, archs {archs}): units unknown: {item.note}")
            continue
        print_line(f"{item.dep} ({item.backend}, torch-target {item.torch_target}, archs {archs}): "
                   f"{_count(len(item.units), 'unit')}, {_count(item.arch_compilations, 'unit x arch compilation')}, "
                   f"{_count(item.jobs, 'compile job')}")
        for unit in item.units:
            target = f" x {' '.join(unit['archs'])}" if unit["archs"] else ""
            print_line(f"  {unit['compiler']:<5} {unit['source']}{target}")


def _count(number: int, what: str) -> str:
    return f"{number} {what}{'' if number == 1 else 's'}"
