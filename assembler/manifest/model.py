"""Typed view of deps.toml. Built only by ``manifest.load``, which validates everything once.

The records are NamedTuples (immutable, typed, ``_replace`` for a changed copy), not frozen
dataclasses: every command loads them, and the dataclasses module with its generated methods
costs ~15 ms of the 100 ms start-up budget (benchmarks/startup.py)."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from assembler.errors import ManifestError

CXX, CUDA = "cxx", "cuda"  # the languages of a translation unit or an extension (language = ... in deps.toml)
LANGUAGES = (CXX, CUDA)


def arch_specific(arch: str) -> bool:
    """Whether a cuda-archs entry (9.0a, 10.0f) is an arch-specific target: its PTX runs on no
    other GPU family, so by default only its SASS is shipped (``ptx`` asks for the PTX too)."""
    return arch.endswith(("a", "f"))
# What cuda-components may name: the optional libraries of NVIDIA's cuda-toolkit wheel (its
# extras, which pin each library's wheel to a CUDA release); nvcc, CCCL and the runtime are in
# every toolkit already.
CUDA_COMPONENTS = ("cublas", "cufft", "cufile", "cupti", "curand", "cusolver", "cusparse", "npp", "nvfatbin",
                   "nvjitlink", "nvjpeg", "nvml", "nvptxcompiler", "nvrtc", "nvtx", "profiler", "culibos")


class Extension(NamedTuple):
    """One compiled module in a dependency's build recipe."""

    name: str
    sources: tuple[str, ...]
    language: str  # CXX or CUDA
    include_dirs: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()  # beyond torch_cpu (and torch_cuda, which every CUDA extension links)
    cxx_flags: tuple[str, ...] = ()  # extra flags of its C++ units (host compiler)
    cuda_flags: tuple[str, ...] = ()  # extra flags of its .cu units (nvcc)
    cxx_std: str | None = None  # "17", "20", "23": -std of its C++ units (gnu++N); None: the recipe's cmake-args, else 17
    cuda_std: str | None = None  # "17", "20": -std of its .cu units (c++N); None: cxx-std, else 17
    ptx: bool = False  # also ship PTX for arch-specific targets (9.0a, 10.0a); by default SASS only


class BackendName(StrEnum):
    """The build backends a recipe names (``[deps.X.build] backend``); each is a module of
    assembler/builder/backends/ behind one protocol. A str: a recipe compares and prints as its name."""

    HELPER = "helper"  # our CMake helper, driven by the recipe's extensions
    CMAKE = "cmake"  # the dependency's own CMakeLists.txt (cmake-dir), which includes the helper
    SETUPTOOLS = "setuptools"  # the dependency's own setup.py / pyproject.toml (project-dir)


BACKENDS = tuple(BackendName)
# Environment variables the build sets itself (toolchain, flags, parallelism, interpreter):
# a recipe's build-env may not name them, exactly or by prefix.
RESERVED_ENV = frozenset({
    "PATH", "HOME", "CC", "CXX", "CUDACXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CUDAFLAGS",
    "CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDAARCHS", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS",
    "TORCH_TARGET_VERSION", "VIRTUAL_ENV", "TMPDIR", "SOURCE_DATE_EPOCH",
    "CMAKE_ARGS", "CMAKE_GENERATOR", "CMAKE_TOOLCHAIN_FILE", "CMAKE_PREFIX_PATH", "CMAKE_BUILD_PARALLEL_LEVEL",
    "TORCH_EXTENSIONS_DIR", "TORCH_DONT_CHECK_COMPILER_ABI",
})
RESERVED_ENV_PREFIXES = ("LD_", "PYTHON", "NVCC_", "PIP_", "SKBUILD_", "SETUPTOOLS_", "DISTUTILS_", "ASSEMBLE")


def reserved_env(name: str) -> bool:
    """Whether ``name`` is one of the variables the build itself controls."""
    return name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES)


