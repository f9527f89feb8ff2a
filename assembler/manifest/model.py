"""Typed view of deps.toml, and its keys (``Key``/``Table``, below the records): what each key
holds and means, from which ``manifest.load`` converts and validates everything once and
``manifest.schema`` generates the JSON Schema.

The records are NamedTuples (immutable, typed, ``_replace`` for a changed copy), not frozen
dataclasses: every command loads them, and the dataclasses module with its generated methods
costs ~15 ms of the 100 ms start-up budget (benchmarks/startup.py)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

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
    # "17", "20", "23": -std of its C++ units (gnu++N); None: the recipe's cmake-args, else 17
    cxx_std: str | None = None
    cuda_std: str | None = None  # "17", "20": -std of its .cu units (c++N); None: cxx-std, else 17
    ptx: bool = False  # also ship PTX for arch-specific targets (9.0a, 10.0a); by default SASS only


class BackendName(StrEnum):
    """The build backends a recipe names (``[deps.X.build] backend``); each is a module of
    assembler/builder/backends/ behind one protocol. A str: a recipe compares and prints as its name."""

    HELPER = "helper"  # our CMake helper, driven by the recipe's extensions
    CMAKE = "cmake"  # the dependency's own CMakeLists.txt (cmake-dir), which includes the helper
    SETUPTOOLS = "setuptools"  # the dependency's own setup.py / pyproject.toml (project-dir)


BACKENDS = tuple(BackendName)
# Which recipe keys each backend reads ([deps.X.build]); any other is a mistake worth an error,
# not a silent no-op. A backend added to BackendName names its keys here too (a test holds it).
BACKEND_KEYS: dict[BackendName, frozenset[str]] = {
    BackendName.HELPER: frozenset({"extensions", "python-packages", "data", "cmake-args", "cuda-archs", "backend"}),
    BackendName.CMAKE: frozenset({"cmake-dir", "cmake-args", "python-packages", "data", "cuda-archs", "backend",
                                  "sources", "include-dirs", "defines", "build-env", "ptx"}),
    BackendName.SETUPTOOLS: frozenset({"project-dir", "cuda-archs", "backend", "sources", "include-dirs", "defines",
                                       "build-env", "ptx"}),
}
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
            return recipe._replace(defines=(*recipe.defines, *self.defines), build_env=env, sources=sources,
                                   cuda_archs=archs)
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


# The keys of deps.toml: one Key per key of each table, with what it holds, its description
# (the JSON Schema's and the reference page's text) and the rules the loader checks for each
# value. load.py's one converter (_convert) does the per-key work from these: the type,
# required or default, unknown-key refusal with the closest name, every rule below, and the
# position of every error; the schema (schema.py) is generated from them. Rules between keys
# (a backend's keys, paths inside the checkout, flag allow-lists) stay hand-written in load.py.
# Adding a key: a Key here, the record's field above, and a test.

STRING, STRINGS, BOOL, SIZE, TABLE, TABLES, NAMED, ANY = (
    "string", "strings", "bool", "size", "table", "tables", "named", "any")
Problem = tuple[str, str]  # (what is wrong, the fix)

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")  # a dependency's name
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
TORCH_TARGET_RE = re.compile(r"^\d+\.\d+$")
ARCH_RE = re.compile(r"^\d+\.\d+[af]?$")
PROFILE_NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,31}$")  # a PEP 440 local version segment: +cu132.smoke
ENV_NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
DEFINE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(=[^;$\r\n]*)?$")  # no ; or $: CMake would split or expand them
LIBRARY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")  # a name for -l / find_library, never a path or a flag
CXX_STANDARDS = ("17", "20", "23")  # what cxx-std accepts (gcc and CMake know them all)
CUDA_STANDARDS = ("17", "20")  # what nvcc 12 and 13 accept as -std=c++N
SIZE_SCHEMA = {"anyOf": [{"type": "integer", "minimum": 0},
                         {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*([kKmMgG][iI]?[bB]|[bB])?\s*$"}]}
# A recipe path: relative, inside the checkout, and no CMake syntax (; $ " \ or a line break).
RELATIVE_SCHEMA = {"pattern": r'^[^/;$"\\\r\n][^;$"\\\r\n]*$', "not": {"pattern": r"(^|/)\.\.(/|$)"},
                   "$comment": "a relative path, without .. and without ; $ \" \\ or a line break"}
TEXT_SCHEMA = {"minLength": 1, "maxLength": 4096}  # values.MAX_VALUE_CHARS
ENV_SCHEMA = {"type": "object", "propertyNames": {"pattern": ENV_NAME_RE.pattern, "not": {"anyOf": [
    {"enum": sorted(RESERVED_ENV)},
    {"pattern": "^({})".format("|".join(re.escape(prefix) for prefix in RESERVED_ENV_PREFIXES))}]}},
    "additionalProperties": {"type": "string"}}


class Key(NamedTuple):
    """One key of a table of deps.toml."""

    name: str  # as written in deps.toml; the record's field is the name with '_' for '-'
    kind: str  # STRING, STRINGS (an array of them), BOOL, SIZE, TABLE, TABLES, NAMED (a table of TABLEs), ANY
    description: str  # one line, for the schema (editors' hover text) and the reference page
    default: object = None  # when the key is not written (None: no value)
    required: bool = False
    pattern: re.Pattern[str] | None = None  # what a value (each item) must match in full
    choices: tuple[str, ...] = ()  # the values allowed, when they are few
    bad: str = ""  # a value that fails pattern or choices: "{value} is not ..."
    fix: str = ""  # the hint for a value of the wrong type or one that fails pattern or choices
    check: Callable[[str], Problem | None] | None = None  # more rules per value (item)
    unique: bool = False  # STRINGS: no item twice
    table: Table | None = None  # TABLE, TABLES, NAMED: the table each value is
    schema: Mapping[str, object] = {}  # JSON Schema rules beyond the ones above (minItems, ...)

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")


class Table(NamedTuple):
    """A table of deps.toml: its keys, in the order the schema and the reference list them."""

    title: str  # [deps.NAME.build]
    ref: str  # its name among the schema's definitions
    description: str
    keys: tuple[Key, ...]
    schema: Mapping[str, object] = {}  # JSON Schema rules between keys (anyOf, if/else, ...)

    @property
    def names(self) -> set[str]:
        return {key.name for key in self.keys}


def _version_problem(value: str) -> Problem | None:
    """A PEP 440 version without a local label. Plain release numbers (``1.2.3``, the usual case)
    are valid as they stand; packaging is imported only for anything else (its import and
    patterns are ~3 ms of the start-up budget every command pays, benchmarks/startup.py)."""
    if "+" in value:
        return "a local version label is added at build time (+cuXYZ)", "drop the '+...' part"
    if all(part.isdigit() and part.isascii() for part in value.split(".")):
        return None
    from packaging.version import InvalidVersion, Version

    try:
        Version(value)
    except InvalidVersion:
        return f"{value!r} is not a PEP 440 version", 'write e.g. "2.13.0"'
    return None


def _torch_release_problem(value: str) -> Problem | None:
    from assembler.manifest.values import torch_release_problem

    return torch_release_problem(value)


def _component_problem(value: str) -> Problem | None:
    """A toolkit library beyond nvcc, CCCL and the runtime (the cuda-toolkit wheel's extras)."""
    if value in CUDA_COMPONENTS:
        return None
    import difflib

    close = difflib.get_close_matches(value, CUDA_COMPONENTS, n=1)
    base = " (part of every toolkit already)" if value in ("nvcc", "cccl", "cudart", "crt", "nvvm") else ""
    shown = repr(value if len(value) <= 80 else value[:80] + "...")
    return (f"{shown} is not a CUDA toolkit component{base}",
            (f"did you mean '{close[0]}'? " if close else "") + f"known: {', '.join(CUDA_COMPONENTS)}")


def _url_problem(value: str) -> Problem | None:
    """A repository URL assemble passes to git (values.url_problem)."""
    from assembler.manifest.values import shown, url_problem

    problem = url_problem(value)
    return None if problem is None else (
        f"{shown(value)} is not a repository URL: {problem}",
        "use an https://, http://, ssh://, git:// or file:// URL, user@host:path, or a local path")


def _track_problem(value: str) -> Problem | None:
    """A branch name git takes (git check-ref-format --branch)."""
    from assembler.manifest.refname import branch_problem
    from assembler.manifest.values import MAX_VALUE_CHARS, shown

    too_long = f"it is longer than {MAX_VALUE_CHARS} characters"
    problem = branch_problem(value) if len(value) <= MAX_VALUE_CHARS else too_long
    return None if problem is None else (
        f"{shown(value)} is not a valid branch name: {problem}",
        'name the upstream branch to follow, e.g. track = "main" (git check-ref-format --branch rules)')


def _submodule_problem(value: str) -> Problem | None:
    from assembler.manifest.values import relative_path_problem, shown

    problem = relative_path_problem(value)
    return None if problem is None else (f"{shown(value)} is not a submodule path: {problem}",
                                         "use the path from .gitmodules, relative to the checkout")


def _dependency_name_problem(name: str) -> Problem | None:
    """A dependency's name is also a branch, assemble/NAME, in its checkout."""
    from assembler.manifest.refname import branch_problem

    problem = branch_problem(name)
    if NAME_RE.match(name) and len(name) <= 100 and problem is None:
        return None
    return (f"{name[:100]!r} is not a valid dependency name" + (f" ({problem})" if problem else ""),
            "use at most 100 lowercase letters, digits, '.', '-' and '_' (no '..', not ending in '.' or '.lock')")


def _archs(description: str, **rules: Any) -> Key:
    return Key("cuda-archs", STRINGS, description, pattern=ARCH_RE, bad="{value} is not a CUDA architecture",
               fix='write e.g. cuda-archs = ["9.0a"]', **rules)


def _torch_target(description: str, default: str | None) -> Key:
    return Key("torch-target", STRING, description, default=default, pattern=TORCH_TARGET_RE,
               bad="{value} is not a MAJOR.MINOR torch version", fix='write e.g. torch-target = "2.10"')


def _components(description: str) -> Key:
    return Key("cuda-components", STRINGS, description, default=(), check=_component_problem, unique=True,
               schema={"uniqueItems": True, "items": {"enum": list(CUDA_COMPONENTS)}})


def _defines(description: str) -> Key:
    return Key("defines", STRINGS, f"-D definitions, NAME or NAME=VALUE (without ; or $){description}", default=(),
               pattern=DEFINE_RE, bad="{value} is not a NAME or NAME=VALUE define (without ; or $)",
               fix='write e.g. defines = ["MY_FLAG=1"]')


def _paths(name: str, description: str, **rules: Any) -> Key:
    """Paths in the checkout (load.py keeps them inside it: _relative_path)."""
    schema, default = rules.pop("schema", {}), rules.pop("default", ())
    return Key(name, STRINGS, description, default=default, schema={"items": RELATIVE_SCHEMA, **schema}, **rules)


def _standard(name: str, description: str, allowed: tuple[str, ...]) -> Key:
    """cxx-std / cuda-std: 17, "17", "c++17" or "gnu++17" (load.py reads them: _standard)."""
    spelled = [f"{prefix}{n}" for prefix in ("c++", "gnu++") for n in allowed]
    return Key(name, ANY, description, schema={"enum": [*map(int, allowed), *allowed, *spelled]})


_TORCH_RELEASE_SCHEMA = {"pattern": r"^\d+\.\d+\.\d+((a|b|rc)\d+|\.post\d+|\.dev\d+)*(\+[A-Za-z0-9.]+)?$"}
_COMPONENTS_TEXT = ("toolkit libraries beyond nvcc, CCCL and the runtime, by the names of the extras of NVIDIA's "
                    "cuda-toolkit wheel")
_URL_SCHEMA = {**TEXT_SCHEMA, "not": {"pattern": "^-"}}

BUNDLE_TABLE = Table("bundle", "bundle", "The merged wheel: its name, version and the floors every dependency builds "
                     "against.", (
    Key("name", STRING, "distribution name of the merged wheel", required=True,
        pattern=re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$"), bad="{value} is not a valid distribution name",
        fix="use letters, digits, '.', '-' and '_'"),
    Key("version", STRING, "the bundle's PEP 440 version; +cuXYZ is added at build time", required=True,
        check=_version_problem, schema={"minLength": 1, "not": {"pattern": r"\+"}}),
    Key("python-abi", STRING, "Py_LIMITED_API floor: 3.9 tags the wheel cp39-abi3", default="3.9",
        pattern=re.compile(r"^3\.\d+$"), bad="{value} is not a Python 3 MAJOR.MINOR version",
        fix='write e.g. python-abi = "3.9"'),
    _torch_target("TORCH_TARGET_VERSION floor (MAJOR.MINOR); a dependency may raise it", "2.10"),
    Key("torch", STRING, "the torch the extensions are compiled against (X.Y.Z)", check=_torch_release_problem,
        schema=_TORCH_RELEASE_SCHEMA),
    _archs("default CUDA architectures of CUDA sources, e.g. 9.0a (sm_90a)", default=()),
    Key("verify-torch", STRINGS, "torch releases `assemble verify` loads the wheel on (X.Y.Z each)", default=(),
        check=_torch_release_problem, schema={"items": _TORCH_RELEASE_SCHEMA}),
    Key("max-wheel-size", SIZE, "optional: `build` fails (exit 1) when the wheel is larger (400MB, 321MiB, 1.5GB or "
        "bytes)"),
    _components(_COMPONENTS_TEXT + ", for every dependency"),
))

CACHE_TABLE = Table("cache", "cache", "The compiler cache and the artifact store shared between runners (docs/ci.md).",
                    (
    Key("compiler", STRING, "every build's compiler launcher", default="sccache", choices=("sccache", "none"),
        bad='expected "sccache" or "none", got {value}',
        fix='write compiler = "sccache" (the default) or compiler = "none"'),
    Key("remote", STRING, "sccache's shared cache: redis://HOST:PORT/DB",
        pattern=re.compile(r"^rediss?://[^\s/]+(/\d+)?/?$"),
        bad="{value} is not a Redis URL",
        fix='write remote = "redis://HOST:PORT/DB" (S3, GCS, WebDAV: sccache\'s own SCCACHE_* variables)'),
    Key("artifacts", STRING, "the shared artifact store: file:///DIR or s3://BUCKET/PREFIX",
        pattern=re.compile(r"^(file:///\S*|s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/\S*)?)$"),
        bad="{value} is not a file:/// or s3:// store",
        fix='write artifacts = "file:///shared/dir" or "s3://bucket/prefix"',
        check=lambda value: ("/../ climbs out of the store's directory", "name the directory without ..")
        if "/../" in f"{value}/" else None),
    Key("s3-endpoint", STRING, "an S3-compatible endpoint, http(s)://HOST[:PORT] (else AWS_ENDPOINT_URL, else AWS)",
        pattern=re.compile(r"^https?://[^\s/]+/?$"), bad="{value} is not an http(s)://HOST[:PORT] endpoint",
        fix='write s3-endpoint = "http://127.0.0.1:9000"'),
))

VERIFY_TABLE = Table("deps.NAME.verify", "verify",
                     "What `assemble verify` checks where the wheel is installed, on each verify-torch.", (
    Key("ops", STRINGS, "operator schemas the wheel must register, as str(torch.ops.NS.OP.default._schema) prints them",
        default=()),
    Key("smoke", STRING, "Python code run in a fresh interpreter after the import", schema={"minLength": 1}),
    Key("requires-cuda", BOOL, "the operators need a CUDA torch, and the smoke code a GPU (SKIPPED without)",
        default=False, fix="write requires-cuda = true"),
))

_PTX_FIX = "write ptx = true to ship PTX next to the SASS of arch-specific targets"
_FLAG_SCHEMA = {"items": {"pattern": r"^-\S+$"}}  # one option per string; which ones: flags.py

EXTENSION_TABLE = Table("deps.NAME.build.extensions", "extension",
                        "One compiled module of the helper backend ([[...]] blocks).", (
    Key("name", STRING, "the Python module's name (a C identifier): NAME.abi3.so", required=True,
        pattern=re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$"), bad="{value} is not a valid module name",
        fix="use a C identifier"),
    _paths("sources", "its translation units, relative to the checkout", required=True, schema={"minItems": 1}),
    Key("language", STRING, f"{CXX}, or {CUDA} for nvcc (adds -DUSE_CUDA)", default=CXX, choices=LANGUAGES,
        bad="{value} is not a known language", fix='write language = "cxx" or "cuda"'),
    _paths("include-dirs", "-I directories, relative to the checkout"),
    _defines(""),
    Key("libraries", STRINGS, "libraries to link beyond libtorch_cpu (and libtorch_cuda for a CUDA extension), without "
        "lib and .so", default=(), pattern=LIBRARY_RE, bad="{value} is not a library name",
        fix='write the name without lib and .so, e.g. libraries = ["cuda"]',
        schema={"items": {"not": {"pattern": "^-"}}}),
    Key("cxx-flags", STRINGS,
        "extra options of its C++ units, one per string (not -std, -D, -I, -l: their keys say them)",
        default=(), schema=_FLAG_SCHEMA),
    Key("cuda-flags", STRINGS, "extra options of its .cu units, one per string, values joined (-Xptxas=-v)", default=(),
        schema=_FLAG_SCHEMA),
    _standard("cxx-std", "C++ standard of its C++ units (gnu++N); default 17", CXX_STANDARDS),
    _standard("cuda-std", "C++ standard of its .cu units (c++N); default: cxx-std", CUDA_STANDARDS),
    Key("ptx", BOOL, "also ship PTX for arch-specific targets (9.0a, 10.0a), which by default ship SASS only",
        default=False, fix=_PTX_FIX),
), schema={  # cuda-flags, cuda-std and ptx belong to a CUDA extension
    "if": {"required": ["language"], "properties": {"language": {"const": CUDA}}},
    "else": {"properties": {"cuda-flags": {"maxItems": 0}},
             "not": {"anyOf": [{"required": ["cuda-std"]}, {"required": ["ptx"]}]}}})

_ENV = "cmake/setuptools: extra environment for the dependency's build"
BUILD_TABLE = Table("deps.NAME.build", "build",
                    "How the dependency becomes an artifact: the recipe of one of three backends.", (
    Key("backend", STRING, "helper (default), cmake (default when cmake-dir is set) or setuptools",
        choices=tuple(BACKENDS),
        bad="{value} is not a build backend", fix="write backend = one of " + ", ".join(map(repr, BACKENDS))),
    Key("extensions", TABLES, "helper: the modules to compile, [[deps.NAME.build.extensions]] blocks", default=(),
        table=EXTENSION_TABLE),
    _paths("python-packages", "package directories copied as they are; the first receives the extensions"),
    _paths("data", "other files of the checkout to ship"),
    Key("cmake-dir", STRING, "cmake: the directory holding the dependency's CMakeLists.txt, relative to the checkout",
        schema=RELATIVE_SCHEMA),
    Key("cmake-args", STRINGS, "the project's own cache definitions, one argument per string (-DNAME=VALUE)",
        default=()),
    _archs("CUDA architectures of this dependency; default: [bundle] cuda-archs"),
    Key("project-dir", STRING, "setuptools: the directory holding setup.py or pyproject.toml", default=".",
        schema=RELATIVE_SCHEMA),
    _paths("sources", "cmake/setuptools: the translation units (globs), for `check` and `build --plan`"),
    _paths("include-dirs", "cmake/setuptools: -I directories of those units"),
    _defines("; cmake/setuptools: injected into the build too"),
    Key("build-env", ANY, _ENV, default={}, schema=ENV_SCHEMA),
    Key("ptx", BOOL, "cmake/setuptools: also ship PTX for arch-specific targets (the helper's is per extension)",
        default=False, fix=_PTX_FIX),
))

PROFILE_TABLE = Table("deps.NAME.profiles.PROFILE", "profile",
                      "A reduced configuration of the dependency's own build, chosen by `assemble build --profile "
                      "PROFILE` (docs/guides/build-profiles.md); the wheel says it was built so.", (
    Key("description", STRING,
        "what the profile leaves out, and for what it is meant (PR CI, a developer's smoke build)"),
    _defines("; added to the recipe's (the helper: every extension's), e.g. the build's own DISABLE switches"),
    Key("build-env", ANY, "cmake/setuptools: environment over the recipe's build-env, e.g. its setup.py's switches",
        default={}, schema=ENV_SCHEMA),
    _paths("sources", "the units kept: entries of the recipe's sources (the helper: of its extensions'), written the "
           "same way; an extension left with none is not built", default=None, schema={"minItems": 1}),
    _archs("CUDA architectures instead of the recipe's (or the bundle's)", schema={"minItems": 1}),
), schema={"minProperties": 1})

DEPENDENCY_TABLE = Table("deps.NAME", "dependency",
                         "One pinned dependency: where it comes from, its series, recipe and placement.", (
    Key("upstream", STRING, "the repository rebase follows", check=_url_problem, schema=_URL_SCHEMA),
    Key("source", STRING, "the repository built from (a fork); default: upstream", check=_url_problem,
        schema=_URL_SCHEMA),
    Key("commit", STRING, "the pinned commit, a full 40-hex SHA", required=True, pattern=SHA_RE,
        bad="{value} is not a full 40-hex commit SHA",
        fix="pin the full SHA (git rev-parse <ref>); branches, tags and short SHAs move or collide"),
    Key("track", STRING, "the upstream branch rebase and patches follow", default="main", check=_track_problem,
        schema=TEXT_SCHEMA),
    Key("submodules", STRINGS, "submodule paths to initialise, from their own cached mirrors", default=(),
        check=_submodule_problem),
    _torch_target("TORCH_TARGET_VERSION of this dependency (MAJOR.MINOR); default: the bundle's", None),
    Key("patches", STRING, "the series' directory, below the workspace",
        schema={"minLength": 1, "default": "patches/NAME"}),
    Key("build", TABLE, "", default={}, table=BUILD_TABLE),
    Key("install", ANY, "glob in the artifact (** spans directories) = directory in the wheel", default={},
        schema={"type": "object", "title": "deps.NAME.install", "additionalProperties": {"type": "string"}}),
    Key("verify", TABLE, "", default={}, table=VERIFY_TABLE),
    Key("max-size", SIZE, "optional: compressed bytes this dependency may add to the wheel"),
    _components(_COMPONENTS_TEXT),
    Key("profiles", NAMED, "reduced configurations of its build, [deps.NAME.profiles.PROFILE] each", default={},
        table=PROFILE_TABLE, pattern=PROFILE_NAME_RE,
        bad="{value} is not a profile name (it becomes a segment of the wheel's local version, +cu132.NAME)",
        fix="use 1 to 32 lowercase letters and digits, starting with a letter, e.g. smoke",
        schema={"title": "deps.NAME.profiles"}),
), schema={"anyOf": [{"required": ["upstream"]}, {"required": ["source"]}]})

MANIFEST_TABLE = Table("deps.toml", "",
                       "The assembler workspace manifest: every pin, series, recipe and wheel placement.", (
    Key("bundle", TABLE, "", required=True, table=BUNDLE_TABLE, fix="add [bundle] with name, version and python-abi"),
    Key("mirrors", ANY,
        "URL prefix = replacement, like git's insteadOf (longest prefix wins); a relative path is taken "
        "from deps.toml's directory", default={},
        schema={"type": "object", "title": "mirrors", "additionalProperties": {"type": "string", **TEXT_SCHEMA}}),
    Key("deps", NAMED, "the dependencies, [deps.NAME] each", default={}, table=DEPENDENCY_TABLE,
        check=_dependency_name_problem,
        schema={"title": "deps", "propertyNames": {"pattern": NAME_RE.pattern, "maxLength": 100}}),
    Key("cache", TABLE, "", default={}, table=CACHE_TABLE),
))
