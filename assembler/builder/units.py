"""The translation units a dependency's build compiles, resolved against its checkout without
compiling: what `assemble check` preprocesses and `assemble build --plan` lists.

Where they come from, by backend (``Backend.from_extensions``):
- ``helper``: each ``[[deps.X.build.extensions]]`` (its sources, include-dirs and defines; a
  CUDA extension defines ``USE_CUDA`` for all of its sources, as the CMake helper does);
- a dependency's own build (``cmake``, ``setuptools``): the recipe's ``sources`` (globs allowed), ``include-dirs`` and
  ``defines`` when ``sources`` is given; else the compile commands the last build of the
  dependency recorded on this machine (``compile_commands_path``: in the user's cache, never
  the workspace, where a committed file could leave units out); else an error naming the recipe.

The defines here are the unit's own; the ones every unit of a dependency gets
(``TORCH_TARGET_VERSION``, ``Py_LIMITED_API``) are added by whoever compiles or checks it.
A recipe path that is missing from the checkout is an error naming its line in deps.toml.
Globs enter no directory link (``manifest.globs.expand``: a link cycle cannot hang `check` or
`build --plan`), and a checkout with a link out of it is refused first (``builder.links``).

For the helper backend this module is also the compile model the build runs: each unit's
standard, extra flags and system include directories (torch's two include roots; for the C++
units of a CUDA extension the toolkit's include directories too) are decided here, named
relative to torch and the toolkit (:data:`TORCH_ROOT`, :data:`CUDA_ROOT`), and both
``builder.recipe`` (which hands them to the CMake helper) and `check` (which resolves them
against the torch and toolkit it preprocesses with) read them from here. A unit `check` calls
CLEAN therefore sees the same headers in the build.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from assembler.builder import backends, links
from assembler.errors import InputError
from assembler.manifest import Dependency, Extension
from assembler.manifest.globs import expand
from assembler.manifest.load import value_position
from assembler.manifest.model import CUDA, CXX
from assembler.workspace import Workspace

CUDA_SUFFIXES = frozenset({".cu"})  # what nvcc compiles; everything else goes to the C++ compiler
COMPDB_DIR = "compdb"
# Defines that are the dependency's, not the unit's: set from the manifest by build and check.
GLOBAL_DEFINES = frozenset({"TORCH_TARGET_VERSION", "Py_LIMITED_API"})
GLOB_CHARS = frozenset("*?[")  # a source or include pattern holding one is a glob
# What a system include directory of the compile model is relative to: the build's torch
# package, or the CUDA toolkit's root (CUDA_HOME). The build names them as CMake variables.
TORCH_ROOT, CUDA_ROOT = "torch", "cuda"
SystemInclude = tuple[str, str]  # (TORCH_ROOT or CUDA_ROOT, relative directory)
# torch's include roots as torch.utils.cpp_extension orders them: the C shim and stable headers,
# then the C++ API's (torch/python.h, torch/all.h), so an unmigrated #include finds its header
# and fails on torch's own TORCH_TARGET_VERSION guard instead of "No such file".
TORCH_INCLUDES: tuple[SystemInclude, ...] = ((TORCH_ROOT, "include"), (TORCH_ROOT, "include/torch/csrc/api/include"))
# The toolkit's headers (cuda_fp16.h, cuda_runtime.h, component headers such as curand.h) and
# CCCL's, where CUDA 13 keeps libcu++, CUB and Thrust. nvcc adds them to .cu units itself.
CUDA_INCLUDES: tuple[SystemInclude, ...] = ((CUDA_ROOT, "include"), (CUDA_ROOT, "include/cccl"))
DEFAULT_STANDARD = "17"  # the CMake helper's floor for C++ and CUDA


@dataclass(frozen=True)
class TranslationUnit:
    """One source file as the build compiles it."""

    path: Path  # absolute, inside the checkout
    source: str  # relative to the checkout, POSIX spelling: "csrc/scale.cu"
    language: str  # "cxx" (the host C++ compiler) or "cuda" (nvcc)
    include_dirs: tuple[Path, ...] = ()  # the unit's own -I directories (absolute), in order
    defines: tuple[str, ...] = ()  # NAME or NAME=VALUE, besides TORCH_TARGET_VERSION / Py_LIMITED_API
    extension: str | None = None  # helper backend: the extension module it is part of
    origin: str = "recipe"  # "recipe" or "compile-commands" (the last build's)
    std: str | None = None  # the -std= the build compiles it with (c++17, gnu++20); None: the backend's default
    flags: tuple[str, ...] = ()  # the recipe's extra compiler flags for its language (helper: cxx-flags / cuda-flags)
    # helper backend: the system include dirs the build gives it, in order (None: check's default for the backend)
    system_includes: tuple[SystemInclude, ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "language": self.language, "include_dirs": [str(d) for d in self.include_dirs],
            "defines": list(self.defines), "extension": self.extension, "origin": self.origin, "std": self.std,
            "flags": list(self.flags),
        }


class UnitShape(NamedTuple):
    """How one language's units of an extension (or recipe) are compiled, besides their sources."""

    defines: tuple[str, ...]
    std: str | None
    flags: tuple[str, ...] = ()
    system_includes: tuple[SystemInclude, ...] | None = None


