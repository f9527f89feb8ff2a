"""`assemble migrate` on attnkit, the example's FlashAttention-shaped library (TORCH_LIBRARY +
TORCH_LIBRARY_IMPL with TORCH_FN and make_pytorch_shim, int and float parameters, an output
tensor taken by at::Tensor&, .dtype() checks, a CUDA guard and stream behind a define), with
real git, g++, torch: migrate alone, no hand-written patch, takes it to CLEAN; the boxable
wrapper keeps the kernel's signature; the written tensor is marked (a!) in the schema torch
parsed; review passes; the build passes the gate (STABLE) and `verify` passes on torch 2.13.0.
The report fits 80 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.build_support import HERMETIC_CUDA, assemble, example_copy, uncompiled_uses

pytestmark = pytest.mark.integration

FWD = ("fwd(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor? bias, float softmax_scale, int window_size, "
       "bool is_causal) -> Tensor")


def _at_80_columns(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ASSEMBLE_CACHE": str(cache), "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", "assembler", *args], env=env, capture_output=True, text=True,
                          check=False)


def test_migrate_attnkit_alone_reaches_clean_builds_and_verifies(tmp_path: Path, private_cache: Path) -> None:
    ws = example_copy(tmp_path / "ws") / "migrate"
    planned = assemble("-C", str(ws), "migrate", "attnkit", "--dry-run", "--json", cache=private_cache)
    assert planned.returncode == 0, planned.stderr[-3000:]
    plan = json.loads(planned.stdout)
    assert plan["schemas"] == [FWD, "attention(Tensor q, Tensor k, Tensor v, float softmax_scale) -> Tensor"]
    # the CUDA branch (#ifdef ATTNKIT_WITH_CUDA) is no line of this build: left, at its lines
    assert plan["declined"] == [] and uncompiled_uses(plan) == [
        "csrc/attnkit.cpp:16 include-aten-cuda", "csrc/attnkit.cpp:17 include-aten-cuda",
        "csrc/attnkit.cpp:53 device-guard", "csrc/attnkit.cpp:54 cuda-stream"]
    assert plan["steps"][0]["made"] == {"torch-library": 2, "impl-box": 2, "box-wrapper": 1, "schema-written": 1}

    result = _at_80_columns("-C", str(ws), "migrate", "attnkit", cache=private_cache)
    assert result.returncode == 0, result.stderr[-3000:]
    assert max(len(line) for line in result.stdout.splitlines()) <= 80, result.stdout
    assert "proof: 2 of 2 rewritten files proven to compile, 0 not committed" in result.stdout
    assert "1 of 1 after (CLEAN): 1 went from UNSTABLE to" in " ".join(result.stdout.split())
    source = (ws / "forks" / "attnkit" / "csrc" / "attnkit.cpp").read_text()
    assert "STABLE_TORCH_LIBRARY(attnkit, m) {" in source and "STABLE_TORCH_LIBRARY_IMPL(attnkit, CPU, m) {" in source
    assert 'm.impl("fwd", TORCH_BOX(&mha_fwd_boxed));' in source
    assert 'm.impl("attention", TORCH_BOX(&attnkit::attention));' in source  # boxable as it is
    assert "static_cast<float>(softmax_scale)" in source and "int64_t window_size" in source
    # the kernel keeps its signature: attention() calls it with float and int
    assert "float softmax_scale, int window_size" in (ws / "forks" / "attnkit" / "csrc" / "attnkit.h").read_text()
    assert '"fwd(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor? bias,' in source

    checked = assemble("-C", str(ws), "check", "attnkit", "--json", cache=private_cache)
    assert checked.returncode == 0 and json.loads(checked.stdout)["deps"][0]["verdict"] == "CLEAN"
    assert assemble("-C", str(ws), "export", "attnkit", cache=private_cache).returncode == 0
    reviewed = _at_80_columns("-C", str(ws), "review", "attnkit", cache=private_cache)
    assert reviewed.returncode == 0, reviewed.stdout[-3000:]
    assert max(len(line) for line in reviewed.stdout.splitlines()) <= 80, reviewed.stdout
    assert "FLAGGED  in  in" not in reviewed.stdout

    built = assemble("-C", str(ws), "build", "--cuda", HERMETIC_CUDA, "--only", "attnkit", "--partial", "--json",
                     cache=private_cache)
    assert built.returncode == 0, built.stderr[-3000:]
    assert [dep["verdict"] for dep in json.loads(built.stdout)["deps"]] == ["STABLE"]
    wheel = next((ws / "dist" / "partial").glob("*.whl"))
    verified = assemble("-C", str(ws), "verify", str(wheel), "--torch", "2.13.0", "--json", cache=private_cache)
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    results = json.loads(verified.stdout)["results"]
    assert [(r["dep"], r["status"]) for r in results] == [("attnkit", "PASS")]
