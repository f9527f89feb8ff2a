"""Build independent dependencies side by side within ``--jobs`` compiler processes and a
memory budget, with one progress line per dependency.

Each running build is granted some of the job slots (its CMAKE_BUILD_PARALLEL_LEVEL) and the
memory those compilers are expected to need (``builder.memory``: the peak RSS per compile
measured in the dependency's last build, else 5 GiB per nvcc job, 1.5 GiB per g++ job); a build
waits until at least one slot and its memory are free, so two CUDA builds never push a small
machine into swap together.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from assembler.builder import builder, memory
from assembler.builder.builder import Outcome
from assembler.builder.outcome import Event
from assembler.builder.progress import compile_command, ninja_step
from assembler.builder.request import BuildContext, BuildRequest
from assembler.builder.units import GLOB_CHARS
from assembler.manifest.model import CUDA, CXX

GIB = memory.GIB
# Memory budgeted per compiler process when none was measured (builder.memory.DEFAULT_PER_JOB).
MEMORY_PER_JOB = {CUDA: memory.DEFAULT_PER_JOB["nvcc"], CXX: memory.DEFAULT_PER_JOB["g++"]}


def default_memory_budget() -> int:
    """What the compilers may use together: the share of MemAvailable (the kernel's own
    estimate) that ``--jobs auto`` sizes by, so the pool never refuses the jobs it chose."""
    return int(memory.available_memory() * memory.HEADROOM)


class ResourcePool:
    """Job slots and bytes of memory, handed out to builds and returned when they finish."""

    def __init__(self, jobs: int, memory: int) -> None:
        if jobs < 1:
            raise ValueError(f"{jobs} job slots: a build could never start")
        self.free_jobs = jobs
        self.free_memory = memory
        self.running = 0
        self._changed = threading.Condition()

    def acquire(self, wanted: int, per_job: int) -> int:
        """Block until the build can run with at least one job; returns the jobs granted. A
        build whose single job exceeds the whole budget still runs, alone."""
        with self._changed:
            while True:
                affordable = min(self.free_jobs, self.free_memory // per_job)
                if affordable >= 1 or (self.running == 0 and self.free_jobs >= 1):
                    granted = max(1, min(wanted, affordable))
                    self.free_jobs -= granted
                    self.free_memory -= granted * per_job
                    self.running += 1
                    return granted
                self._changed.wait()

    def release(self, granted: int, per_job: int) -> None:
        with self._changed:
            self.free_jobs += granted
            self.free_memory += granted * per_job
            self.running -= 1
            self._changed.notify_all()


def compile_units(request: BuildRequest) -> int:
    """How many compiler processes the build can use at once: the helper's sources plus its
    generated stubs, the sources a cmake/setuptools recipe lists (4 when it lists none, or globs)."""
    recipe = request.dep.build
    if recipe.extensions:
        return max(1, sum(len(ext.sources) + 1 for ext in recipe.extensions))
    if recipe.sources and all(GLOB_CHARS.isdisjoint(source) for source in recipe.sources):
        return len(recipe.sources)
    return 4


def run_builds(
    ctx: BuildContext,
    requests: list[BuildRequest],
    jobs: int,
    budget: int,
    on_event: Event = lambda *_: None,
    per_job: Mapping[str, int] | None = None,
) -> list[Outcome]:
    """Build every request (none is skipped when another fails) within ``jobs`` compiler
    processes and ``budget`` bytes, each job of a dependency costing ``per_job[dep]`` (else the
    default of its compiler). ``on_event(dep, phase, done, total, unit)`` reports progress: phase
    is queued, configuring, compiling (a unit done: done of total, total None when not known),
    installing, built, failed."""
    pool = ResourcePool(jobs, budget)
    budgets = dict(per_job or {})

    def one(request: BuildRequest) -> Outcome:
        name = request.dep.name
        per_job = budgets.get(name) or MEMORY_PER_JOB[CUDA if request.cuda else CXX]
        on_event(name, "queued", None, None)
        granted = pool.acquire(min(jobs, compile_units(request)), per_job)
        try:
            on_event(name, "configuring", None, None)
            outcome = builder.build(ctx, request, granted, LineEvents(name, on_event))
        finally:
            pool.release(granted, per_job)
        on_event(name, outcome.status, None, None)
        return outcome

    if not requests:
        return []
    with ThreadPoolExecutor(max_workers=len(requests), thread_name_prefix="assemble-build") as executor:
        return list(executor.map(one, requests))


class LineEvents:
    """A build's output lines as progress events: a ninja ``[k/N]`` step or a compiler command
    (setuptools without ninja, counted here) is ``compiling`` with the unit it made; the wheel
    install of scikit-build-core is ``installing``."""

    def __init__(self, name: str, on_event: Event) -> None:
        self.name, self.on_event = name, on_event
        self.commands = 0

    def __call__(self, line: str) -> None:
        step = ninja_step(line)
        if step is not None:
            self.on_event(self.name, "compiling", step.done, step.total, step.unit)
        elif line.startswith("*** Installing"):
            self.on_event(self.name, "installing", None, None)
        else:
            source = compile_command(line)
            if source is not None:
                self.commands += 1
                self.on_event(self.name, "compiling", self.commands, None, source)
