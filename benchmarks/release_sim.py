"""(c) A release of the seven real dependencies (root deps.toml) over 1, 4 and 16 CI runners,
cold and with a warm cache, simulated from compile costs measured here.

Method (docs/ci.md has the write-up):

1. Measure, on the example (built once in a fresh workspace), the compile commands its build
   recorded: a C++ unit (vecadd's add_scaled.cpp, torch/csrc/stable headers) and a CUDA unit
   (scalekit's scale.cu) for one and for two architectures; the difference is the cost of one
   more arch. The same commands through a warm sccache give the cost of a hit. The per-job
   overhead (checkout, toolchain, configure, link, pack) is the example's vecadd job minus its
   compiles; fetching a stored artifact and merging are timed as well.
2. Shapes: per dependency, its translation units (C++ or CUDA) and archs, from ``--plan
   PLAN.json`` (`assemble build --plan --json` on a workspace with the checkouts) or else from
   the recipes in deps.toml, where a glob counts as GLOB_MATCHES files (an estimate, printed).
3. Simulate: a job runs its units longest first on the runner's cores (one nvcc process per
   CUDA unit compiles its archs one after the other); jobs go to runners longest first, each to
   the runner free first, as a matrix does; then one merge job. One runner is one
   `assemble build` (all dependencies' units share its cores). Warm sccache: every unit is a
   hit (a release whose keys changed but whose sources did not, e.g. a new pin of an unchanged
   dependency or a fresh runner). Warm store: every artifact is fetched.

4. Sharded (`plan --matrix --shards N`, issue 23): each dependency's units are split over up to N
   shard jobs by ``builder.shards.split`` (the same LPT split the command makes; a dependency gets
   a share of N by its cost against the largest, ``builder.matrix.shard_count``), each shard job
   compiles its units on its runner's cores, then the dependency's final job compiles nothing
   new (every unit a hit) and links. Buildkite starts a final job when its own shards are done
   (``depends_on``); GitHub Actions when every shard job is (``needs:`` is per job, and all
   shards are one matrix job), both simulated.

    python benchmarks/release_sim.py [--cores 8] [--plan PLAN.json] [--manifest deps.toml] [--costs FILE]
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assembler.builder import shards  # noqa: E402
from assembler.builder.matrix import shard_count  # noqa: E402
from assembler.builder.shards import CompileJob  # noqa: E402
from assembler.builder.units import compile_commands_path  # noqa: E402
from assembler.cache import cache_root  # noqa: E402
from assembler.toolchain import sccache  # noqa: E402
from assembler.toolchain.cuda import select_cuda  # noqa: E402
from assembler.toolchain.torchenv import ensure_build_env  # noqa: E402
from tests.example import EXAMPLE, make_upstreams  # noqa: E402

CUDA = "13.2"
GLOB_MATCHES = 8  # files a recipe glob is assumed to match when no --plan gives the real count
# Estimates from the naming of the instantiation files (use --plan for the real counts):
# FA2: 8 hdims x 2 dtypes x causal or not, forward and split-KV; FA3 (per hdim and dtype):
# "*packgqa" plain and softcap, "split*" plain and softcap, "paged*" x split x softcap, and the
# mixed-hdim "hdimA_B_dtype*" families.
GLOB_ESTIMATES = (("csrc/flash_attn/src/flash_fwd_*.cu", 64), ("*packgqa_sm90.cu", 2), ("_split*_sm90.cu", 2),
                  ("_paged*_sm90.cu", 4), ("*_sm90.cu", 4))
RUNNERS = (1, 4, 16)
# Counted on the real checkouts at their pins (issue 23: `assemble check`): C++ and CUDA units.
# They replace the glob estimates (flash-attn-3 is 194 units, flash-attn-2 79 over 2 archs).
KNOWN_UNITS = {"flash-attn-3": (2, 192), "flash-attn-2": (3, 76)}


@dataclass(frozen=True)
class Costs:
    cxx: float  # one C++ unit
    cuda_base: float  # one CUDA unit, before its archs (front end, host compile)
    cuda_arch: float  # one more arch of a CUDA unit
    hit: float  # any unit, as a warm sccache hit
    job: float  # per-job overhead: startup, checkout, toolchain, configure, link, pack
    fetch: float  # a job whose artifact is in the store
    merge: float  # the merge job


@dataclass(frozen=True)
class Shape:
    dep: str
    cxx: int
    cuda: int
    archs: int


def timed(command: list[str], cwd: str, env: dict[str, str] | None = None, rounds: int = 3) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def with_output(arguments: list[str], output: Path) -> list[str]:
    out = list(arguments)
    out[out.index("-o") + 1] = str(output)
    return out


def example_workspace(ws: Path, store: Path) -> Path:
    shutil.copytree(EXAMPLE, ws,
                    ignore=shutil.ignore_patterns("forks", "upstreams", ".assemble", "dist", "__pycache__"))
    make_upstreams(ws / "upstreams")
    with (ws / "deps.toml").open("a") as manifest:
        manifest.write(f'\n[cache]\nartifacts = "file://{store}"\n')
    return ws


def assemble(ws: Path, cache: Path, *args: str, env: dict[str, str] | None = None) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws), *args, "--json"],
                          env={**os.environ, "ASSEMBLE_CACHE": str(cache), **(env or {})}, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"assemble {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started, json.loads(done.stdout)


def measure(root: Path) -> Costs:
    cache = root / "cache"
    cache.mkdir()
    for name in ("venvs", "toolchains"):
        (cache / name).symlink_to(cache_root() / name, target_is_directory=True)
    ws = example_workspace(root / "ws", root / "store")
    assemble(ws, cache, "build", "--cuda", CUDA, "--only", "vecadd", "--artifacts", str(root / "out"))
    assemble(ws, cache, "build", "--cuda", CUDA, "--only", "scalekit", "--only", "rowsum", "--artifacts",
             str(root / "out"))
    entries = {Path(e["file"]).name: e for dep in ("vecadd", "scalekit")
               for e in json.loads(compile_commands_path(ws / ".assemble", dep).read_text())}
    cxx, cu = entries["add_scaled.cpp"], entries["scale.cu"]
    out = root / "unit.o"
    cxx_s = timed(with_output(cxx["arguments"], out), cxx["directory"])
    one_arch = with_output(cu["arguments"], out)
    two_archs = list(one_arch)
    at = next(i for i, arg in enumerate(two_archs) if arg.startswith("--generate-code="))
    two_archs.insert(at + 1, "--generate-code=arch=compute_100a,code=[compute_100a,sm_100a]")
    cu1 = timed(one_arch, cu["directory"], rounds=2)
    cu2 = timed(two_archs, cu["directory"], rounds=2)
    per_arch = max(cu2 - cu1, 0.0)
    config = sccache.configure("sccache", None, root / "sccache", (root,), None, environ={})
    with sccache.server(config, "measure") as server:
        assert server is not None and config.binary is not None
        env = {**os.environ, **server.client_environment()}
        launcher = [str(config.binary)]
        timed(launcher + with_output(cxx["arguments"], out), cxx["directory"], env, rounds=1)  # fill
        hit = timed(launcher + with_output(cxx["arguments"], out), cxx["directory"], env)
    # a job's overhead: vecadd again in a fresh build tree, its two units sccache hits (a
    # configure, a link, the packing, the checkout and toolchain look-ups)
    for stale in (ws / ".assemble" / "build", ws / ".assemble" / "artifacts", cache / "artifacts"):
        shutil.rmtree(stale, ignore_errors=True)
    job, _ = assemble(ws, cache, "build", "--cuda", CUDA, "--only", "vecadd", env={"ASSEMBLE_ARTIFACT_STORE": ""})
    job -= 2 * hit
    # a fresh runner whose artifact is in the shared store: what a job costs without compiling
    fresh_cache = root / "fresh-cache"
    fresh_cache.mkdir()
    for name in ("venvs", "toolchains"):
        (fresh_cache / name).symlink_to(cache_root() / name, target_is_directory=True)
    fetch, _ = assemble(example_workspace(root / "fetch", root / "store"), fresh_cache, "build", "--cuda", CUDA,
                        "--only", "vecadd")
    merge, _ = assemble(ws, cache, "merge", str(root / "out"))
    return Costs(cxx=cxx_s, cuda_base=max(cu1 - per_arch, 0.0), cuda_arch=per_arch, hit=hit, job=job, fetch=fetch,
                 merge=merge)


def glob_estimate(source: str) -> int:
    return next((count for suffix, count in GLOB_ESTIMATES if source.endswith(suffix)), GLOB_MATCHES)


def shapes_from_manifest(manifest: Path) -> tuple[list[Shape], list[str]]:
    data = tomllib.loads(manifest.read_text())
    bundle_archs = data["bundle"].get("cuda-archs", [])
    shapes, notes = [], []
    for name, dep in data["deps"].items():
        recipe = dep.get("build", {})
        sources = list(recipe.get("sources", []))
        stubs = 0
        for extension in recipe.get("extensions", []):
            sources += extension["sources"]
            stubs += 1
        cxx = cuda = 0
        for source in sources:
            count = glob_estimate(source) if any(c in source for c in "*?[") else 1
            if count > 1 and name not in KNOWN_UNITS:
                notes.append(f"{name}: {source} counted as {count} files")
            if source.endswith(".cu"):
                cuda += count
            else:
                cxx += count
        if name in KNOWN_UNITS:
            cxx, cuda = KNOWN_UNITS[name]
            notes.append(f"{name}: {cxx} C++ + {cuda} CUDA units as counted on the real checkout")
        archs = recipe.get("cuda-archs", bundle_archs) if cuda else []
        shapes.append(Shape(name, cxx + stubs, cuda, len(archs)))
    return shapes, notes


def shapes_from_plan(plan: Path) -> list[Shape]:
    data = json.loads(plan.read_text())["deps"]  # schema 2: a list of {"name", ...}; 1: a dict by name
    items = [(item["name"], item) for item in data] if isinstance(data, list) else list(data.items())
    shapes = []
    for name, item in items:
        units = item.get("units") or []
        cuda = sum(1 for unit in units if unit["language"] == "cuda")
        shapes.append(Shape(name, item.get("jobs", len(units)) - cuda, cuda, len(item.get("archs", []))))
    return shapes


def unit_times(shape: Shape, costs: Costs, warm: bool) -> list[float]:
    if warm:
        return [costs.hit] * (shape.cxx + shape.cuda)
    return [costs.cxx] * shape.cxx + [costs.cuda_base + shape.archs * costs.cuda_arch] * shape.cuda


def makespan(durations: list[float], slots: int) -> float:
    """Longest first, each to the slot free first."""
    free = [0.0] * max(1, slots)
    for duration in sorted(durations, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + duration)
    return max(free)


def release_time(shapes: list[Shape], costs: Costs, runners: int, cores: int, scenario: str) -> float:
    if scenario == "warm store":
        jobs = [costs.fetch for _ in shapes]
    else:
        warm = scenario == "warm sccache"
        if runners == 1:  # one `assemble build`: every dependency's units share the cores
            units = [t for shape in shapes for t in unit_times(shape, costs, warm)]
            return costs.job + makespan(units, cores) + costs.merge
        jobs = [costs.job + makespan(unit_times(shape, costs, warm), cores) for shape in shapes]
    if runners == 1:
        return sum(jobs) + costs.merge
    return makespan(jobs, runners) + costs.fetch + costs.merge  # the merge job starts and fetches the artifacts


def unit_jobs(shape: Shape, costs: Costs) -> list[CompileJob]:
    """The shape's units as the shard planner sees them, with the measured costs."""
    cuda = costs.cuda_base + shape.archs * costs.cuda_arch
    return ([CompileJob(f"{shape.dep}/c{i}.cpp", "cxx", (), costs.cxx, True) for i in range(shape.cxx)]
            + [CompileJob(f"{shape.dep}/k{i}.cu", "cuda", ("a",) * shape.archs, cuda, True) for i in range(shape.cuda)])


