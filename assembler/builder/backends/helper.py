"""``backend = "helper"``: assembler's CMake helper compiles the recipe's ``extensions``. For a
library without a build of its own, or whose build is not worth keeping: the recipe lists each
module's sources, include dirs and defines, and the helper makes them abi3 Stable-ABI modules."""

from __future__ import annotations

from pathlib import Path

from assembler.builder import recipe
from assembler.builder.backends import Backend
from assembler.builder.backends.skbuild import ScikitBuildBackend
from assembler.manifest import Dependency
from assembler.manifest.model import CUDA, BackendName, BuildRecipe


class HelperBackend(ScikitBuildBackend):
    name = BackendName.HELPER
    from_extensions = True  # builder.units.helper_shape is each unit's whole compile model

    def uses_cuda(self, recipe: BuildRecipe) -> bool:
        return any(ext.language == CUDA for ext in recipe.extensions)

    def nothing_to_build(self, recipe: BuildRecipe) -> bool:
        return not (recipe.extensions or recipe.python_packages or recipe.data)

    def extension_modules(self, dep: Dependency) -> tuple[str, ...]:
        return tuple(ext.name for ext in dep.build.extensions)

    def missing_modules(self, dep: Dependency, files: Path) -> list[str]:
        destination = files / recipe.module_destination(dep)
        return [f"{ext.name}.abi3.so" for ext in dep.build.extensions
                if not (destination / f"{ext.name}.abi3.so").is_file()]


BACKEND: Backend = HelperBackend()  # backends.get finds it by the module's name
