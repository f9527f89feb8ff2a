"""What a build's output says about its progress, one line at a time.

Two kinds of line mark a translation unit (or a link) done:

- ninja's status line ``[k/N] what``: the helper and cmake backends (CMake's ninja through
  scikit-build-core) and ``torch.utils.cpp_extension`` (its own ``build.ninja``, run with
  ``-v``, so ``what`` is the command). Off a terminal ninja prints it when the edge finishes, so
  ``k`` counts finished steps;
- the compiler command setuptools prints before each compile when it builds without ninja
  (``use_ninja=False``): the unit before it is done; there is no total.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")
# CMake's descriptions: "Building CUDA object CMakeFiles/x.dir/.../scale.cu.o", "Linking CXX shared module x.abi3.so"
CMAKE_STEP = re.compile(r"^(Building \w+ object|Linking \w+ [\w ]+?) (\S+)$")
COMPILERS = frozenset({"c++", "g++", "gcc", "cc", "clang", "clang++", "nvcc", "sccache", "ccache"})


@dataclass(frozen=True)
class Step:
    """One step of a build seen in its output: ``done`` of ``total`` (None: not counted), and
    what the step made, short (``scale.cu``, ``link _scalekit_C.abi3.so``)."""

    done: int | None
    total: int | None
    unit: str


def ninja_step(line: str) -> Step | None:
    """``[k/N] ...`` as a Step, else None."""
    match = NINJA_STEP.match(line)
    if match is None:
        return None
    return Step(int(match.group(1)), int(match.group(2)), _unit(match.group(3)))


def compile_command(line: str) -> str | None:
    """The source a printed compiler command compiles (``gcc ... -c csrc/a.cpp -o a.o`` ->
    ``a.cpp``), else None: what setuptools without ninja says before each unit."""
    words = _split(line)
    if not words or PurePosixPath(words[0]).name not in COMPILERS or "-c" not in words:
        return None
    return _unit(line)


def _unit(what: str) -> str:
    """What a step made, short: the source it compiled, or ``link NAME``."""
    cmake = CMAKE_STEP.match(what)
    if cmake is not None:
        name = PurePosixPath(cmake.group(2)).name
        return f"link {name}" if cmake.group(1).startswith("Linking") else name.removesuffix(".o").removesuffix(".obj")
    words = _split(what)
    for at, word in enumerate(words[:-1]):  # cpp_extension's commands may say -c twice: -c -c a.cpp
        if word == "-c" and not words[at + 1].startswith("-"):
            return PurePosixPath(words[at + 1]).name
    if "-o" in words:
        at = words.index("-o") + 1
        if at < len(words):
            return f"link {PurePosixPath(words[at]).name}"
    return what[:60]


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:  # an unbalanced quote in what a tool printed
        return line.split()
