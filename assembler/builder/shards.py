"""One dependency's compile jobs split over N runners (`plan --matrix --shards N`, `build --shard k/N`).

A job is one compiler process of the build plan (``builder.planner``): a translation unit of the
checkout, or one of the helper's generated PyInit stubs. A CUDA unit is one job with all of its
archs: one nvcc process compiles them, and the host object it writes embeds every arch's code,
so its archs cannot come from different runners and still hit as one entry in the final build.

Each job has a cost: the seconds its last compile took in this workspace where known (the
launcher records each compile, ``toolchain/launch.py``; the longest seen is kept in
``.assemble/unit-times/<dep>.json``), else the cost model of ``builder.matrix`` (per language
and arch) scaled by the source's size against the dependency's mean. Jobs go longest first to
the least loaded shard (LPT), ties broken by name, so the split is the same wherever the same
costs are known: a fresh CI runner knows none and splits by size, as the plan job did. ``split``
is a digest of the assignment that plan and build both report, so a disagreement shows.

A shard compiles only its jobs through the shared compiler cache and links nothing; the final
job is an ordinary build of the dependency, whose compiles are then all hits.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from assembler import jsonfile
from assembler.errors import InputError
from assembler.fsutil import atomic_write, read_regular, sha256
from assembler.manifest.model import CUDA, CXX
from assembler.toolchain.launch import STUB_PREFIX


class PlannedUnits(Protocol):
    """What a split reads of a dependency's plan (``planner.DepPlan``; a Protocol, so this
    module, which ``builder`` imports, does not point back up at the planner)."""

    dep: str
    checkout: Path | None
    units: list[dict[str, Any]] | None

TIMES_DIR = "unit-times"
TIMES_LIMIT = 64 << 20  # bytes of one unit-times file read at most (a unit is a line of ~100)
SHARD_RE = re.compile(r"^([1-9][0-9]{0,3})/([1-9][0-9]{0,3})$")
# Compile seconds on one core (benchmarks/release_sim.py, docs/ci.md): a C++ unit; a CUDA unit,
# plus each architecture it compiles for; a generated PyInit stub (Python.h only).
UNIT_SECONDS = {CXX: 2.8, CUDA: 7.9, "cuda_arch": 4.1, "stub": 0.5}
SIZE_FACTOR = (0.25, 4.0)  # how far a unit's size may move its estimate from its language's


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``k/N`` with 1 <= k <= N; anything else is an InputError (exit 2) saying the form."""
    match = SHARD_RE.match(text.strip())
    if match is None or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise InputError(f"--shard {text[:40]!r}: expected k/N with 1 <= k <= N, e.g. 2/4",
                         hint="take k and N from the shard entries of `assemble plan --matrix --shards N`")
    return Shard(int(match.group(1)), int(match.group(2)))


@dataclass(frozen=True)
class CompileJob:
    unit: str  # the source relative to the checkout, or a stub's file name
    language: str
    archs: tuple[str, ...]
    cost: float  # estimated seconds on one core
    measured: bool  # the cost is a compile time this workspace measured

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "language": self.language, "archs": list(self.archs),
                "cost": round(self.cost, 2), "measured": self.measured}


def model_seconds(language: str, archs: int) -> float:
    if language == CUDA:
        return UNIT_SECONDS[CUDA] + max(1, archs) * UNIT_SECONDS["cuda_arch"]
    return UNIT_SECONDS[CXX]


def compile_jobs(plan: PlannedUnits, extensions: tuple[str, ...], times: dict[str, float]) -> list[CompileJob]:
    """Every compiler process of ``plan``, each with its cost. ``extensions``: the helper's
    extension names (one generated stub each); ``times``: measured seconds per unit."""
    if plan.units is None:
        raise InputError(f"{plan.dep}: its translation units are not known before its first build, so it cannot "
                         "be split",
                         hint=f"add sources = [...] to [deps.{plan.dep}.build], or build it once (`assemble build "
                              f"--only {plan.dep}`)")
    sizes = {}
    for unit in plan.units:
        try:
            sizes[unit["source"]] = (Path(plan.checkout or ".") / unit["source"]).stat().st_size
        except OSError:
            sizes[unit["source"]] = 0
    known = [size for size in sizes.values() if size > 0]
    mean = sum(known) / len(known) if known else 0
    jobs = []
    for unit in plan.units:
        source, language, archs = unit["source"], unit["language"], tuple(unit.get("archs") or ())
        if source in times:
            jobs.append(CompileJob(source, language, archs, times[source], True))
            continue
        factor = min(max(sizes[source] / mean, SIZE_FACTOR[0]), SIZE_FACTOR[1]) if mean and sizes[source] else 1.0
        jobs.append(CompileJob(source, language, archs, model_seconds(language, len(archs)) * factor, False))
    for name in extensions:
        stub = f"{STUB_PREFIX}{name}.cpp"
        jobs.append(CompileJob(stub, CXX, (), times.get(stub, UNIT_SECONDS["stub"]), stub in times))
    return jobs


def split(jobs: list[CompileJob], count: int) -> list[list[CompileJob]]:
    """``jobs`` over ``count`` shards, longest first onto the least loaded (ties: lowest shard),
    so the largest shard is within one job of the mean. Deterministic for the same costs."""
    shards: list[list[CompileJob]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for job in sorted(jobs, key=lambda job: (-job.cost, job.unit)):
        lightest = min(range(count), key=lambda index: (loads[index], index))
        shards[lightest].append(job)
        loads[lightest] += job.cost
    return shards


def split_digest(shards: list[list[CompileJob]]) -> str:
    """Which unit went to which shard, as 12 hex digits: plan and build print it."""
    text = json.dumps([sorted(job.unit for job in shard) for shard in shards])
    return sha256(text.encode()).hexdigest()[:12]


def times_path(state_dir: Path, dep: str) -> Path:
    return state_dir / TIMES_DIR / f"{dep}.json"


def unit_times(state_dir: Path, dep: str) -> dict[str, float]:
    """The measured compile seconds per unit of ``dep`` in this workspace ({} when none or unreadable)."""
    try:  # never through a link (read_regular: O_NOFOLLOW); UnsafeFile is a ValueError
        data = jsonfile.loads(read_regular(times_path(state_dir, dep), TIMES_LIMIT), times_path(state_dir, dep))
        return {str(unit): float(seconds) for unit, seconds in data.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def record_unit_times(state_dir: Path, dep: str, raw: Path) -> None:
    """Fold the launcher's lines in ``raw`` (one per compile) into the unit times, keeping each
    unit's longest (a compiler-cache hit is not what compiling it costs), then remove ``raw``."""
    try:
        lines = raw.read_text().splitlines()
    except OSError:
        return
    times = unit_times(state_dir, dep)
    for line in lines:
        try:
            item = jsonfile.loads(line, raw)
            unit, seconds = str(item["unit"]), float(item["seconds"])
        except (ValueError, KeyError, TypeError):
            continue
        times[unit] = max(seconds, times.get(unit, 0.0))
    atomic_write(times_path(state_dir, dep), json.dumps(dict(sorted(times.items())), indent=1) + "\n",
                 inside=state_dir.parent)  # the state directory's parent: the workspace
    raw.unlink(missing_ok=True)
