"""``backend = "cmake"``: the dependency's own CMakeLists.txt (``cmake-dir``), added as a
subdirectory of a generated project that provides assembler's helper. For a library that already
builds with CMake and calls ``assembler_stable_extension`` (or can with a small patch): its own
build stays the source of truth. The recipe's ``defines`` are added to every compile (see
``recipe.generate``) and its ``build-env`` to CMake's environment; `check` reads the units from
``sources`` or, when the recipe lists none, from the compile commands CMake exported on the
last build."""

from __future__ import annotations

from assembler.builder.backends import Backend
from assembler.builder.backends.skbuild import ScikitBuildBackend
from assembler.builder.units import cmake_standard
from assembler.manifest import Dependency
from assembler.manifest.model import BackendName, BuildRecipe


class CMakeBackend(ScikitBuildBackend):
    name = BackendName.CMAKE
    from_extensions = False

    def uses_cuda(self, recipe: BuildRecipe) -> bool:
        return True  # its own CMake decides, unknown until it runs

    def unit_std(self, dep: Dependency, language: str) -> str | None:
        return cmake_standard(dep, language)


BACKEND: Backend = CMakeBackend()  # backends.get finds it by the module's name