def helper_standards(dep: Dependency, ext: Extension) -> tuple[str, str]:
    """(C++, CUDA) language standard numbers of a helper extension: C++ from cxx-std, else the
    recipe's -DCMAKE_CXX_STANDARD, else 17; CUDA from cuda-std, else cxx-std, else 17."""
    cxx = ext.cxx_std or _cmake_args_standard(dep) or DEFAULT_STANDARD
    return cxx, ext.cuda_std or ext.cxx_std or DEFAULT_STANDARD


def helper_shape(dep: Dependency, ext: Extension, language: str) -> UnitShape:
    """The compile model of a helper extension's ``language`` units (what the build runs and
    `check` preprocesses): every unit of a CUDA extension sees USE_CUDA; C++ units are gnu++N
    (CMake's default extensions) with cxx-flags, CUDA units c++N with cuda-flags; C++ units of
    a CUDA extension see the toolkit's headers."""
    defines = (*ext.defines, "USE_CUDA") if ext.language == CUDA else ext.defines
    cxx_std, cuda_std = helper_standards(dep, ext)
    if language == CUDA:
        return UnitShape(defines, f"c++{cuda_std}", ext.cuda_flags, TORCH_INCLUDES)
    includes = TORCH_INCLUDES + (CUDA_INCLUDES if ext.language == CUDA else ())
    return UnitShape(defines, f"gnu++{cxx_std}", ext.cxx_flags, includes)


def compile_commands_path(state_dir: Path, dep: str) -> Path:
    """The compile commands (a JSON compilation database: a list of {directory, file,
    arguments}) of the dependency's last build in the workspace whose state is ``state_dir``:
    ``<cache>/workspaces/<digest>/compdb/<dep>.json`` (builder.evidence.workspace_records),
    written only by this machine's build. Not ``.assemble/``: a compilation database committed
    there could name fewer units, or other flags, and `check` would call CLEAN what it never read."""
    from assembler.builder.evidence import workspace_records

    return workspace_records(state_dir.parent) / COMPDB_DIR / f"{dep}.json"


def language_of(path: str | Path) -> str:
    return CUDA if Path(path).suffix in CUDA_SUFFIXES else CXX


def translation_units(workspace: Workspace, dep: Dependency, checkout: Path | None = None) -> list[TranslationUnit]:
    """Every translation unit ``dep``'s recipe builds from ``checkout`` (default forks/<dep>),
    in recipe order, each once. Raises InputError naming the deps.toml line of a source or
    include dir that is missing from the checkout, or the recipe when its units are unknown;
    LinkOutOfTree when a link in the checkout leads out of it (``builder.links``)."""
    root = (checkout or workspace.fork_path(dep)).resolve()
    if not root.is_dir():
        raise InputError(
            f"{dep.name}: no checkout at {root}",
            hint=f"run `assemble checkout {dep.name}` first",
        )
    links.refuse_escaping(workspace.root, dep.name, root)  # what a unit includes is read through them
    recipe = dep.build
    if backends.for_dep(dep).from_extensions:
        return _helper_units(workspace, dep, root)
    if recipe.sources:
        return _recipe_units(workspace, dep, root)
    compdb = compile_commands_path(workspace.state_dir, dep.name)
    if compdb.is_file():
        return _compdb_units(compdb, dep, root)
    keys = ("deps", dep.name, "build")
    raise InputError(
        f"{value_position(workspace.manifest_path, keys)}: {'.'.join(keys)}: the {recipe.backend} backend's "
        "translation units are unknown: the recipe names no sources and no build of it in this workspace has recorded "
        "its compile commands on this machine",
        hint=f'add sources = ["csrc/*.cu", ...] (with include-dirs and defines) to [deps.{dep.name}.build], '
             f"or build it once (`assemble build --only {dep.name}`) so its compile commands are recorded",
    )


