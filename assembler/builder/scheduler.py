"""Build independent dependencies side by side within ``--jobs`` compiler processes and a
memory budget, with one progress line per dependency.

Each running build is granted some of the job slots (its CMAKE_BUILD_PARALLEL_LEVEL) and the
memory those compilers are expected to need; a build waits until at least one slot and its
memory are free, so two CUDA builds never push a small machine into swap together.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from assembler.builder import builder
from assembler.builder.builder import Outcome
from assembler.builder.outcome import Event
from assembler.builder.progress import compile_command, ninja_step
from assembler.builder.request import BuildContext, BuildRequest
from assembler.builder.units import GLOB_CHARS
from assembler.manifest.model import CUDA, CXX

GIB = 1 << 30
# Memory budgeted per compiler process. The example's sources peak at 0.16 GiB (g++) and 0.43 GiB
# (nvcc, sm_90a); template-heavy kernels (CUTLASS, CUB) take several GiB under nvcc, so CUDA
# jobs are budgeted higher. --memory-gb caps the total.
MEMORY_PER_JOB = {CXX: 1 * GIB, CUDA: 2 * GIB}


def default_memory_budget() -> int:
    """80 % of the memory available now (MemAvailable), the kernel's own estimate."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 * 8 // 10
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.8)


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
    memory: int,
    on_event: Event = lambda *_: None,
) -> list[Outcome]:
    """Build every request (none is skipped when another fails). ``on_event(dep, phase, done,
    total, unit)`` reports progress: phase is queued, configuring, compiling (a unit done: done of
    total, total None when not known), installing, built, failed."""
    pool = ResourcePool(jobs, memory)

    def one(request: BuildRequest) -> Outcome:
        name = request.dep.name
        per_job = MEMORY_PER_JOB[CUDA if request.cuda else CXX]
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
