"""`assemble migrate` on a DeepGEMM-shaped pybind11 module (examples' gemmkit): the module body
hands itself to ``register_apis(m)`` in three headers and namespaces, whose lambdas become named
functions, whose tuples and pairs are split into schema arguments (joined again by the generated
Python function, so callers pass them as before), whose ``std::string`` and ``c10::string_view``
are ``str``, vectors lists, a ScalarType defaulted to ``torch::kFloat32`` a ``ScalarType``
argument, and a returned pair a tuple of tensors; a ``std::variant`` is declined by name. With no
hand-written patch, the fork is CLEAN, builds through the gate and passes `verify` with real
g++, git and torch."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import tomlkit

from tests.build_support import HERMETIC_CUDA, assemble, example_copy

pytestmark = pytest.mark.integration

SCHEMAS = [
    "gemm_nt(Tensor a, Tensor b, Tensor? c=None, str compiled_dims='nk') -> Tensor",
    "block_amax(Tensor x, int block_0=2, int block_1=2) -> Tensor",  # std::tuple<int, int>, split
    "gemm_nt_bias(Tensor a, Tensor b, Tensor c) -> Tensor",  # a lambda, named
    "set_num_threads(int num_threads) -> ()",
    "get_num_threads() -> int",  # its return type found from what it returns
    "set_tile_policy(str policy='square') -> ()",
    "get_tile_policy() -> str",
    "split_rows(Tensor x, int at) -> (Tensor, Tensor)",  # a std::pair returned: a tuple for TORCH_BOX
    # a std::pair taken (split), an optional<const Tensor>& held by the wrapper, a dtype default
    "dequantize(Tensor a_0, Tensor a_1, Tensor? bias=None, ScalarType dtype=float32) -> Tensor",
    "gather_rows(Tensor x, int[] rows) -> Tensor",  # std::vector<int64_t>
    "column_sums(Tensor[] xs) -> Tensor[]",
    "shape_of(Tensor x) -> int[]",
    "scale_rows_by(Tensor x, float factor, str mode='keep') -> Tensor",  # c10::string_view
]


def _gemmkit_only(ws: Path) -> None:
    manifest = tomlkit.parse((ws / "deps.toml").read_text())
    for name in [name for name in manifest["deps"] if name != "gemmkit"]:  # type: ignore[union-attr]
        del manifest["deps"][name]  # type: ignore[union-attr]
    (ws / "deps.toml").write_text(tomlkit.dumps(manifest))


def test_migrate_gemmkit_alone_is_clean_builds_and_verifies(tmp_path: Path, private_cache: Path) -> None:
    ws = example_copy(tmp_path / "ws") / "migrate"
    _gemmkit_only(ws)
    result = assemble("-C", str(ws), "migrate", "gemmkit", "--json", cache=private_cache)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["schemas"] == SCHEMAS
    # the one binding with no schema form is named, the rest of the module converted
    assert [(d["at"], d["reason"]) for d in report["declined"]] == [
        ("csrc/python_api.cpp:12", "at csrc/apis/layout.hpp:146: set_block_multiple: parameter type std::variant<int, "
                                   "std::tuple<int, int>> has no schema form (a schema argument has one type)")]
    assert report["proof"]["not_committed"] == [] and report["proof"]["not_proven"] == []
    assert report["check"]["before"]["verdict"] == "UNSTABLE" and report["check"]["after"]["verdict"] == "CLEAN"
    fork = ws / "forks" / "gemmkit"
    api = (fork / "csrc" / "python_api.cpp").read_text()
    assert "PYBIND11_MODULE(" not in api and "#include <pybind11" not in api and "torch/python.h" not in api
    assert "TORCH_BOX(&gemmkit::runtime::get_num_threads_boxed)" in api and "TORCH_BOX(&gemmkit::gemm::gemm_nt)" in api
    runtime = (fork / "csrc" / "apis" / "runtime.hpp").read_text()
    assert "void register_apis(" not in runtime and "inline int get_num_threads_fn() {" in runtime
    # the Python function joins what the schema splits: block_amax(x, (2, 4)) as before
    assert '"def block_amax(x, block=(2, 2)):\\n"' in api
    assert '"    return _assemble_torch.ops.gemmkit.block_amax(x, *block)\\n"' in api
    layout = (fork / "csrc" / "apis" / "layout.hpp").read_text()
    assert "zp = bias->const_data_ptr<float>();" in layout  # through the optional, only read
    written = "float* op = out.mutable_data_ptr<float>();\n    for (int64_t j = 0; j < n; ++j) {\n      float& total"
    assert written in layout  # written through float& total
    assert "std::string_view mode" in layout and "c10::" not in layout
    status = subprocess.run(["git", "status", "--porcelain"], cwd=fork, capture_output=True, text=True, check=True)
    assert status.stdout == ""

    built = assemble("-C", str(ws), "build", "--cuda", HERMETIC_CUDA, "--verify", "--json", cache=private_cache)
    assert built.returncode == 0, built.stderr[-3000:]
    document = json.loads(built.stdout)
    assert [dep["verdict"] for dep in document["deps"]] == ["STABLE"]
    results = document["verify"]["results"]
    assert {r["status"] for r in results} == {"PASS"} and "2.13.0" in {r["torch"].split("+")[0] for r in results}
