"""`assemble verify`'s import diagnosis, for real: the demonstration library that calls
at::cpu::cholesky_out (exported by torch 2.13.0's libtorch_cpu.so, gone from 2.14.1) fails to load
on 2.14.1, and the report names the C++ symbol, its dependency and extension, and the torch that
last had it, read from the libraries of the verify environments themselves (test_verify's
cached venvs and compiled libraries; no new torch environment, no network)."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pytest

from assembler.audit.torchdata import format_version, load_table
from assembler.audit.torchlibs import EXPORTS_DIR
from assembler.audit.torchlibs import read_lib_dir as torch_exports
from assembler.toolchain.venv import site_packages
from assembler.verify.envs import TorchEnv
from assembler.verify.load_failure import ProbedTorch, diagnose, missing_symbol
from tests.conftest import run_assemble
from tests.test_verify import NEW, OLD, cells, demo, libraries, torch_envs, wheel, workspace  # noqa: F401 (fixtures)
from tests.verify_fixtures.demo import MANIFEST, package_files, write_wheel

pytestmark = pytest.mark.integration

CHOLESKY = "_ZN2at3cpu12cholesky_outERNS_6TensorERKS1_b"
CHOLESKY_CXX = "at::cpu::cholesky_out(at::Tensor&, at::Tensor const&, bool)"


def torch_lib(env: TorchEnv) -> Path:
    return site_packages(env.path) / "torch" / "lib"


def test_json_names_symbol_dependency_extension_and_last_torch_with_it(
        demo: subprocess.CompletedProcess[str]) -> None:  # noqa: F811
    matrix = cells(demo)
    broken = matrix[("demo-unstable", NEW)]
    assert broken["status"] == "FAIL"
    load = broken["checks"][0]
    found = load["diagnosis"]
    assert found["symbol"] == CHOLESKY and found["demangled"] == CHOLESKY_CXX
    assert found["dependency"] == "demo-unstable" and found["needed_by_dependency"] == "demo-unstable"
    assert found["extension"] == found["needed_by"] == "verifydemo_unstable/libunstable_ops.so"
    assert found["torch"].startswith(NEW)
    assert found["last_seen"] == OLD and found["first_seen"] is None and found["shim_introduced"] is None
    assert [t.split("+")[0] for t in found["present_in"]] == [OLD]
    assert [t.split("+")[0] for t in found["absent_in"]] == [NEW]
    assert set(found["exported_by"].values()) == {"libtorch_cpu.so"}
    assert found["verdict"] == f"last seen in torch {OLD}"
    assert f"last seen in torch {OLD}" in broken["reason"]
    # Every other cell loaded (or was skipped before loading): nothing else is diagnosed.
    others = [c for key, cell in matrix.items() if key != ("demo-unstable", NEW) for c in cell["checks"]]
    assert not [c for c in others if "diagnosis" in c]


@pytest.fixture(scope="session")
def unstable_only(tmp_path_factory: pytest.TempPathFactory, libraries: dict[str, Path]) -> Path:  # noqa: F811
    """A workspace whose wheel holds only the unstable library: one row per torch, a short run."""
    root = tmp_path_factory.mktemp("diagnose-ws")
    head, _, rest = MANIFEST.partition("[deps.demo-unstable]")
    (root / "deps.toml").write_text(head.split("[deps.demo-stable]")[0] + "[deps.demo-unstable]"
                                    + rest.split("[deps.demo-cuda]")[0])
    write_wheel(root / "dist", "verifydemo", package_files({"unstable_ops": libraries["unstable_ops"]}))
    return root


def test_table_output_shows_the_diagnosis(unstable_only: Path) -> None:
    result = run_assemble("-C", str(unstable_only), "verify", str(wheel(unstable_only)), "--torch", OLD, "--torch", NEW)
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "load failures" in out
    block = out[out.index("load failures"):]
    assert f"demo-unstable on torch {NEW}" in block
    assert f"missing symbol  {CHOLESKY_CXX}  [{CHOLESKY}]" in block
    assert "needed by       verifydemo_unstable/libunstable_ops.so (dependency demo-unstable)" in block
    assert f"torch table     last seen in torch {OLD}: present in {OLD}" in block
    assert "(libtorch_cpu.so), absent in " + NEW in block


def test_export_table_is_cached_per_torch_and_reread(torch_envs: dict[str, TorchEnv], tmp_path: Path,  # noqa: F811
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path))
    env = torch_envs[OLD]
    said: list[str] = []
    first = torch_exports(env.installed, torch_lib(env), said.append)
    assert first is not None and first.exporter(CHOLESKY) == "libtorch_cpu.so"
    assert len(said) == 1 and "reading the symbols" in said[0]
    [cached] = (tmp_path / EXPORTS_DIR).glob("*.json.gz")
    assert cached.name.startswith(env.installed)
    assert CHOLESKY in json.loads(gzip.decompress(cached.read_bytes()))["libs"]["libtorch_cpu.so"]["exports"]
    again = torch_exports(env.installed, torch_lib(env), said.append)
    assert len(said) == 1, "the cached table was read again from the libraries"
    assert again is not None and again.libs == first.libs
    cached.write_bytes(b"not gzip")  # a damaged cache entry is rebuilt, never trusted
    assert torch_exports(env.installed, torch_lib(env), said.append) is not None and len(said) == 2


def test_a_symbol_only_the_newer_torch_exports_is_first_seen_there(torch_envs: dict[str, TorchEnv],  # noqa: F811
                                                                   tmp_path: Path) -> None:
    """The other direction, from the same real tables: a 2.14.1 symbol missing on 2.13.0."""
    tables = {env.installed: torch_exports(env.installed, torch_lib(env)) for env in torch_envs.values()}
    old, new = (tables[torch_envs[v].installed] for v in (OLD, NEW))
    assert old is not None and new is not None
    added = sorted(s for s in new.libs["libtorch_cpu.so"] - old.all() if s.startswith("_ZN2at"))
    assert added, "torch 2.14.1's libtorch_cpu.so exports no at:: symbol that 2.13.0 lacks"
    failing = ProbedTorch(old.torch, Path(old.source), tmp_path)
    found = diagnose(added[0], "pkg/libx.so", "pkg/libx.so", "x", failing, {t: e for t, e in tables.items() if e},
                     {"pkg/libx.so": "x"})
    assert found.last_seen is None and found.first_seen == NEW
    assert found.verdict == f"first exported by torch {NEW} among those verified"
    assert found.present_in == (new.torch,) and found.absent_in == (old.torch,)
    # The object's other imports that 2.13.0 lacks and 2.14.1 has: libtorch_cuda.so of 2.14.1
    # stands for an extension built against 2.14.1 (it imports 2.14.1's libtorch_cpu).
    cuda = ProbedTorch(old.torch, Path(old.source), Path(new.source))
    symbol = sorted(s for s in new.libs["libtorch_cpu.so"] - old.all())[0]
    found = diagnose(symbol, "libtorch_cuda.so", "libtorch_cuda.so", None, cuda, {t: e for t, e in tables.items() if e},
                     {})
    assert found.also_missing_count > 0 and len(found.also_missing) == min(found.also_missing_count, 20)
    assert all("::" in name or not name.startswith("_Z") for name in found.also_missing)  # demangled
    assert found.owner() == "libtorch_cuda.so (no dependency claims it)"


def test_missing_symbol_reads_the_loader_message() -> None:
    assert (missing_symbol(f"OSError: pkg/lib.so: undefined symbol: {CHOLESKY_CXX} [{CHOLESKY}]")
            == (CHOLESKY, "pkg/lib.so"))
    assert (missing_symbol("ImportError: /x/_C.so: undefined symbol: aoti_torch_foo, version V1")
            == ("aoti_torch_foo", "/x/_C.so"))
    assert missing_symbol("undefined symbol: bar") == ("bar", None)
    assert missing_symbol("OSError: libcudart.so.13: cannot open shared object file") is None


def test_a_shim_symbol_gets_its_release_from_the_shim_table(tmp_path: Path) -> None:
    """No verified torch exports it (empty tables here): the audit's shim table still dates it."""
    table = load_table()
    symbol, added = max(table.versions.items(), key=lambda item: item[1])
    failing = ProbedTorch("2.10.0", None, tmp_path)
    found = diagnose(symbol, "pkg/_C.abi3.so", "pkg/_C.abi3.so", "kern", failing, {}, {"pkg/_C.abi3.so": "kern"})
    assert found.demangled == symbol and found.last_seen is None and found.first_seen is None
    assert found.shim_introduced == format_version(added)
    assert found.verdict == f"exported by no torch verified; added in torch {format_version(added)} (stable shim table)"