def sharded_release_time(shapes: list[Shape], costs: Costs, runners: int, cores: int, per_dep: bool) -> float:
    """Shard jobs (and the unsharded dependencies' whole jobs) longest first onto the runner free
    first; each sharded dependency's final job (all hits, a link) once its shards are done
    (``per_dep``: Buildkite's depends_on) or once every shard is (GitHub's needs:); then the merge."""
    if runners == 1:
        return release_time(shapes, costs, 1, cores, "cold")
    whole = {shape.dep: costs.job + makespan(unit_times(shape, costs, warm=False), cores) for shape in shapes}
    largest = max(whole.values())
    first_wave: list[tuple[float, str]] = []  # (duration, dep)
    sharded = []
    for shape in shapes:
        jobs = unit_jobs(shape, costs)
        count = shard_count(runners, whole[shape.dep], largest, len(jobs))
        if count < 2:
            first_wave.append((whole[shape.dep], ""))
            continue
        sharded.append(shape)
        for share in shards.split(jobs, count):
            if share:
                first_wave.append((costs.job + makespan([job.cost for job in share], cores), shape.dep))
    free = [0.0] * runners
    ends: dict[str, float] = {}
    for duration, dep in sorted(first_wave, reverse=True):
        start = heapq.heappop(free)
        heapq.heappush(free, start + duration)
        if dep:
            ends[dep] = max(ends.get(dep, 0.0), start + duration)
    all_shards = max(ends.values(), default=0.0)
    finals = sorted(((ends[shape.dep] if per_dep else all_shards, shape) for shape in sharded),
                    key=lambda item: (item[0], item[1].dep))
    done = max(free)
    for ready, shape in finals:
        start = max(heapq.heappop(free), ready)
        end = start + costs.job + makespan(unit_times(shape, costs, warm=True), cores)
        heapq.heappush(free, end)
        done = max(done, end)
    return max(done, max(free)) + costs.fetch + costs.merge


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=8, help="cores per runner (default 8)")
    parser.add_argument("--manifest", type=Path, default=ROOT / "deps.toml")
    parser.add_argument("--plan", type=Path, help="`assemble build --plan --json` output with the exact units")
    parser.add_argument("--costs", type=Path, help="costs JSON from an earlier run (skips measuring)")
    args = parser.parse_args()
    if args.costs:
        costs = Costs(**json.loads(args.costs.read_text()))
    else:
        select_cuda(CUDA)
        ensure_build_env("2.13.0")
        with tempfile.TemporaryDirectory(prefix="assemble-bench-release-") as temporary:
            costs = measure(Path(temporary))
    print("measured costs (s): " + json.dumps({k: round(v, 3) for k, v in costs.__dict__.items()}))
    if not args.costs:
        print("  (rerun the simulation alone with --costs FILE holding that JSON)")
    if args.plan:
        shapes, notes = shapes_from_plan(args.plan), list[str]()
    else:
        shapes, notes = shapes_from_manifest(args.manifest)
    for note in notes:
        print(f"  estimate: {note}")
    for shape in shapes:
        alone = costs.job + makespan(unit_times(shape, costs, warm=False), args.cores)
        print(f"  {shape.dep:<14} {shape.cxx:3d} C++ + {shape.cuda:3d} CUDA units x {shape.archs} arch(s); "
              f"its cold job on {args.cores} cores: {alone:7.1f} s")
    scenarios = ("cold", "cold, sharded (Buildkite)", "cold, sharded (GitHub)", "warm sccache", "warm store")
    print(f"\nrelease wall time (s), {args.cores} cores per runner:")
    print(f"  {'runners':>7}  " + "  ".join(f"{s:>26}" for s in scenarios))
    for runners in RUNNERS:
        row = [release_time(shapes, costs, runners, args.cores, "cold"),
               sharded_release_time(shapes, costs, runners, args.cores, per_dep=True),
               sharded_release_time(shapes, costs, runners, args.cores, per_dep=False),
               release_time(shapes, costs, runners, args.cores, "warm sccache"),
               release_time(shapes, costs, runners, args.cores, "warm store")]
        print(f"  {runners:>7}  " + "  ".join(f"{value:26.1f}" for value in row))


if __name__ == "__main__":
    main()
