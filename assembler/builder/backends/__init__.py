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
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from assembler.manifest import Dependency

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
    name: str

    def prepare(self, ctx: BuildContext, dep: Dependency, checkout: Path) -> Prepared:
        """The key contribution of ``dep``'s recipe (raises InputError for a recipe that cannot build)."""
        ...

    def build(self, ctx: BuildContext, request: BuildRequest, jobs: int, work: Work) -> None:
        """Compile with ``jobs`` compiler processes, fill ``work.files`` and write ``work.compdb``;
        raises BuildFailure."""
        ...


def get(name: str) -> Backend:
    from assembler.builder.backends.cmake import CMakeBackend
    from assembler.builder.backends.helper import HelperBackend
    from assembler.builder.backends.setuptools import SetuptoolsBackend

    backends: dict[str, Backend] = {"helper": HelperBackend(), "cmake": CMakeBackend(), "setuptools": SetuptoolsBackend()}
    return backends[name]


def for_dep(dep: Dependency) -> Backend:
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
