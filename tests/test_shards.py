"""One dependency across N runners: `plan --matrix --shards N` splits its compile jobs,
`build --only DEP --shard k/N` compiles one share into the shared compiler cache and links
nothing, and the final build finds every object there. The launcher's path-free arguments and
its shard filter are checked as functions; the real test runs the example's CUDA dependency on
two runners at different paths sharing a real Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from assembler.builder import shards
from assembler.builder.planner import DepPlan
from assembler.errors import InputError
from assembler.toolchain import launch
from tests.build_support import ci_runner
from tests.json_contract import schema_for


def _plan(tmp_path: Path, sizes: dict[str, int], archs: list[str]) -> DepPlan:
    for name, size in sizes.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x" * size)
    plan = DepPlan("kern", "helper", tmp_path, "2.10", archs=archs)
    plan.units = [{"source": name, "language": "cuda" if name.endswith(".cu") else "cxx",
                   "archs": archs if name.endswith(".cu") else []} for name in sizes]
    plan.jobs = len(sizes) + 1
    return plan


def test_shard_argument_is_k_of_n() -> None:
    assert str(shards.parse_shard("2/4")) == "2/4"
    for bad in ("0/4", "5/4", "2", "a/b", "2/4/1", "-1/3"):
        with pytest.raises(InputError, match="expected k/N"):
            shards.parse_shard(bad)


def test_split_is_balanced_deterministic_and_complete(tmp_path: Path) -> None:
    sizes = {f"src/k{i:03d}.cu": 1000 + 37 * (i % 11) for i in range(194)}  # FA3's unit count
    plan = _plan(tmp_path, sizes, ["9.0a"])
    jobs = shards.compile_jobs(plan, ("_C",), {})
    assert len(jobs) == 195 and not any(job.measured for job in jobs)  # 194 units and the helper's stub
    assert any(job.unit == "assembler_pyinit__C.cpp" for job in jobs)
    for count in (1, 4, 16):
        split = shards.split(jobs, count)
        assert sorted(job.unit for share in split for job in share) == sorted(job.unit for job in jobs)  # each once
        loads = [sum(job.cost for job in share) for share in split]
        assert max(loads) - min(loads) <= max(job.cost for job in jobs)  # LPT: within one job
        assert shards.split_digest(split) == shards.split_digest(shards.split(list(reversed(jobs)), count))
    # a bigger source costs more when nothing is measured; a measured time wins over the model
    small, big = (next(job for job in jobs if job.unit == name) for name in ("src/k000.cu", "src/k010.cu"))
    assert big.cost > small.cost
    timed = shards.compile_jobs(plan, ("_C",), {"src/k000.cu": 300.0})
    first = next(job for job in timed if job.unit == "src/k000.cu")
    assert first.measured and first.cost == 300.0
    assert shards.split(timed, 4)[0][0].unit == "src/k000.cu"  # the longest goes first, alone on its shard
    unknown = DepPlan("kern", "cmake", tmp_path, "2.10")
    with pytest.raises(InputError, match="not known before its first build"):
        shards.compile_jobs(unknown, (), {})


def test_unit_times_keep_the_longest_compile(tmp_path: Path) -> None:
    raw = tmp_path / "raw.jsonl"
    raw.write_text('{"unit": "a.cu", "seconds": 20.0}\n{"unit": "b.cpp", "seconds": 2.5}\nnot json\n')
    shards.record_unit_times(tmp_path, "kern", raw)
    raw.write_text('{"unit": "a.cu", "seconds": 0.2}\n')  # a cache hit: not what a.cu costs
    shards.record_unit_times(tmp_path, "kern", raw)
    assert shards.unit_times(tmp_path, "kern") == {"a.cu": 20.0, "b.cpp": 2.5}
    assert not raw.exists()


def test_launcher_spells_paths_below_the_roots_relatively() -> None:
    cwd = "/w/ws/.assemble/build/kern/cmake-1"
    spellings = launch.relative_spellings([("/w/ws", "/w/ws"), ("/c/cache", "/w/ws/.assemble/roots/cache")], cwd)
    assert launch.rewrite("-I/w/ws/forks/kern/csrc", spellings) == "-I../../../../forks/kern/csrc"
    assert launch.rewrite("-Xcompiler=-ffile-prefix-map=/c/cache/venvs/t/torch=torch", spellings) == \
        "-Xcompiler=-ffile-prefix-map=../../../roots/cache/venvs/t/torch=torch"
    assert launch.rewrite("/w/wsx/a.cpp", spellings) == "/w/wsx/a.cpp"  # whole path components only
    assert launch.rewrite("-DDIR=/w/ws/data", spellings) == "-DDIR=/w/ws/data"  # a define keeps its value
    # the same spelling from another workspace at another depth
    other = launch.relative_spellings([("/x/y/z/ws2", "/x/y/z/ws2"), ("/q", "/x/y/z/ws2/.assemble/roots/cache")],
                                      "/x/y/z/ws2/.assemble/build/kern/cmake-1")
    assert launch.rewrite("-I/x/y/z/ws2/forks/kern/csrc", other) == "-I../../../../forks/kern/csrc"


def test_launcher_skips_what_the_shard_does_not_compile(tmp_path: Path) -> None:
    checkout = str(tmp_path / "forks" / "kern")
    mine = {"csrc/a.cu"}
    compile_of = lambda path: ["-c", f"{checkout}/{path}", "-o", "x.o"]  # noqa: E731
    assert not launch.skipped(compile_of("csrc/a.cu"), mine, checkout)
    assert launch.skipped(compile_of("csrc/b.cu"), mine, checkout)
    assert launch.skipped(["-c", "/b/assembler_pyinit__C.cpp", "-o", "s.o"], mine, checkout)  # a stub not ours
    assert not launch.skipped(["-c", "/tmp/probe/CMakeCXXCompilerId.cpp", "-o", "p.o"], mine, checkout)  # no unit
    assert launch.skipped(["-shared", "a.o", "-o", "_C.abi3.so"], mine, checkout)  # a shard links nothing
    assert not launch.skipped(["a.o", "-o", "a.out"], mine, checkout)  # a configure probe's executable links


def test_nvcc_stub_is_used_only_where_no_other_user_can_change_it(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A quoted include looks in the stub's directory first: a stub directory someone else may
    write (planted, as another user of the machine could), or a stub that is a link, means the
    unit compiles from its own path, never through what was planted."""
    monkeypatch.setattr(launch, "STUB_ROOT", str(tmp_path / "units"))
    source = tmp_path / "ws" / "forks" / "kern" / "csrc" / "a.cu"
    source.parent.mkdir(parents=True)
    source.write_text("__global__ void k() {}\n")
    spellings = launch.relative_spellings([(str(tmp_path / "ws"), str(tmp_path / "ws"))], str(tmp_path / "ws" / "b"))
    arguments = ["-c", str(source), "-o", "a.o"]
    stubbed = launch.through_stub("nvcc", arguments, spellings)
    stub = Path(stubbed[stubbed.index("-c") + 1])
    assert stub.name == "unit.cu" and stub.read_text().endswith('#include "a.cu"\n')
    assert launch.through_stub("nvcc", arguments, spellings) == stubbed  # in place: reused

    stub.parent.chmod(0o777)  # writable by others: someone could plant csrc/a.cu's namesake next to it
    (stub.parent / "a.cu").write_text("planted\n")
    assert launch.through_stub("nvcc", arguments, spellings) == arguments
    stub.parent.chmod(0o755)
    stub.unlink()
    stub.symlink_to(tmp_path / "elsewhere.cu")  # a link: not ours to trust
    assert launch.through_stub("nvcc", arguments, spellings) == arguments
    assert not (tmp_path / "elsewhere.cu").exists()  # nothing written through it


