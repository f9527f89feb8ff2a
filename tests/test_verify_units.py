"""Pure logic of `assemble verify`: which dependency owns a wheel file, and how checks decide a
cell (a cell is PASS only when every check ran and passed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from assembler.manifest import load_manifest
from assembler.manifest.model import Dependency
from assembler.verify.contents import ExtensionFile, attribute, owns
from assembler.verify.report import Cell, Check, Status

MANIFEST = """[bundle]
name = "b"
version = "1.0.0"

[deps.deepgemm]
upstream = "https://example.invalid/deepgemm.git"
commit = "1111111111111111111111111111111111111111"
[deps.deepgemm.install]
"_C_extension*.so" = "vllm/third_party/deep_gemm/"
"deep_gemm/**" = "vllm/third_party/"

[deps.flat]
upstream = "https://example.invalid/flat.git"
commit = "3333333333333333333333333333333333333333"
[deps.flat.install]
"*.so" = "flat"

[deps.vecadd]
upstream = "https://example.invalid/vecadd.git"
commit = "2222222222222222222222222222222222222222"
[deps.vecadd.build]
python-packages = ["vecadd"]
[[deps.vecadd.build.extensions]]
name = "_vecadd_C"
sources = ["a.cpp"]
"""


@pytest.fixture
def deps(tmp_path: Path) -> dict[str, Dependency]:
    (tmp_path / "deps.toml").write_text(MANIFEST)
    return load_manifest(tmp_path / "deps.toml").deps


@pytest.mark.parametrize(("path", "owner"), [
    ("vllm/third_party/deep_gemm/_C_extension.abi3.so", "deepgemm"),
    ("vllm/third_party/deep_gemm/include/deep_gemm/x.so", "deepgemm"),  # deep_gemm/** spans directories
    ("vllm/third_party/deep_gemm/sub/_C_extension.abi3.so", "deepgemm"),  # through deep_gemm/**
    ("vllm/third_party/other/_C_extension.abi3.so", None),
    ("flat/libflat.so", "flat"),
    ("flat/sub/libflat.so", None),  # * stays inside one path component
    ("vllm/_C_extension.abi3.so", None),
    ("vecadd/_vecadd_C.abi3.so", "vecadd"),  # no install rules: its package and extension names
    ("_vecadd_C.abi3.so", "vecadd"),
    ("other/_other.abi3.so", None),
])
def test_install_rules_decide_the_owner(deps: dict[str, Dependency], path: str, owner: str | None) -> None:
    owners = [name for name, dep in deps.items() if owns(dep, path)]
    assert owners == ([owner] if owner else [])


def test_unclaimed_extensions_are_rows_of_their_own(deps: dict[str, Dependency]) -> None:
    files = [ExtensionFile("vecadd/_vecadd_C.abi3.so", "vecadd._vecadd_C", ()), ExtensionFile("x/libx.so", None, ())]
    owned, orphans = attribute(list(deps.values()), files)
    assert [f.path for f in owned["vecadd"]] == ["vecadd/_vecadd_C.abi3.so"]
    assert owned["deepgemm"] == []
    assert [f.path for f in orphans] == ["x/libx.so"]


def test_a_cell_is_pass_only_when_everything_ran_and_passed() -> None:
    passed = [Check("load", "a.so", Status.PASS), Check("op", "ns::op", Status.PASS)]
    assert Cell("d", "2.14.1", passed).status is Status.PASS
    skipped = Cell("d", "2.14.1", [*passed, Check("smoke", "", Status.SKIPPED, "needs a GPU")])
    assert skipped.status is Status.SKIPPED
    assert skipped.reason == "smoke: needs a GPU (1 loaded, 1 ops PASS)"
    failed = Cell("d", "2.14.1", [Check("load", "a.so", Status.FAIL, "OSError: a.so: undefined symbol: x"), *passed])
    assert failed.status is Status.FAIL and failed.reason == "load: OSError: a.so: undefined symbol: x"
    empty = Cell("d", "2.14.1", [])
    assert empty.status is Status.SKIPPED and empty.reason.startswith("nothing to verify")


def test_the_merge_record_overrides_the_install_rules(deps: dict[str, Dependency]) -> None:
    files = [ExtensionFile("vecadd/_vecadd_C.abi3.so", "vecadd._vecadd_C", ()), ExtensionFile("x/libx.so", None, ())]
    owned, orphans = attribute(list(deps.values()), files, {"flat": {"x/libx.so"}, "vecadd": set()})
    assert [f.path for f in owned["flat"]] == ["x/libx.so"]
    assert [f.path for f in orphans] == ["vecadd/_vecadd_C.abi3.so"]