class BuildRecipe(NamedTuple):
    """How a dependency becomes an artifact, by one of three backends: ``helper`` (our CMake
    helper driven by ``extensions``), ``cmake`` (the dependency's own CMakeLists.txt in
    ``cmake-dir``, which includes the helper) or ``setuptools`` (the dependency's own setup.py
    or pyproject.toml in ``project-dir``, built without isolation in the torch build env).

    ``sources``, ``include-dirs`` and ``defines`` describe a cmake/setuptools build's
    translation units for `check` and `build --plan` (the defines are also injected into the
    build); ``build-env`` is extra environment for the dependency's own build."""

    extensions: tuple[Extension, ...] = ()
    python_packages: tuple[str, ...] = ()
    data: tuple[str, ...] = ()
    cmake_dir: str | None = None
    cmake_args: tuple[str, ...] = ()
    cuda_archs: tuple[str, ...] | None = None
    backend: BackendName = BackendName.HELPER
    project_dir: str = "."
    sources: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    build_env: tuple[tuple[str, str], ...] = ()  # (name, value), sorted by name
    ptx: bool = False  # cmake/setuptools: also ship PTX for arch-specific targets (helper: per extension)

    def to_dict(self) -> dict[str, object]:
        """Every field, the extensions as dicts (what digests of a recipe are taken over)."""
        return {**self._asdict(), "extensions": [extension._asdict() for extension in self.extensions]}


class Profile(NamedTuple):
    """A reduced configuration of a dependency's own build (``[deps.X.profiles.NAME]``), for PR CI
    and developers who cannot wait for the full set: more defines, more build environment, a
    subset of the recipe's units or of its CUDA architectures. ``assemble build --profile NAME``
    applies it (``Dependency.with_profile``); the artifact key, the wheel's version label,
    assembler.json and the SBOM then say so, so a reduced wheel is never taken for a release."""

    name: str
    description: str | None = None
    defines: tuple[str, ...] = ()  # added to the recipe's (cmake/setuptools) or to every extension's (helper)
    build_env: tuple[tuple[str, str], ...] = ()  # cmake/setuptools: over the recipe's build-env, sorted by name
    sources: tuple[str, ...] | None = None  # entries of the recipe's sources kept (None: all of them)
    cuda_archs: tuple[str, ...] | None = None  # instead of the recipe's (or the bundle's)

    def apply(self, recipe: BuildRecipe) -> BuildRecipe:
        """``recipe`` reduced by this profile (load.py proved its sources a subset of the recipe's)."""
        archs = self.cuda_archs if self.cuda_archs is not None else recipe.cuda_archs
        env = tuple(sorted({**dict(recipe.build_env), **dict(self.build_env)}.items()))
        if recipe.backend != BackendName.HELPER:
            sources = recipe.sources if self.sources is None else self.sources
            return recipe._replace(defines=(*recipe.defines, *self.defines), build_env=env, sources=sources, cuda_archs=archs)
        kept = set(self.sources) if self.sources is not None else None
        extensions = tuple(
            ext._replace(defines=(*ext.defines, *self.defines),
                         sources=tuple(s for s in ext.sources if kept is None or s in kept))
            for ext in recipe.extensions)
        return recipe._replace(extensions=tuple(ext for ext in extensions if ext.sources), cuda_archs=archs)


class VerifySpec(NamedTuple):
    ops: tuple[str, ...] = ()
    smoke: str | None = None
    requires_cuda: bool = False


class Dependency(NamedTuple):
    name: str
    upstream: str | None
    source: str
    commit: str
    track: str
    submodules: tuple[str, ...]
    torch_target: str
    patches_dir: Path
    series: tuple[str, ...]
    build: BuildRecipe
    install: dict[str, str]
    verify: VerifySpec
    max_size: int | None = None  # [deps.X] max-size: bytes it may add to the wheel (compressed)
    cuda_components: tuple[str, ...] = ()  # [deps.X] cuda-components, sorted, with the bundle's
    profiles: tuple[Profile, ...] = ()  # [deps.X.profiles.NAME], in file order
    profile: str | None = None  # the profile ``build`` is reduced by (with_profile); None: the full build

    def profile_named(self, name: str) -> Profile | None:
        return next((profile for profile in self.profiles if profile.name == name), None)

    def with_profile(self, name: str | None) -> Dependency:
        """This dependency built on profile ``name``; a dependency without that profile builds
        in full (a bundle's smoke run reduces what its dependencies know how to reduce)."""
        profile = self.profile_named(name) if name is not None else None
        if profile is None:
            return self
        return self._replace(build=profile.apply(self.build), profile=profile.name)

    @property
    def builds_extensions(self) -> bool:
        """Whether its recipe compiles or installs shared objects (a wheel without any is missing it)."""
        return bool(self.build.extensions or self.build.cmake_dir or self.install)

    def verify_record(self) -> dict[str, object]:
        """Its [deps.X.verify] as the merged wheel's assembler.json carries it."""
        return {"ops": list(self.verify.ops), "smoke": self.verify.smoke, "requires_cuda": self.verify.requires_cuda,
                "builds_extensions": self.builds_extensions}

    @property
    def is_fork(self) -> bool:
        return self.upstream is not None and self.upstream != self.source

    @property
    def kind(self) -> str:
        """'fork' (source differs from upstream), 'upstream', or 'fork-only' (no upstream known)."""
        if self.upstream is None:
            return "fork-only"
        return "fork" if self.is_fork else "upstream"

    @property
    def upstream_url(self) -> str:
        """The repository rebase follows: upstream when given, else the source itself."""
        return self.upstream or self.source