def _assemble(ws: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws), *args],
                          env={**os.environ, "ASSEMBLE_CACHE": str(cache)}, capture_output=True, text=True, check=False)


def _built(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr[-3000:]
    [dep] = json.loads(done.stdout)["deps"]
    assert isinstance(dep, dict)
    return dep


@pytest.mark.integration
def test_cuda_dependency_split_over_two_runners_then_linked_from_the_cache(tmp_path: Path, toolchains: Path,
                                                                            redis_url: str) -> None:
    """scalekit (a CUDA unit and the helper's stub) in 2 shards on two runners at different paths,
    then its final build on the second: every compile a hit, and only the final job publishes."""
    import jsonschema

    settings = f'remote = "{redis_url}"'
    first_ws, first_cache = ci_runner(tmp_path / "runner-1", toolchains, settings)
    second_ws, second_cache = ci_runner(tmp_path / "elsewhere" / "runner-2", toolchains, settings)

    planned = _assemble(first_ws, first_cache, "plan", "--matrix", "--shards", "2", "--cuda", "13.2", "--only",
                        "scalekit", "--json")
    assert planned.returncode == 0, planned.stderr[-3000:]
    document = json.loads(planned.stdout)
    jsonschema.validate(document, schema_for("plan"))
    shard_entries = document["shards"]["include"]
    assert sorted(entry["shard"] for entry in shard_entries) == ["1/2", "2/2"]
    [final] = document["final"]["include"]
    assert final["job"] == "final" and sorted(final["needs"]) == sorted(entry["id"] for entry in shard_entries)
    pipeline = json.loads(_assemble(first_ws, first_cache, "plan", "--matrix", "--shards", "2", "--cuda", "13.2",
                                    "--only", "scalekit", "--buildkite").stdout)
    jsonschema.validate(pipeline, schema_for("plan")["$defs"]["buildkite"])
    steps = {step["key"]: step for step in pipeline["steps"]}
    assert steps["scalekit-final"]["depends_on"] == final["needs"]
    assert "--shard 1/2" in steps["scalekit-shard-1-of-2"]["command"]

    one = _built(_assemble(first_ws, first_cache, "build", "--cuda", "13.2", "--only", "scalekit", "--shard", "1/2",
                           "--json"))
    two = _built(_assemble(second_ws, second_cache, "build", "--cuda", "13.2", "--only", "scalekit", "--shard", "2/2",
                           "--json"))
    for done in (one, two):
        assert done["status"] == "compiled" and done["artifact"] is None, done
        shard = done["shard"]
        assert isinstance(shard, dict) and shard["split"] == shard_entries[0]["split"]
        cache_counts = done["compiler_cache"]
        assert isinstance(cache_counts, dict) and cache_counts["misses"] > 0, done
    units = [set(done["shard"]["units"]) for done in (one, two)]  # type: ignore[index]
    assert (units[0].isdisjoint(units[1])
            and units[0] | units[1] == {"csrc/scale.cu", "assembler_pyinit__scalekit_C.cpp"})
    for cache in (first_cache, second_cache):  # a shard publishes nothing
        assert not any(path.is_file() for path in (cache / "artifacts").rglob("*"))
    assert not (second_ws / ".assemble" / "build" / "scalekit").exists()  # no stand-in object is left to link

    final_build = _built(_assemble(second_ws, second_cache, "build", "--cuda", "13.2", "--only", "scalekit", "--json"))
    counts = final_build["compiler_cache"]
    assert final_build["status"] == "built" and isinstance(counts, dict)
    assert counts["misses"] == 0 and counts["hits"] > 0, counts  # shard 1's compiles came from another path
    assert final_build["artifact"] is not None and (Path(str(final_build["artifact"])) / "artifact.json").is_file()
    module = next((Path(str(final_build["artifact"])) / "files").rglob("*.abi3.so"))
    assert module.stat().st_size > 10_000  # linked from real objects, not a shard's stand-ins


def test_shard_needs_one_dependency_and_the_compiler_cache(tmp_path: Path) -> None:
    from tests.build_support import example_copy

    ws = example_copy(tmp_path / "ws")
    env = {**os.environ, "ASSEMBLE_CACHE": str(tmp_path / "cache")}

    def build(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws), "build", "--cuda", "13.2", *args],
                              env={**env, **extra}, capture_output=True, text=True, check=False)

    whole = build("--shard", "1/2")
    assert whole.returncode == 2 and "exactly one --only DEP" in whole.stderr
    off = build("--only", "scalekit", "--shard", "1/2", ASSEMBLE_SCCACHE="0")
    assert off.returncode == 2 and "compiler cache is off" in off.stderr
    bad = build("--only", "scalekit", "--shard", "3/2")
    assert bad.returncode == 2 and "expected k/N" in bad.stderr
