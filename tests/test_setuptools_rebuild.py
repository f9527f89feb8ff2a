"""The setuptools backend's build tree is reused per configuration (objects stay, ninja decides
what to recompile), but what the last build installed is not shipped again. Seen on FlashKDA:
a first build whose setup.py did not yet ask for abi3 left ``flash_kda_C.cpython-311-*.so`` in
the tree's build_lib; the next build, after migrate's setup.py step, packed it beside the new
``.abi3.so`` and the gate refused the artifact for a module the sources no longer make."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from assembler.builder.pipeline import BuildFailed, BuildOptions, build_artifacts
from assembler.workspace import open_workspace
from tests.build_support import EXAMPLE, HERMETIC_CUDA

pytestmark = pytest.mark.integration


def test_a_module_the_last_build_made_is_not_shipped_by_the_next(example_ws: Path, private_cache: Path) -> None:
    series = example_ws / "patches" / "rowsum" / "series"
    full = series.read_text()
    kept = [line for line in full.splitlines() if not line.startswith(("0002-", "0003-"))]
    series.write_text("\n".join(kept) + "\n")  # the source port only: setup.py builds a cpython-311 module
    for name in full.splitlines():
        if name.startswith(("0002-", "0003-")):
            (series.parent / name).unlink()
    options = BuildOptions(cuda=HERMETIC_CUDA, only=("rowsum",), jobs=2)
    with pytest.raises(BuildFailed, match="is not an abi3 module"):
        build_artifacts(open_workspace(example_ws), options)
    trees = list((example_ws / ".assemble").rglob("setuptools-*"))
    assert any(tree.glob("lib.*/rowsum/_C.cpython-*.so") for tree in trees)  # what the next build must not ship

    series.write_text(full)  # setup.py asks for abi3 now, in the same build configuration
    for name in full.splitlines():
        if name.startswith(("0002-", "0003-")):
            shutil.copy(EXAMPLE / "patches" / "rowsum" / name, series.parent / name)
    [dep] = build_artifacts(open_workspace(example_ws), options).deps
    assert dep.status == "built"
    modules = sorted(p.name for p in (dep.artifact / "files").rglob("*.so"))
    assert modules == ["_C.abi3.so"]
    assert list((example_ws / ".assemble").rglob("setuptools-*")) == trees  # the same tree, reused