class Bundle(NamedTuple):
    name: str
    version: str
    python_abi: str
    torch_target: str
    torch: str | None
    cuda_archs: tuple[str, ...]
    verify_torch: tuple[str, ...]
    max_wheel_size: int | None = None  # [bundle] max-wheel-size, bytes
    cuda_components: tuple[str, ...] = ()  # [bundle] cuda-components: every dependency's toolkit has them


class CacheConfig(NamedTuple):
    """``[cache]``: the compiler cache and the shared artifact store (``assembler.toolchain.sccache``,
    ``assembler.store``). The environment overrides it (ASSEMBLE_SCCACHE, ASSEMBLE_ARTIFACTS)."""

    compiler: str = "sccache"  # "sccache" or "none"
    remote: str | None = None  # sccache's shared cache: "redis://host:port/db"
    artifacts: str | None = None  # "file:///shared/dir" or "s3://bucket/prefix"
    s3_endpoint: str | None = None  # an S3-compatible endpoint (else AWS_ENDPOINT_URL, else AWS)


class Manifest(NamedTuple):
    path: Path
    bundle: Bundle
    mirrors: dict[str, str]
    deps: dict[str, Dependency]
    cache: CacheConfig = CacheConfig()

    @property
    def root(self) -> Path:
        return self.path.parent

    def with_profile(self, name: str | None) -> Manifest:
        """The manifest as ``build --profile NAME`` builds it: each dependency that defines the
        profile reduced by it, the others in full. A name no dependency defines is a mistake
        (a typo would otherwise build everything in full and take hours)."""
        if name is None:
            return self
        if not any(dep.profile_named(name) for dep in self.deps.values()):
            import difflib

            known = sorted({profile.name for dep in self.deps.values() for profile in dep.profiles})
            close = difflib.get_close_matches(name, known, n=1)
            fix = (f"did you mean '{close[0]}'? " if close else "") + (
                f"profiles defined: {', '.join(known)}" if known else
                f"define it in {self.path.name}: [deps.NAME.profiles.{name}] with defines, build-env, sources or "
                "cuda-archs (docs/guides/build-profiles.md)")
            raise ManifestError(f"{self.path}: no dependency defines a build profile named '{name}'", hint=fix)
        return self._replace(deps={key: dep.with_profile(name) for key, dep in self.deps.items()})

    def select(self, names: list[str] | None) -> list[Dependency]:
        """The dependencies named on the command line (all when none), each once, in manifest
        order: the order of the file is the order of work and of every report."""
        for name in names or ():
            if name not in self.deps:
                raise unknown_dep_error(self, name)
        wanted = set(names or self.deps)
        return [dep for name, dep in self.deps.items() if name in wanted]

    def resolve_url(self, url: str) -> str:
        """Apply [mirrors] (longest prefix wins, like git's insteadOf); relative local paths
        are taken from the manifest's directory."""
        best = max((p for p in self.mirrors if url.startswith(p)), key=len, default=None)
        if best is None:
            return url
        target = self.mirrors[best] + url[len(best) :]
        if "://" in target or target.startswith("/") or ":" in target.split("/")[0]:
            return target
        return str((self.root / target).resolve())


def unknown_dep_error(manifest: Manifest, name: str) -> ManifestError:
    """The error for a dependency name that deps.toml does not have, with the closest one."""
    import difflib

    close = difflib.get_close_matches(name, list(manifest.deps), n=1)
    fix = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(manifest.deps) or '(none)'}"
    return ManifestError(f"{manifest.path}: no dependency named '{name}'", hint=fix)


_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_size(text: str | int) -> int:
    """A size budget: '400MB', '321 MiB', '1.5GB' or a number of bytes -> bytes; ValueError otherwise."""
    if isinstance(text, bool) or (isinstance(text, int) and text < 0):
        raise ValueError(f"{text!r} is not a size")
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]i?b|b)?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"{text!r} is not a size (write e.g. 400MB, 321MiB or a number of bytes)")
    return int(float(match[1]) * _SIZE_UNITS[(match[2] or "").lower()])
