"""Turn ``[deps.X.build]`` into a scikit-build-core project: a pyproject.toml and a CMakeLists.txt
that calls the helper in ``assembler/cmake`` once per extension, or wraps the dependency's own
CMake (``cmake-dir``), which includes the same helper.

The generated text names no absolute path (the checkout, torch and the toolkit come in as
CMake variables at build time), so it can be hashed into the artifact key and the key does not
depend on where the workspace lives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from assembler.builder import backends, units
from assembler.errors import InputError
from assembler.fsutil import atomic_write_if_changed
from assembler.manifest import Dependency, Extension
from assembler.manifest.model import CUDA, CXX, arch_specific

CMAKE_HELPER_DIR = Path(__file__).resolve().parent.parent / "cmake"
MINIMUM_CMAKE = "3.26"


@dataclass(frozen=True)
class Project:
    """The generated files; ``write`` puts them in a directory scikit-build-core builds."""

    pyproject: str
    cmakelists: str

    def write(self, directory: Path, *, inside: Path | None = None) -> None:
        """Into ``directory`` (a build tree's ``project/``), never through a symbolic link: none
        between ``inside`` (default: the directory's parent, which the build checked) and the
        files, and a link at a file's name is replaced (fsutil.atomic_write)."""
        base = inside if inside is not None else directory.parent
        atomic_write_if_changed(directory / "pyproject.toml", self.pyproject, inside=base)
        atomic_write_if_changed(directory / "CMakeLists.txt", self.cmakelists, inside=base)


def module_destination(dep: Dependency) -> str:
    """Extensions go into the first Python package (files/<pkg>/_x_C.abi3.so), else the root."""
    return Path(dep.build.python_packages[0]).name if dep.build.python_packages else "."


def cmake_archs(archs: tuple[str, ...], sass_only: bool = False) -> str:
    """Manifest spelling (9.0a) to CMAKE_CUDA_ARCHITECTURES spelling (90a); with ``sass_only``,
    arch-specific targets become ``90a-real`` (SASS, no PTX: theirs runs on no other GPU), which
    is how the cmake backend ships only what runs to a dependency's own CMakeLists. The helper
    gets the plain spelling and decides per extension (its ``PTX`` argument)."""
    return ";".join(arch.replace(".", "") + ("-real" if sass_only and arch_specific(arch) else "") for arch in archs)


def torch_arch_list(archs: tuple[str, ...], ptx: bool) -> str:
    """TORCH_CUDA_ARCH_LIST as torch.utils.cpp_extension reads it: "9.0a" compiles
    ``code=sm_90a`` only (SASS), "9.0a+PTX" adds ``code=compute_90a``. So arch-specific targets
    ship SASS only unless the recipe sets ``ptx = true``; plain targets ("8.0") stay as torch
    spells them (SASS only, torch's own default for a listed arch). A setup.py that writes its
    own ``-gencode`` flags instead of reading this list is not changed by either. The cmake
    backend sets it too: a CMakeLists that runs find_package(Torch) on a CUDA torch takes its
    gencode flags from it, ignores CMAKE_CUDA_ARCHITECTURES, and without it builds for
    "common architectures" (5.0 to 12.0a) because the builder has no GPU to detect."""
    return ";".join(arch + ("+PTX" if ptx and arch_specific(arch) else "") for arch in archs)

def _escaped(value: str) -> str:
    """``value`` as the text of a CMake quoted argument that stays data: no variable reference
    (``$``), no list split (``;``), no end of the argument (the manifest refuses these as well)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace(";", "\\;")


def _quote(value: str) -> str:
    return f'"{_escaped(value)}"'


def _under(variable: str, relative: str) -> str:
    """``"${VARIABLE}/relative"``: a path below a directory the helper sets, the path as data."""
    return f'"${{{variable}}}/{_escaped(relative)}"'


def _source_path(relative: str) -> str:
    return _under("ASSEMBLER_SOURCE_DIR", relative)


# The CMake variables the compile model's system include roots are (units.TORCH_ROOT, CUDA_ROOT).
ROOT_VARIABLES = {units.TORCH_ROOT: "ASSEMBLER_TORCH_DIR", units.CUDA_ROOT: "ASSEMBLER_CUDA_HOME"}


def _system_dirs(includes: tuple[units.SystemInclude, ...] | None) -> str:
    return " ".join(_under(ROOT_VARIABLES[root], relative) for root, relative in includes or ())


def _extension_call(dep: Dependency, ext: Extension, destination: str) -> str:
    """One assembler_stable_extension() call: the compile model of units.helper_shape spelt out
    (standards, flags, system include dirs), so the build runs what `check` preprocessed."""
    cxx, cuda = units.helper_shape(dep, ext, CXX), units.helper_shape(dep, ext, CUDA)
    cxx_std, cuda_std = units.helper_standards(dep, ext)
    lines = [f"assembler_stable_extension({ext.name}"]
    lines.append("  SOURCES " + " ".join(_source_path(s) for s in ext.sources))
    lines.append(f"  LANGUAGE {ext.language.upper()}")
    if ext.include_dirs:
        lines.append("  INCLUDE_DIRS " + " ".join(_source_path(d) for d in ext.include_dirs))
    if ext.defines:
        lines.append("  DEFINES " + " ".join(_quote(d) for d in ext.defines))
    if ext.libraries:
        lines.append("  LIBRARIES " + " ".join(_quote(lib) for lib in ext.libraries))
    lines.append(f"  CXX_STD {cxx_std}")
    lines.append("  CXX_SYSTEM_INCLUDE_DIRS " + _system_dirs(cxx.system_includes))
    if cxx.flags:
        lines.append("  CXX_FLAGS " + " ".join(_quote(flag) for flag in cxx.flags))
    if ext.language == CUDA:
        lines.append(f"  CUDA_STD {cuda_std}")
        lines.append("  CUDA_SYSTEM_INCLUDE_DIRS " + _system_dirs(cuda.system_includes))
        if cuda.flags:
            lines.append("  CUDA_FLAGS " + " ".join(_quote(flag) for flag in cuda.flags))
        if ext.ptx:
            lines.append("  PTX")
    lines.append(f"  DESTINATION {_quote(destination)})")
    return "\n".join(lines)


def generate(dep: Dependency, python_abi: str) -> Project:
    """The project for ``dep``; sources, packages and data are paths inside its checkout."""
    recipe = dep.build
    languages = "CXX CUDA" if any(ext.language == CUDA for ext in recipe.extensions) else "CXX"
    body = [
        f"cmake_minimum_required(VERSION {MINIMUM_CMAKE})",
        f"project(assembler_{dep.name.replace('-', '_').replace('.', '_')} LANGUAGES {languages})",
        f"# Generated by assemble from deps.toml; edit [deps.{dep.name}.build] instead.",
        'list(APPEND CMAKE_MODULE_PATH "${ASSEMBLER_CMAKE_DIR}")',
        "# Source paths in the binaries are recorded relative to the checkout (reproducible).",
        f'add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-ffile-prefix-map=${{ASSEMBLER_SOURCE_DIR}}={dep.name}>")',
    ]
    if languages != "CXX":
        body.append(f'add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffile-prefix-map=${{ASSEMBLER_SOURCE_DIR}}={dep.name}>")')
    if recipe.cmake_dir is not None:
        if recipe.defines:
            body.append("add_compile_definitions(" + " ".join(_quote(d) for d in recipe.defines) + ")")
        body.append(f"add_subdirectory({_source_path(recipe.cmake_dir)} dependency)")
    else:
        body.append("include(AssemblerStableExtension)")
        body.extend(_extension_call(dep, ext, module_destination(dep)) for ext in recipe.extensions)
    for package in recipe.python_packages:
        body.append(
            f"install(DIRECTORY {_source_path(package)} DESTINATION . "
            'PATTERN "__pycache__" EXCLUDE PATTERN "*.pyc" EXCLUDE)'
        )
    for item in recipe.data:
        parent = Path(item).parent.as_posix()
        body.append(
            f"if(IS_DIRECTORY {_source_path(item)})\n"
            f"  install(DIRECTORY {_source_path(item)} DESTINATION {_quote(parent)})\n"
            f"else()\n  install(FILES {_source_path(item)} DESTINATION {_quote(parent)})\nendif()"
        )
    cmakelists = "\n".join(body) + "\n"
    cmake_args = ", ".join(_toml_string(arg) for arg in recipe.cmake_args)
    pyproject = f"""\
# Generated by assemble: builds the artifact of dependency {dep.name!r}.
[build-system]
requires = ["scikit-build-core"]
build-backend = "scikit_build_core.build"

[project]
name = "assembler-artifact-{dep.name}"
version = "0"

[tool.scikit-build]
minimum-version = "0.10"
cmake.version = ">={MINIMUM_CMAKE}"
cmake.build-type = "Release"
cmake.args = [{cmake_args}]
ninja.make-fallback = false
wheel.py-api = "cp{python_abi.replace('.', '')}"
wheel.packages = []
wheel.license-files = []
install.strip = true
"""
    return Project(pyproject=pyproject, cmakelists=cmakelists)


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


RECIPES_DOC = "docs/reference/recipes.md"  # where the three backends' recipes are described


def missing_recipe(manifest: Path, dep: Dependency) -> InputError | None:
    """The error for a dependency whose deps.toml says nothing to build (no [deps.X.build], as
    `assemble add` leaves it; or a helper recipe without extensions, packages or data): said
    where the build is planned, not as a missing file when the empty artifact is packed."""
    if not backends.for_dep(dep).nothing_to_build(dep.build):
        return None
    return InputError(
        f"{manifest}: [deps.{dep.name}] has no build recipe, so there is nothing to build",
        hint=f"add a [deps.{dep.name}.build] table to {manifest.name}: backend = \"setuptools\" for its setup.py, "
             f"backend = \"cmake\" with cmake-dir for its CMakeLists.txt, or [[deps.{dep.name}.build.extensions]] "
             f"blocks naming its sources ({RECIPES_DOC})")
