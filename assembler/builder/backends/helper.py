"""``backend = "helper"``: assembler's CMake helper compiles the recipe's ``extensions``. For a
library without a build of its own, or whose build is not worth keeping: the recipe lists each
module's sources, include dirs and defines, and the helper makes them abi3 Stable-ABI modules."""

from __future__ import annotations

from pathlib import Path

from assembler.builder import recipe
from assembler.builder.backends.skbuild import ScikitBuildBackend
from assembler.manifest import Dependency


class HelperBackend(ScikitBuildBackend):
    name = "helper"

    def missing_modules(self, dep: Dependency, files: Path) -> list[str]:
        destination = files / recipe.module_destination(dep)
        return [f"{ext.name}.abi3.so" for ext in dep.build.extensions if not (destination / f"{ext.name}.abi3.so").is_file()]
