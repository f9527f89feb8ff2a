"""`assemble plan --matrix`: one GitHub Actions matrix entry per dependency, with its key, where
it is stored and a cost from units x archs (the build plan's)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from assembler.builder.matrix import UNIT_SECONDS, entry_for, matrix_document
from assembler.builder.planner import DepPlan
from tests.build_support import EXAMPLE, SHARED


def _plan(units: list[str] | None, archs: list[str], jobs: int | None = None) -> DepPlan:
    plan = DepPlan("kern", "cmake", Path("/w/forks/kern"), "2.10", archs=archs)
    if units is not None:
        plan.units = [{"source": name, "language": "cuda" if name.endswith(".cu") else "cxx"} for name in units]
        plan.jobs = len(units) if jobs is None else jobs
    return plan


def test_cost_is_units_times_archs() -> None:
    entry = entry_for(_plan(["a.cpp", "b.cu", "c.cu"], ["9.0a", "10.0a", "12.0"]), "k" * 32, cached=False,
                      in_store=False)
    assert (entry.cxx_units, entry.cuda_units) == (1, 2)
    assert entry.cost == UNIT_SECONDS["cxx"] + 2 * (UNIT_SECONDS["cuda"] + 3 * UNIT_SECONDS["cuda_arch"])
    assert entry.to_json()["arch_compilations"] == 1 + 2 * 3
    stubs = entry_for(_plan(["a.cu"], ["9.0"], jobs=3), "k" * 32, False, False)  # helper: 2 generated stubs
    assert (stubs.cxx_units, stubs.cuda_units) == (2, 1)
    assert entry_for(_plan(["a.cu"], ["9.0"]), "k" * 32, cached=True, in_store=False).cost == 0
    assert entry_for(_plan(["a.cu"], ["9.0"]), "k" * 32, cached=False, in_store=True).cost == 0
    unknown = entry_for(_plan(None, ["9.0"]), "k" * 32, False, False)
    assert not unknown.units_known and unknown.cost > 0
    document = matrix_document([entry])
    assert list(document) == ["include"]  # a strategy.matrix: anything else would be a dimension
    assert document["include"][0]["dep"] == "kern" and document["include"][0]["archs"] == "9.0a 10.0a 12.0"


def test_plan_matrix_of_the_example(tmp_path: Path, toolchains: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in SHARED:
        (cache / name).symlink_to(toolchains / name, target_is_directory=True)
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLE, ws,
                    ignore=shutil.ignore_patterns("forks", "upstreams", ".assemble", "dist", "__pycache__"))
    subprocess.run([sys.executable, str(ws / "make_upstreams.py")], cwd=ws, check=True, capture_output=True)
    env = {**os.environ, "ASSEMBLE_CACHE": str(cache), "COLUMNS": "200"}

    def assemble(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws), *args], env=env, capture_output=True,
                              text=True, check=False)

    done = assemble("plan", "--matrix", "--json", "--cuda", "13.2")
    assert done.returncode == 0, done.stderr[-2000:]
    entries = {e["dep"]: e for e in json.loads(done.stdout)["include"]}
    plan = {entry["name"]: entry for entry in json.loads(assemble("build", "--plan", "--json").stdout)["deps"]}
    assert set(entries) == set(plan) == {"vecadd", "scalekit", "rowsum"}
    for name, entry in entries.items():
        assert len(entry["key"]) == 32 and not entry["cached"] and not entry["in_store"]
        assert entry["archs"] == " ".join(plan[name]["archs"])
        if plan[name]["units"] is not None:
            assert entry["units"] == plan[name]["jobs"], name
            assert entry["cuda_units"] == sum(u["language"] == "cuda" for u in plan[name]["units"])
    text = assemble("plan", "--matrix", "--cuda", "13.2")
    assert text.returncode == 0 and "scalekit" in text.stdout and "est. compile s" in text.stdout
    missing = assemble("plan", "--cuda", "13.2")
    assert missing.returncode == 2 and "--matrix" in missing.stderr
    # a shared store that cannot be asked is "unknown", said on stderr, not silently "not there"
    # nothing listens there
    env.update(ASSEMBLE_ARTIFACT_STORE="s3://artifacts/x", AWS_ENDPOINT_URL="http://127.0.0.1:9")
    unreachable = assemble("plan", "--matrix", "--json", "--cuda", "13.2")
    assert unreachable.returncode == 0, unreachable.stderr[-2000:]
    assert all(entry["in_store"] is None for entry in json.loads(unreachable.stdout)["include"])
    assert "the shared artifact store could not be asked" in unreachable.stderr
    assert "unknown" in assemble("plan", "--matrix", "--cuda", "13.2").stdout
