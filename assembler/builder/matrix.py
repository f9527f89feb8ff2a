"""`assemble plan --matrix`: a release fanned out over CI runners, as a GitHub Actions
``strategy.matrix`` document (``{"include": [...]}``): one entry per dependency with its artifact
key, whether the local or the shared store already holds it, and an estimated cost. With
``--shards N`` a dependency's compile jobs are also split over N shard jobs (``builder.shards``)
that run before the job that builds it whole (``sharded_document`` for GitHub Actions,
``buildkite_pipeline`` for Buildkite).

One entry per dependency, not per dependency x arch group: an artifact is one module per
extension whose fatbin holds every architecture, and its key covers them all, so a split would
need a device-link merge of fatbins that no backend does. A job builds one dependency's archs
in parallel on its own cores.

The cost is seconds of one compiler core, from the build plan (``builder.planner``: translation
units, and archs per CUDA unit) times per-unit costs measured on the example
(``benchmarks/release_sim.py``: a C++ unit; a CUDA unit and each arch it compiles for). It orders the
matrix (longest first, so the slowest job starts first) and says what a cached entry saves; it is
an estimate, since kernels differ far more than units do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assembler.builder import backends, builder
from assembler.builder.artifact_keys import ArtifactStore
from assembler.builder.planner import DepPlan, plan_build
from assembler.builder.request import BuildContext
from assembler.git.state import series_digest
from assembler.manifest.model import CUDA, CXX
from assembler.store import SharedStore, StoreUnavailable, open_store
from assembler.workspace import Workspace

# Compile seconds on one core, measured on the example by benchmarks/release_sim.py (docs/ci.md):
# a C++ unit including the Stable ABI headers; a CUDA unit, plus each architecture it compiles for.
UNIT_SECONDS = {CXX: 2.8, CUDA: 7.9, "cuda_arch": 4.1}
UNKNOWN_UNITS = 4  # a recipe whose units are not known before its first build


@dataclass(frozen=True)
class MatrixEntry:
    dep: str
    key: str
    backend: str
    archs: tuple[str, ...]
    cxx_units: int
    cuda_units: int
    cached: bool  # the local store has the key
    in_store: bool | None  # the shared store ([cache] artifacts) has it; None: it could not be asked
    units_known: bool = True
    profile: str | None = None  # the build profile the key is of (None: the full build)

    @property
    def cost(self) -> float:
        """Estimated compile seconds on one core (0 when a store already has the artifact)."""
        return 0.0 if self.cached or self.in_store else self.compile_seconds

    @property
    def compile_seconds(self) -> float:
        return self.cxx_units * UNIT_SECONDS[CXX] + self.cuda_units * (
            UNIT_SECONDS[CUDA] + max(1, len(self.archs)) * UNIT_SECONDS["cuda_arch"])

    def to_json(self) -> dict[str, Any]:
        return {
            "dep": self.dep, "key": self.key, "backend": self.backend, "archs": " ".join(self.archs),
            "units": self.cxx_units + self.cuda_units, "cuda_units": self.cuda_units,
            "arch_compilations": self.cxx_units + self.cuda_units * max(1, len(self.archs)),
            "cached": self.cached, "in_store": self.in_store, "units_known": self.units_known,
            "cost": round(self.cost, 1), "compile_seconds": round(self.compile_seconds, 1), "profile": self.profile,
        }


def entry_for(plan: DepPlan, key: str, cached: bool, in_store: bool | None) -> MatrixEntry:
    units = plan.units
    if units is None:
        return MatrixEntry(plan.dep, key, plan.backend, tuple(plan.archs), UNKNOWN_UNITS, 0, cached, in_store,
                           units_known=False,
                           profile=plan.profile)
    cuda = sum(1 for unit in units if unit["language"] == CUDA)
    stubs = plan.jobs - len(units)  # the helper's generated PyInit stubs are C++ units too
    return MatrixEntry(plan.dep, key, plan.backend, tuple(plan.archs), len(units) - cuda + stubs, cuda, cached,
                       in_store,
                       profile=plan.profile)


@dataclass(frozen=True)
class ShardEntry:
    """One shard job: ``assemble build --only DEP --shard K/N`` (``builder.shards``)."""

    dep: str
    key: str
    index: int
    count: int
    units: tuple[str, ...]
    cost: float
    split: str  # builder.shards.split_digest: the build prints the same when it splits the same

    @property
    def id(self) -> str:
        return shard_id(self.dep, self.index, self.count)

    def to_json(self) -> dict[str, Any]:
        return {"dep": self.dep, "key": self.key, "job": "shard", "id": self.id, "shard": f"{self.index}/{self.count}",
                "units": len(self.units), "cost": round(self.cost, 1), "split": self.split}


def shard_id(dep: str, index: int, count: int) -> str:
    return f"{dep}-shard-{index}-of-{count}"


def shard_count(runners: int, cost: float, largest: float, jobs: int) -> int:
    """How many of ``runners`` shards a dependency gets: its share by cost against the largest
    dependency's (which gets all of them), never more than its compile jobs. A dependency of
    one shard is built whole by its final job: a shard job of its own would only add a runner's
    fixed costs (checkout, configure) in front of it."""
    if largest <= 0:
        return 1
    return max(1, min(runners, jobs, math.ceil(runners * cost / largest - 1e-9)))


def plan_shards(workspace: Workspace, plans: dict[str, DepPlan], entries: list[MatrixEntry],
                count: int) -> list[ShardEntry]:
    """Each dependency still to compile whose units are known, split over up to ``count`` shards
    (``shard_count``)."""
    from assembler.builder import shards

    out = []
    largest = max((entry.cost for entry in entries), default=0.0)
    for entry in entries:
        plan = plans[entry.dep]
        if entry.cost == 0 or plan.units is None:
            continue
        dep = workspace.manifest.deps[entry.dep]
        modules = backends.for_dep(dep).extension_modules(dep)
        jobs = shards.compile_jobs(plan, modules, shards.unit_times(workspace.state_dir, entry.dep))
        mine = shard_count(count, entry.cost, largest, len(jobs))
        if mine < 2:
            continue
        split = shards.split(jobs, mine)  # build --shard k/N splits with the same N
        digest = shards.split_digest(split)
        for index, share in enumerate(split, 1):
            if share:
                out.append(ShardEntry(entry.dep, entry.key, index, mine, tuple(job.unit for job in share),
                                      sum(job.cost for job in share), digest))
    return sorted(out, key=lambda shard: (-shard.cost, shard.id))


def plan_matrix(workspace: Workspace, cuda: str, torch: str | None = None, only: tuple[str, ...] = (),
                note: Callable[[str], None] = lambda _: None, shards: int = 0,
                profile: str | None = None) -> tuple[list[MatrixEntry], list[ShardEntry]]:
    """Check out, resolve the toolchain (the key depends on it), then one entry per dependency,
    most expensive first, and with ``shards`` its shard jobs; on ``profile`` (a PR's reduced
    build, Manifest.with_profile) the keys are the profile's. Raises the plan's error when a
    dependency cannot be planned."""
    full = workspace.manifest
    workspace.manifest = full.with_profile(profile)
    try:
        return _plan_matrix(workspace, cuda, torch, only, note, shards)
    finally:
        workspace.manifest = full


def _plan_matrix(workspace: Workspace, cuda: str, torch: str | None, only: tuple[str, ...], note: Callable[[str], None],
                 shards: int) -> tuple[list[MatrixEntry], list[ShardEntry]]:
    from assembler.builder.evidence import default_artifacts
    from assembler.builder.pipeline import BuildOptions, resolve_toolchain

    plan = plan_build(workspace, only, note)  # on the profile workspace.manifest already has
    if plan.error is not None:
        raise plan.error
    manifest = workspace.manifest
    toolchain = resolve_toolchain(workspace, BuildOptions(cuda=cuda, torch=torch), note)
    ctx = BuildContext(state_dir=workspace.state_dir, artifacts=default_artifacts(workspace).resolve(),
                       store=ArtifactStore(),
                       toolchain=toolchain, bundle=manifest.bundle)
    shared: SharedStore | None = open_store(manifest.cache.artifacts, manifest.cache.s3_endpoint)
    entries = []
    for item in plan.deps:
        dep = manifest.deps[item.dep]
        assert item.checkout is not None
        request = builder.prepare(ctx, dep, Path(item.checkout), series_digest(dep))
        cached = ctx.store.lookup(dep.name, request.key) is not None
        in_store: bool | None = False
        if shared is not None:
            try:
                in_store = shared.has(dep.name, request.key)
            except StoreUnavailable as unreachable:
                note(f"{dep.name}: the shared artifact store could not be asked ({unreachable}); planned as not in it")
                in_store = None
        entries.append(entry_for(item, request.key, cached, in_store))
    entries.sort(key=lambda entry: (-entry.cost, entry.dep))
    split = plan_shards(workspace, {item.dep: item for item in plan.deps}, entries, shards) if shards > 0 else []
    return entries, split


def matrix_document(entries: list[MatrixEntry]) -> dict[str, Any]:
    """GitHub Actions ``strategy.matrix``: ``{"include": [{"dep": ..., ...}, ...]}``."""
    return {"include": [entry.to_json() for entry in entries]}


def final_entries(entries: list[MatrixEntry], split: list[ShardEntry]) -> list[dict[str, Any]]:
    """The jobs that build each dependency whole: after its shards (``needs``), every compile a hit."""
    out = []
    for entry in entries:
        needs = [shard.id for shard in split if shard.dep == entry.dep]
        out.append({**entry.to_json(), "job": "final" if needs else "build", "id": f"{entry.dep}-final",
                    "needs": needs})
    return out


def sharded_document(entries: list[MatrixEntry], split: list[ShardEntry]) -> dict[str, Any]:
    """With --shards: two GitHub Actions matrices, ``shards`` (each ``build --shard``) and
    ``final`` (each dependency built whole, in a job that ``needs:`` the shards job), and how
    many shard entries there are (an empty matrix is an error in GitHub Actions: skip the job)."""
    return {"shard_count": len(split), "shards": {"include": [shard.to_json() for shard in split]},
            "final": {"include": final_entries(entries, split)}}


def buildkite_pipeline(entries: list[MatrixEntry], split: list[ShardEntry], cuda: str,
                       profile: str | None = None) -> dict[str, Any]:
    """A Buildkite pipeline (``buildkite-agent pipeline upload``): a step per shard, a final step
    per dependency that ``depends_on`` exactly its shards, then the merge that depends on all;
    every build on ``profile`` when given."""
    on = f" --profile {profile}" if profile else ""
    steps: list[dict[str, Any]] = []
    for shard in split:
        steps.append({"label": f"{shard.dep} shard {shard.index}/{shard.count}", "key": shard.id,
                      "command": f"assemble build --cuda {cuda}{on} --only {shard.dep} --shard "
                                 f"{shard.index}/{shard.count} --json"})
    finals = final_entries(entries, split)
    for final in finals:
        steps.append({"label": f"{final['dep']} ({final['job']})", "key": final["id"], "depends_on": final["needs"],
                      "command": f"assemble build --cuda {cuda}{on} --only {final['dep']} --json"})
    steps.append({"label": "merge", "key": "merge", "depends_on": [final["id"] for final in finals],
                  "command": f"assemble build --cuda {cuda}{on} --json"})
    return {"steps": steps}