def _cmake_args_standard(dep: Dependency) -> str | None:
    """N of the last ``-DCMAKE_CXX_STANDARD=N`` in the recipe's cmake-args."""
    standard = None
    for arg in dep.build.cmake_args:
        match = re.fullmatch(r"-DCMAKE_CXX_STANDARD(?::\w+)?=(\d+)", arg)
        if match:
            standard = match.group(1)
    return standard


def cmake_standard(dep: Dependency, language: str) -> str:
    """The -std= a dependency's own CMake (which includes the helper) compiles ``language``
    sources with, as far as the recipe says: C++ takes ``-DCMAKE_CXX_STANDARD=N`` from cmake-args
    (default 17) with CMake's GNU extensions (gnu++N); CUDA c++17 (nvcc knows no gnu++)."""
    if language == CUDA:
        return f"c++{DEFAULT_STANDARD}"
    return f"gnu++{_cmake_args_standard(dep) or DEFAULT_STANDARD}"


def _helper_units(workspace: Workspace, dep: Dependency, root: Path) -> list[TranslationUnit]:
    """The helper backend's units: each extension's sources with its include dirs, in the
    compile model :func:`helper_shape` gives its language."""
    units: list[TranslationUnit] = []
    seen: set[Path] = set()
    keys = ("deps", dep.name, "build", "extensions")
    for index, ext in enumerate(dep.build.extensions):
        includes = tuple(_include_dir(workspace, root, (*keys, "include-dirs"), item, index)
                         for item in ext.include_dirs)
        units += _units(workspace, root, keys, ext.sources, index, seen, includes,
                        functools.partial(helper_shape, dep, ext), ext.name)
    return units


def _recipe_units(workspace: Workspace, dep: Dependency, root: Path) -> list[TranslationUnit]:
    """The ``sources`` of a recipe the dependency's own build compiles: the recipe's include dirs
    and defines (CUDA units see USE_CUDA), the standard its backend says (``Backend.unit_std``)."""
    keys = ("deps", dep.name, "build")
    recipe = dep.build
    backend = backends.for_dep(dep)
    includes = tuple(_include_dir(workspace, root, (*keys, "include-dirs"), item) for item in recipe.include_dirs)

    def shape(language: str) -> UnitShape:
        defines = (*recipe.defines, "USE_CUDA") if language == CUDA else recipe.defines
        return UnitShape(defines, backend.unit_std(dep, language))

    return _units(workspace, root, keys, recipe.sources, None, set(), includes, shape, None)


def _units(workspace: Workspace, root: Path, keys: tuple[str, ...], patterns: tuple[str, ...], index: int | None,
           seen: set[Path], includes: tuple[Path, ...], shape: Callable[[str], UnitShape],
           extension: str | None) -> list[TranslationUnit]:
    """One unit per file ``patterns`` name that is not in ``seen`` (which grows), in order."""
    units: list[TranslationUnit] = []
    for pattern in patterns:
        for path in _sources(workspace, root, (*keys, "sources"), pattern, index):
            if path in seen:
                continue
            seen.add(path)
            language = language_of(path)
            model = shape(language)
            units.append(TranslationUnit(path, path.relative_to(root).as_posix(), language, includes,
                                         tuple(model.defines),
                                         extension, std=model.std, flags=model.flags,
                                         system_includes=model.system_includes))
    return units


def _sources(workspace: Workspace, root: Path, keys: tuple[str, ...], pattern: str,
             index: int | None = None) -> list[Path]:
    """The files ``pattern`` names in the checkout (a glob when it holds * ? or [): a glob enters
    no directory link (``manifest.globs.expand``), and a file reached through links must stay in
    the checkout (``builder.links``)."""
    if GLOB_CHARS.isdisjoint(pattern):
        matches = [pattern]
    else:
        try:
            matches = expand(root, pattern)
        except ValueError as error:
            raise _missing(workspace, root, keys, pattern, index, str(error)) from None
    resolved = []
    for match in matches:
        where = links.resolve(root, match)
        if where.path is None:
            raise _missing(workspace, root, keys, pattern, index, f"{match} leads out of the checkout ({where.why})")
        if (root / where.path).is_file():
            resolved.append(root / match)
    if not resolved:
        what = "matches no file" if not GLOB_CHARS.isdisjoint(pattern) else "does not exist"
        raise _missing(workspace, root, keys, pattern, index, f"{pattern} {what} in {root}")
    return resolved


def _include_dir(workspace: Workspace, root: Path, keys: tuple[str, ...], item: str, index: int | None = None) -> Path:
    where = links.resolve(root, item)
    if where.path is None:
        raise _missing(workspace, root, keys, item, index,
                       f"include dir {item} leads out of the checkout ({where.why})")
    if not (root / where.path).is_dir():
        raise _missing(workspace, root, keys, item, index, f"include dir {item} is not a directory in {root}")
    return root / item


