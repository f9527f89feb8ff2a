"""Pure logic of `assemble verify`: which dependency owns a wheel file (by the merge's own install
rules), and how checks decide a cell (a cell is PASS only when every check ran and passed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from assembler.errors import ManifestError
from assembler.manifest import load_manifest
from assembler.manifest.model import Dependency
from assembler.verify.contents import ExtensionFile, attribute, owns
from assembler.verify.report import Cell, Check, Status
from assembler.verify.runner import workspace_manifest
from assembler.wheel.merge import install_rules
from tests.conftest import run_assemble

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
    ("flat/libflat.so", "flat"),
    # vecadd has no install table: the merge ships its whole payload at the root, so it may
    # have put anything there that no explicit rule claims
    ("vllm/third_party/other/_C_extension.abi3.so", "vecadd"),
    ("flat/sub/libflat.so", "vecadd"),  # * stays inside one path component
    ("vecadd/_vecadd_C.abi3.so", "vecadd"),
])
def test_install_rules_decide_the_owner(deps: dict[str, Dependency], path: str, owner: str) -> None:
    owned, orphans = attribute(list(deps.values()), [ExtensionFile(path, None, ())])
    assert [name for name, files in owned.items() if files] == [owner] and orphans == []


@pytest.mark.parametrize(("path", "owners"), [
    ("vllm/third_party/deep_gemm/_C_extension.abi3.so", ["deepgemm"]),
    ("vllm/third_party/other/_C_extension.abi3.so", []),
    ("flat/libflat.so", ["flat"]),
    ("flat/sub/libflat.so", []),
    ("vllm/_C_extension.abi3.so", []),
])
def test_only_matching_rules_own_a_path(deps: dict[str, Dependency], path: str, owners: list[str]) -> None:
    assert [name for name, dep in deps.items() if dep.install and owns(dep, path)] == owners


@pytest.mark.parametrize("dest", ["pkg/", "/pkg", "./pkg", "pkg/./", "", ".", "/"])
def test_owns_is_the_inverse_of_the_merge_placement(dest: str) -> None:
    """verify judges a file by the same rules the merge placed it with, whatever the spelling of dest."""
    [rule] = install_rules({"lib/**/*.so": dest})
    for relpath in ("lib/a.so", "lib/x/y/b.so"):
        target = rule.target(relpath)
        assert target is not None and rule.source(target) == relpath
    assert rule.target("lib/a.txt") is None and rule.source("elsewhere/lib/a.so") is None


def test_unclaimed_extensions_are_rows_of_their_own(deps: dict[str, Dependency]) -> None:
    explicit = [dep for dep in deps.values() if dep.install]
    files = [ExtensionFile("flat/libflat.so", None, ()), ExtensionFile("x/libx.so", None, ())]
    owned, orphans = attribute(explicit, files)
    assert [f.path for f in owned["flat"]] == ["flat/libflat.so"]
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


def test_a_broken_deps_toml_is_an_error_never_taken_for_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.chdir(outside)
    assert workspace_manifest(None, outside) is None  # no deps.toml here or above: load checks only
    (tmp_path / "ws" / "sub").mkdir(parents=True)
    (tmp_path / "ws" / "deps.toml").write_text("[bundle]\nname = \n")
    result = run_assemble("verify", "x.whl", "--torch", "2.13.0", cwd=tmp_path / "ws" / "sub")
    assert result.returncode == 2, result.stderr
    assert "deps.toml" in result.stderr and "Traceback" not in result.stderr
    assert "no deps.toml found" not in result.stderr
    with pytest.raises(ManifestError):
        workspace_manifest(None, tmp_path / "ws" / "sub")
