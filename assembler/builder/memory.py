"""How many compiler processes a build runs at once (``--jobs auto``, the default): the smaller
of the CPUs and the memory available over what one compile job needs.

What a job needs is the peak resident set of one compile of that dependency, measured in its
last build that compiled (``peak_rss`` below): the largest process of the backend's own tree
(``os.wait4`` of each command: the kernel's maximum over the process and every descendant it
reaped, so nvcc's cicc and ptxas, or cc1plus, are in it), and, with the compiler cache on, the
largest compiler the sccache server ran (its children are not ours: their own high-water marks,
``VmHWM``, read from /proc while they run). Without a measurement, a stated default: 5 GiB per
nvcc job (one FlashAttention nvcc takes about that; out-of-memory with ``MAX_JOBS`` is one of its
most reported build problems), 1.5 GiB per g++ job. The measurement lives in the user's cache
(``builder.evidence.workspace_records``), never the workspace, where a committed file could claim
a small figure and push a runner into the OOM killer.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.builder.evidence import workspace_records

GIB = 1 << 30
# Memory one compile job is assumed to need until a build of the dependency measured it.
DEFAULT_PER_JOB = {"nvcc": 5 * GIB, "g++": 3 * GIB // 2}
RECORD = "compile-memory.json"  # in workspace_records: dep -> {"peak_rss": bytes}
SAMPLE_S = 0.5  # how often the compiler cache's compilers are looked at (VmHWM only grows)
HEADROOM = 0.9  # of MemAvailable: the rest stays for the build's other processes and the page cache


def available_memory() -> int:
    """MemAvailable (the kernel's estimate of what can be used without swapping), else physical memory."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def recorded_peaks(workspace_root: Path) -> dict[str, int]:
    """dep -> the peak RSS of one compile job measured in its last build that compiled ({} when none)."""
    try:
        data = json.loads((workspace_records(workspace_root) / RECORD).read_text())
        return {str(dep): int(item["peak_rss"]) for dep, item in data.items() if int(item["peak_rss"]) > 0}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def record_peaks(workspace_root: Path, peaks: Mapping[str, int]) -> None:
    """Keep the figures of the dependencies that compiled now (best effort: a read-only cache keeps none)."""
    if not peaks:
        return
    from assembler.fsutil import atomic_write

    path = workspace_records(workspace_root, create=True) / RECORD
    data = {dep: {"peak_rss": peak} for dep, peak in recorded_peaks(workspace_root).items()}
    data.update({dep: {"peak_rss": int(peak)} for dep, peak in peaks.items() if peak > 0})
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True)
class PerJob:
    """What one compile job of a dependency is budgeted."""

    bytes: int
    source: str  # "measured" (its last build), "default nvcc", "default g++"

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "gib": round(self.bytes / GIB, 2), "source": self.source}


@dataclass(frozen=True)
class JobsChoice:
    """``--jobs``: what was asked, what was chosen and why (the build's first lines, its JSON)."""

    jobs: int
    requested: str  # "auto" or the number given
    cpus: int
    memory_available: int
    per_job: dict[str, PerJob] = field(default_factory=dict)  # the dependencies to compile
    limited_by: str = "cpus"  # "cpus", "memory" or "requested"

    @property
    def reason(self) -> str:
        if self.requested != "auto":
            return f"--jobs {self.requested}"
        if not self.per_job:
            return f"{self.cpus} CPUs; nothing to compile"
        name, worst = max(self.per_job.items(), key=lambda item: (item[1].bytes, item[0]))
        fits = int(self.memory_available * HEADROOM) // worst.bytes
        memory = (f"{self.memory_available / GIB:.1f} GiB available fits {fits} job(s) of "
                  f"{worst.bytes / GIB:.2f} GiB ({name}: {worst.source})")
        return f"{self.cpus} CPUs, {memory}: limited by {self.limited_by}"

    def to_json(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "requested": self.requested, "cpus": self.cpus,
                "memory_available": self.memory_available, "limited_by": self.limited_by, "reason": self.reason,
                "per_job": {dep: item.to_json() for dep, item in sorted(self.per_job.items())}}


def per_job(dep: str, uses_cuda: bool, peaks: Mapping[str, int]) -> PerJob:
    """One compile job of ``dep``: its measured peak, else the default of its compiler."""
    if dep in peaks:
        return PerJob(peaks[dep], "measured")
    compiler = "nvcc" if uses_cuda else "g++"
    return PerJob(DEFAULT_PER_JOB[compiler], f"default {compiler}")


def choose_jobs(requested: int, deps: Iterable[tuple[str, bool]], peaks: Mapping[str, int], cpus: int,
                memory_available: int) -> JobsChoice:
    """``requested`` (0: auto) compiler processes in all, for ``deps`` (name, uses CUDA) to compile:
    auto is the smaller of ``cpus`` and what the available memory holds of the hungriest
    dependency's jobs, at least 1 (a job larger than the memory still runs, alone)."""
    budgets = {name: per_job(name, cuda, peaks) for name, cuda in deps}
    if requested > 0:
        return JobsChoice(requested, str(requested), cpus, memory_available, budgets, "requested")
    if not budgets:
        return JobsChoice(cpus, "auto", cpus, memory_available, budgets, "cpus")
    largest = max(item.bytes for item in budgets.values())
    fits = max(1, int(memory_available * HEADROOM) // largest)
    jobs = min(cpus, fits)
    return JobsChoice(jobs, "auto", cpus, memory_available, budgets, "memory" if fits < cpus else "cpus")


class ServerSampler:
    """The largest ``VmHWM`` of the processes below ``roots`` (the compiler cache's server, whose
    compilers are its children, not ours), read every SAMPLE_S seconds while a build runs."""

    def __init__(self, roots: Iterable[int]) -> None:
        self.roots = frozenset(roots)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="assemble-rss", daemon=True)

    def __enter__(self) -> ServerSampler:
        if self.roots:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.roots:
            self._stop.set()
            self._thread.join()
            self.sample()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        parents: dict[int, int] = {}
        marks: dict[int, int] = {}
        for pid, ppid, hwm in _processes():
            parents[pid], marks[pid] = ppid, hwm
        for pid, hwm in marks.items():
            if pid in self.roots:
                continue
            ancestor, seen = parents.get(pid, 0), 0
            while ancestor > 1 and ancestor not in self.roots and seen < 64:
                ancestor, seen = parents.get(ancestor, 0), seen + 1
            if ancestor in self.roots:
                self.peak = max(self.peak, hwm)


def _processes() -> Iterator[tuple[int, int, int]]:
    """(pid, parent pid, VmHWM bytes) of every process /proc shows; those that end meanwhile are skipped."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as status:
                text = status.read()
        except OSError:
            continue
        ppid = hwm = 0
        for line in text.splitlines():
            if line.startswith("PPid:"):
                ppid = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
        yield int(entry), ppid, hwm
