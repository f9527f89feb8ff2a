"""What one build is made of, shared by the builder and its backends: the toolchain, the
build's context and one dependency's request. Its own module, below both (``builder.py``
calls the backends, which take these types), so the imports point one way (#22)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from assembler.builder.artifact_keys import ArtifactStore, KeyParts
from assembler.manifest import Bundle, Dependency
from assembler.toolchain.cuda import CudaToolkit
from assembler.toolchain.sccache import CompilerCache
from assembler.toolchain.torchenv import BuildEnv

if TYPE_CHECKING:
    from assembler.store import SharedStore


@dataclass(frozen=True)
class Toolchain:
    """What every dependency of one build is compiled with."""

    cuda: CudaToolkit
    env: BuildEnv
    cxx: str  # the host C++ compiler's --version line

    def versions(self, with_cuda: bool) -> tuple[tuple[str, str], ...]:
        tools = [("c++", self.cxx), ("cmake", self.env.cmake), ("ninja", self.env.ninja),
                 ("scikit-build-core", self.env.scikit_build_core)]
        if with_cuda:
            tools.append(("nvcc", self.cuda.release))
            tools.extend(sorted(self.cuda.packages.items()))
        return tuple(tools)



@dataclass(frozen=True)
class BuildContext:
    state_dir: Path  # <workspace>/.assemble: build trees and logs
    artifacts: Path  # <artifacts>/<dep>/
    store: ArtifactStore
    toolchain: Toolchain
    bundle: Bundle
    compiler_cache: CompilerCache | None = None  # sccache, one server per dependency build (toolchain.sccache)
    shared: SharedStore | None = None  # [cache] artifacts: the store runners share (assembler.store)


@dataclass(frozen=True)
class BuildRequest:
    dep: Dependency
    checkout: Path
    head: str
    dirty: bool
    series_head: str | None  # what applying the series produced; HEAD differs when commits were added
    parts: KeyParts
    archs: tuple[str, ...]
    cuda: bool  # nvcc takes part (the backend says)
    # what this dependency compiles with: the build's, its CUDA with its cuda-components
    toolchain: Toolchain | None = None

    @property
    def key(self) -> str:
        return self.parts.digest()

    @property
    def backend(self) -> str:
        return self.dep.build.backend
