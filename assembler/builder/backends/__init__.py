"""Build backends: how one dependency's checkout becomes the files of its artifact.

Three backends sit behind one small protocol, picked by ``[deps.X.build] backend``:

- ``helper``: assembler's CMake helper compiles the recipe's ``extensions`` (a library with no
  build of its own, or one whose build we do not want);
- ``cmake``: the dependency's own CMakeLists.txt (``cmake-dir``), which includes the helper;
- ``setuptools``: the dependency's own setup.py/pyproject.toml (``torch.utils.cpp_extension``),
  built without isolation in the torch build environment with our flags injected.

Each says what goes into the artifact key (``prepare``) and turns a prepared request into the
files of an artifact (``build``), writing the compile commands it ran to ``Work.compdb``
(``builder.units.compile_commands_path``: the user's cache, never the workspace). The common
steps (cache, store, record, packing) stay in ``builder``; which translation units a recipe
compiles (for `assemble check` and `build --plan`) is ``builder.units``, which reads the recipe
or those compile commands.

Every other question about a backend (where its units come from, their default standard, the
modules it names, whether CUDA takes part...) is a member of :class:`Backend`, answered by its
module: nothing outside this package compares a backend's name. The backend of a
``BackendName`` is the module of that name here (its ``BACKEND``, :func:`get`), so a new backend
is its module, a member of ``manifest.model.BackendName`` and a test.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from assembler.manifest import Dependency
from assembler.manifest.model import BackendName, BuildRecipe

if TYPE_CHECKING:
    from assembler.builder.request import BuildContext, BuildRequest

RunLogged = Callable[[list[str], Path, dict[str, str]], int]


class BuildFailure(Exception):
    """The backend's build failed. ``error`` says what, when the log's tail would not."""

    def __init__(self, error: str | None = None) -> None:
        super().__init__(error or "build failed (see the log)")
        self.error = error


@dataclass(frozen=True)
class Prepared:
    """What a backend contributes to the artifact key, computed without building."""

    recipe: str  # digest of everything the backend generates or injects from the recipe
    uses_cuda: bool  # nvcc takes part (or may: a dependency's own build decides)
    tools: tuple[tuple[str, str], ...] = ()  # backend-specific tool versions (setuptools, ...)


@dataclass(frozen=True)
class Work:
    """Where one build writes: its private trees, the artifact's files, the compile commands."""

    tree: Path  # <workspace>/.assemble/build/<dep>/
    files: Path  # fill with what the dependency contributes to the wheel
    compdb: Path  # units.compile_commands_path: <cache>/workspaces/<digest>/compdb/<dep>.json
    run: RunLogged  # run a command with its output in the dependency's log; returns the exit status


class Backend(Protocol):
    """One backend: how a recipe of its name builds, and what the rest of assembler may ask of it."""

    name: BackendName
    # Its units are the recipe's [[extensions]] and it gives each its whole compile model (the
    # helper); else the dependency's own build decides, described by the recipe's sources or the
    # compile commands its last build recorded (a recipe path is then checked by that build).
    from_extensions: bool
    # A unit whose compile model names no -std gets torch.utils.cpp_extension's default (c++20
    # since torch 2.10), not the CMake helper's floor (c++17).
    cpp_extension_std: bool
    # The extension module's PyInit_ comes from the dependency's sources (setup.py's Extension
    # looks for it), not from the stub the CMake helper generates.
    pyinit_in_sources: bool
    # The dependency's own setup.py is what builds (in project-dir): migrate makes it ask for abi3
    # (py_limited_api), as a person would after the C++ is stable (migration/setup_py.py).
    setup_py_builds: bool

    def uses_cuda(self, recipe: BuildRecipe) -> bool:
        """Whether nvcc takes part (or may: a dependency's own build decides)."""
        ...

    def nothing_to_build(self, recipe: BuildRecipe) -> bool:
        """The recipe names nothing to build (`assemble add` leaves a helper recipe empty)."""
        ...

    def extension_modules(self, dep: Dependency) -> tuple[str, ...]:
        """The Python extension modules the recipe names before any build (one stub compile each)."""
        ...

    def unit_std(self, dep: Dependency, language: str) -> str | None:
        """The -std= of the recipe's ``sources`` of ``language`` (``cxx`` or ``cuda``); None: the
        default (:attr:`cpp_extension_std`). Not asked of a backend :attr:`from_extensions`."""
        ...

    def prepare(self, ctx: BuildContext, dep: Dependency, checkout: Path) -> Prepared:
        """The key contribution of ``dep``'s recipe (raises InputError for a recipe that cannot build)."""
        ...

    def build(self, ctx: BuildContext, request: BuildRequest, jobs: int, work: Work) -> None:
        """Compile with ``jobs`` compiler processes, fill ``work.files`` and write ``work.compdb``;
        raises BuildFailure."""
        ...