class RecipePathError(InputError):
    """A path a build recipe names that the checkout does not have as the recipe needs it
    (missing, matching nothing, not a directory, leading out of the checkout), reported at its
    line in deps.toml: the one error for every backend, `build --plan` and `check`."""

    def __init__(self, manifest: Path, keys: tuple[str, ...], value: str, problem: str,
                 index: int | None = None) -> None:
        where = value_position(manifest, keys, value, index)
        super().__init__(
            f"{where}: {'.'.join(keys)}: {problem}",
            hint="fix the path in deps.toml (relative to the checkout); if it lives in a submodule, list that "
                 "submodule in the dependency's submodules",
        )


def _missing(workspace: Workspace, root: Path, keys: tuple[str, ...], value: str, index: int | None,
             problem: str) -> InputError:
    return RecipePathError(workspace.manifest_path, keys, value, problem, index)


def _compdb_units(compdb: Path, dep: Dependency, root: Path) -> list[TranslationUnit]:
    """Units from the last build's compile commands: its -I/-isystem directories and -D defines
    (less the dependency-wide ones, which the current manifest sets)."""
    try:
        entries = json.loads(compdb.read_text())
        if not isinstance(entries, list):
            raise ValueError("not a list")
    except (OSError, ValueError) as error:
        raise InputError(f"{compdb}: unreadable compile commands ({error})",
                         hint=f"delete it and build {dep.name} again, or add sources to its recipe") from None
    units: list[TranslationUnit] = []
    seen: set[Path] = set()
    for entry in entries:
        if not isinstance(entry, dict) or "file" not in entry:
            continue
        directory = Path(str(entry.get("directory", root)))
        path = (directory / str(entry["file"])).resolve()
        if not path.is_relative_to(root) or path in seen or not path.is_file():
            continue  # generated files (the PyInit stub, soname stand-ins) are not the dependency's
        seen.add(path)
        arguments = entry.get("arguments")
        args = ([str(a) for a in arguments] if isinstance(arguments, list)
                else shlex.split(str(entry.get("command", ""))))
        includes, defines, std = _flags(args, directory)
        units.append(TranslationUnit(
            path, path.relative_to(root).as_posix(), language_of(path), includes, defines, origin="compile-commands",
            std=std,
        ))
    if not units:
        raise InputError(f"{compdb}: no compile command of {dep.name} compiles a file of its checkout",
                         hint=f"add sources to [deps.{dep.name}.build] in deps.toml")
    return units


_INCLUDE_FLAGS = ("-I", "-isystem", "-iquote", "--include-path", "-idirafter")
_DEFINE_FLAGS = ("-D", "--define-macro")


def _flags(args: list[str], directory: Path) -> tuple[tuple[Path, ...], tuple[str, ...], str | None]:
    """-I/-isystem/-iquote directories, -D defines and the -std= of one compile command, in
    order; nvcc's long spellings and -Xcompiler pass-throughs are understood."""
    includes: list[Path] = []
    defines: list[str] = []
    std: str | None = None
    expanded: list[str] = []
    tokens = iter(args)
    for token in tokens:
        if token in ("-Xcompiler", "--compiler-options"):
            expanded.extend(next(tokens, "").split(","))
        elif token.startswith(("-Xcompiler=", "--compiler-options=")):
            expanded.extend(token.split("=", 1)[1].split(","))
        else:
            expanded.append(token)
    tokens = iter(expanded)
    for token in tokens:
        if token.startswith(("-std=", "--std=")):
            std = token.split("=", 1)[1]
            continue
        if token in ("-std", "--std"):
            std = next(tokens, None)
            continue
        for flag, bucket in [*((f, "I") for f in _INCLUDE_FLAGS), *((f, "D") for f in _DEFINE_FLAGS)]:
            if token == flag:
                value = next(tokens, "")
            elif token.startswith(flag + "=") and flag.startswith("--"):
                value = token.split("=", 1)[1]
            elif (token.startswith(flag) and not flag.startswith("--") and len(token) > len(flag)
                  and flag in ("-I", "-D")):
                value = token[len(flag):]
            else:
                continue
            if bucket == "I" and value:
                path = Path(value) if Path(value).is_absolute() else directory / value
                if path not in includes:
                    includes.append(path)
            elif bucket == "D" and value and value.split("=", 1)[0] not in GLOBAL_DEFINES and value not in defines:
                defines.append(value)
            break
    return tuple(includes), tuple(defines), std
