"""The backend seam (#31 item 1): each ``BackendName`` is answered by the module of that name in
assembler/builder/backends/, and no code outside that package asks which backend a recipe
names: it asks the backend (``builder.backends.Backend``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from assembler.builder import backends
from assembler.manifest import load_manifest
from assembler.manifest.model import CXX, BackendName, BuildRecipe

PACKAGE = Path(__file__).resolve().parent.parent / "assembler"
BACKENDS_DIR = PACKAGE / "builder" / "backends"
# Not yet moved onto the seam: files other engineers own while #31 is worked on. Their
# replacement lines are in the #31 report; empty this set as each is applied.
PENDING = {
    "migration/assess.py",
    "manifest/load.py", "manifest/model.py",  # the manifest layer is below builder: its own table per name
}


def _asks_the_name(node: ast.Compare) -> bool:
    """``recipe.backend == "helper"``, ``x.backend != BackendName.CMAKE``, ``self.name != "helper"``, ..."""
    names = {name.value for name in BackendName}
    sides = [node.left, *node.comparators]
    named = any(isinstance(side, ast.Constant) and side.value in names for side in sides) or any(
        isinstance(side, ast.Attribute) and isinstance(side.value, ast.Name) and side.value.id == "BackendName"
        for side in sides)
    backend_side = any(isinstance(side, ast.Attribute) and side.attr in ("backend", "name") for side in sides)
    return named and backend_side


def name_comparisons(root: Path) -> list[str]:
    """file:line of every comparison of a backend with a backend's name under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if BACKENDS_DIR in path.parents:
            continue
        tree = ast.parse(path.read_text(), str(path))
        found += [f"{path.relative_to(root)}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Compare) and _asks_the_name(node)]
    return found


def test_every_backend_name_is_answered_by_its_module() -> None:
    for name in BackendName:
        backend = backends.get(name)
        assert backend.name is name
        assert backends.get(BackendName(name.value)) is backend  # one registry, one instance
        assert isinstance(backend.from_extensions, bool) and isinstance(backend.cpp_extension_std, bool)


def test_nothing_outside_the_backends_compares_a_backend_name() -> None:
    found = [where for where in name_comparisons(PACKAGE) if where.split(":")[0] not in PENDING]
    assert found == [], "ask the backend (assembler.builder.backends.Backend) instead of comparing its name"


def test_the_scan_sees_a_comparison(tmp_path: Path) -> None:
    """The check above can fail: the shapes the seam replaced are found."""
    (tmp_path / "m.py").write_text('if dep.build.backend == "helper":\n    pass\n'
                                   'ok = recipe.backend != BackendName.CMAKE\nfine = tool == "cmake"\n')
    assert name_comparisons(tmp_path) == ["m.py:1", "m.py:3"]


HEAD = """[bundle]
name = "b"
version = "1.0.0"

[deps.kit]
upstream = "https://git.invalid/kit"
commit = "0123456789abcdef0123456789abcdef01234567"

"""
RECIPES = {
    BackendName.HELPER: """[deps.kit.build]
[[deps.kit.build.extensions]]
name = "_C"
sources = ["csrc/a.cu"]
language = "cuda"
[[deps.kit.build.extensions]]
name = "_ops"
sources = ["csrc/b.cpp"]
""",
    BackendName.CMAKE: '[deps.kit.build]\ncmake-dir = "."\ncmake-args = ["-DCMAKE_CXX_STANDARD=20"]\n'
                       'sources = ["a.cpp"]\n',
    BackendName.SETUPTOOLS: '[deps.kit.build]\nbackend = "setuptools"\nsources = ["a.cpp"]\n',
}


@pytest.mark.parametrize(("name", "modules", "cuda", "std"), [
    (BackendName.HELPER, ("_C", "_ops"), True, None),  # a helper unit's std is its extension's (units.helper_shape)
    (BackendName.CMAKE, (), True, "gnu++20"),  # its own CMake decides whether nvcc runs: assume it does
    (BackendName.SETUPTOOLS, (), False, None),  # no cuda-archs, no .cu source; torch's cpp_extension -std
])
def test_each_backend_answers_for_its_recipes(tmp_path: Path, name: BackendName, modules: tuple[str, ...],
                                              cuda: bool, std: str | None) -> None:
    path = tmp_path / "deps.toml"
    path.write_text(HEAD + RECIPES[name])
    dep = load_manifest(path).deps["kit"]
    backend = backends.for_dep(dep)
    assert backend is backends.get(name)
    assert backend.extension_modules(dep) == modules
    assert backend.uses_cuda(dep.build) is cuda
    assert backend.nothing_to_build(dep.build) is False
    assert backend.nothing_to_build(BuildRecipe(backend=name)) is (name is BackendName.HELPER)  # what `add` leaves
    assert backend.from_extensions is (name is BackendName.HELPER)
    assert backend.cpp_extension_std is backend.pyinit_in_sources is (name is BackendName.SETUPTOOLS)
    if not backend.from_extensions:
        assert backend.unit_std(dep, CXX) == std