@functools.cache
def get(name: BackendName) -> Backend:
    """The one registry: ``BackendName.X`` is the ``BACKEND`` of ``assembler.builder.backends.<x>``."""
    module = importlib.import_module(f"{__name__}.{BackendName(name).value}")
    backend = cast(Backend, module.BACKEND)
    assert backend.name == name, f"{module.__name__}.BACKEND is named {backend.name!r}"
    return backend


def for_dep(dep: Dependency) -> Backend:
    """The backend of ``dep``'s recipe."""
    return get(dep.build.backend)


def torch_target_version(torch_target: str) -> str:
    """MAJOR.MINOR to TORCH_TARGET_VERSION's 64-bit form as torch writes it: 2.10 -> 0x020A000000000000."""
    major, minor = (int(part) for part in torch_target.split("."))
    return f"0x{(major << 56) | (minor << 48):016X}"


def limited_api_version(python_abi: str) -> str:
    """3.9 -> 0x03090000, the Py_LIMITED_API value of an abi3 floor."""
    major, minor = (int(part) for part in python_abi.split("."))
    return f"0x{major:02X}{minor:02X}0000"


def stable_defines(dep: Dependency, python_abi: str) -> tuple[str, ...]:
    """The defines every compile of ``dep`` gets: the torch and Python floors, then the recipe's."""
    return (f"TORCH_TARGET_VERSION={torch_target_version(dep.torch_target)}",
            f"Py_LIMITED_API={limited_api_version(python_abi)}", *dep.build.defines)


def refuse_escaping_links(ctx: BuildContext, request: BuildRequest) -> None:
    """The second line after the backend's tools ran and before their output becomes the
    artifact: still no link in the checkout that leads out of it (``builder.links``; one made
    during the build, or since the check before it). Raises BuildFailure naming them, so no
    artifact is published that could hold what they point at."""
    from assembler.builder import links

    found = links.escaping_links(request.checkout.resolve())
    if found:
        error = links.LinkOutOfTree(request.dep.name, links.shown(ctx.state_dir.parent, request.checkout), found)
        raise BuildFailure(f"{error.message}; hint: {error.hint}" if error.hint else error.message)


def write_compdb(target: Path, entries: list[dict[str, object]]) -> None:
    """``Work.compdb`` (in the user's cache, units.compile_commands_path): [{directory, file,
    arguments}], atomically; `check` reads it for a recipe without sources."""
    from assembler.fsutil import atomic_write

    atomic_write(target, json.dumps(entries, indent=1) + "\n")


# What could silently change a build: CMake, pip and setuptools settings, compiler flags, the
# parallelism and architectures we set, a foreign Python, another toolkit's hints.
SCRUBBED_ENV = frozenset({
    "CMAKE_ARGS", "CMAKE_GENERATOR", "CMAKE_TOOLCHAIN_FILE", "CMAKE_PREFIX_PATH", "CMAKE_BUILD_PARALLEL_LEVEL",
    "VIRTUAL_ENV", "Torch_DIR", "TORCH_CUDA_ARCH_LIST", "CUDAARCHS", "MAX_JOBS",
    "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CUDAFLAGS", "TORCH_EXTENSIONS_DIR", "USE_NINJA",
})
SCRUBBED_PREFIXES = ("PYTHON", "SKBUILD_", "PIP_", "SETUPTOOLS_", "DISTUTILS_", "NVCC_")


def scrubbed_environment(base: dict[str, str]) -> dict[str, str]:
    """``base`` without :data:`SCRUBBED_ENV` and the :data:`SCRUBBED_PREFIXES` variables."""
    return {k: v for k, v in base.items() if k not in SCRUBBED_ENV and not k.startswith(SCRUBBED_PREFIXES)}
