"""``backend = "cmake"``: the dependency's own CMakeLists.txt (``cmake-dir``), added as a
subdirectory of a generated project that provides assembler's helper. For a library that already
builds with CMake and calls ``assembler_stable_extension`` (or can with a small patch): its own
build stays the source of truth. The recipe's ``defines`` are added to every compile (see
``recipe.generate``) and its ``build-env`` to CMake's environment; `check` reads the units from
``sources`` or, when the recipe lists none, from the compile commands CMake exported on the
last build."""

from __future__ import annotations

from assembler.builder.backends.skbuild import ScikitBuildBackend


class CMakeBackend(ScikitBuildBackend):
    name = "cmake"
