"""Build one dependency's checkout into an artifact, or reuse the stored artifact of its key.

An artifact is ``<artifacts>/<dep>/`` with ``artifact.json`` (provenance, toolchain, key) and
``files/`` (what the dependency contributes to the wheel, e.g. ``vecadd/_vecadd_C.abi3.so``).
The build runs scikit-build-core inside the build environment, against the toolkit selected
for ``--cuda``, with everything else that could leak a different toolchain removed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from assembler.builder import recipe
from assembler.builder.cache import ArtifactStore, KeyParts, digest_texts, materialize
from assembler.builder.diagnose import UnstableInclude, log_tail, torch_include_roots, unstable_includes
from assembler.errors import InputError, ToolchainError
from assembler.git.state import CheckoutState
from assembler.manifest import Bundle, Dependency
from assembler.toolchain.cuda import CudaToolkit
from assembler.toolchain.torchenv import BuildEnv
from assembler.wheel.artifact import ARTIFACT_JSON, FILES_DIR, Artifact, stored_artifact

# Environment variables that would silently change what CMake or scikit-build-core do.
SCRUBBED_ENV = (
    "CMAKE_ARGS", "CMAKE_GENERATOR", "CMAKE_TOOLCHAIN_FILE", "CMAKE_PREFIX_PATH", "PYTHONPATH", "PYTHONHOME",
    "VIRTUAL_ENV", "Torch_DIR", "TORCH_CUDA_ARCH_LIST", "CUDAARCHS",
)
NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\] ")
DRIVER = (
    "import json, sys\n"
    "from scikit_build_core.build import build_wheel\n"
    "print('assemble: wheel', build_wheel(sys.argv[1], json.loads(sys.argv[2])))\n"
)


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


def host_compiler_version(environ: dict[str, str]) -> str:
    compiler = environ.get("CXX", "c++")
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        raise ToolchainError(f"no working C++ compiler ({compiler})", hint="install g++ or set CXX") from None
    return out.splitlines()[0].strip()


@dataclass(frozen=True)
class BuildContext:
    state_dir: Path  # <workspace>/.assemble: build trees and logs
    artifacts: Path  # <artifacts>/<dep>/
    store: ArtifactStore
    toolchain: Toolchain
    bundle: Bundle


@dataclass(frozen=True)
class BuildRequest:
    dep: Dependency
    checkout: Path
    head: str
    dirty: bool
    series_head: str | None  # what applying the series produced; HEAD differs when commits were added
    parts: KeyParts
    project: recipe.Project
    archs: tuple[str, ...]

    @property
    def key(self) -> str:
        return self.parts.digest()

    @property
    def cuda(self) -> bool:
        return recipe.uses_cuda(self.dep)


@dataclass
class Outcome:
    dep: str
    status: str  # "cached", "built", "failed"
    seconds: float = 0.0
    artifact: Path | None = None
    log: Path | None = None
    error: str | None = None  # what failed when the log tail would not say it
    unstable: list[UnstableInclude] = field(default_factory=list)
    record: Artifact | None = None  # the artifact.json of a cached or built artifact


def source_identity(checkout: Path) -> tuple[str, str | None]:
    """(HEAD, digest of uncommitted edits or None): the build uses the working tree as it is."""
    head = _git(checkout, "rev-parse", "HEAD").strip()
    status = _git(checkout, "status", "--porcelain", "--untracked-files=all")
    if not status.strip():
        return head, None
    untracked = sorted(line[3:] for line in status.splitlines() if line.startswith("??"))
    contents = [(checkout / name).read_bytes() for name in untracked if (checkout / name).is_file()]
    return head, digest_texts(_git(checkout, "diff", "HEAD", "--binary"), *untracked, *contents)


def _git(checkout: Path, *args: str) -> str:
    """git in the checkout through the one git layer (plain subprocess, no gitpython import:
    this runs on every no-op build)."""
    from assembler.git.process import GitFailed, WorkTree

    try:
        return WorkTree(checkout).run(*args).stdout
    except GitFailed as failed:
        reason = failed.message.partition(" failed: ")[2]
        raise InputError(
            f"{checkout}: `git {' '.join(args)}` failed: {reason}",
            hint="check that the checkout is a sound git repository, or move it away and run `assemble checkout`",
        ) from None


def prepare(ctx: BuildContext, dep: Dependency, checkout: Path, series_digest: str) -> BuildRequest:
    """Everything about ``dep``'s build that goes into its key, computed without building."""
    head, dirty = source_identity(checkout)
    project = recipe.generate(dep, ctx.bundle.python_abi)
    uses_cuda = recipe.uses_cuda(dep)
    archs = (dep.build.cuda_archs if dep.build.cuda_archs is not None else ctx.bundle.cuda_archs) if uses_cuda else ()
    if not archs and any(ext.language == "cuda" for ext in dep.build.extensions):  # own CMake may set them itself
        raise InputError(
            f"deps.toml: [deps.{dep.name}.build] compiles CUDA but cuda-archs is set neither there nor in [bundle]",
            hint=f'add cuda-archs = ["9.0"] to [bundle] or [deps.{dep.name}.build]',
        )
    helper = (recipe.CMAKE_HELPER_DIR / "AssemblerStableExtension.cmake").read_text()
    parts = KeyParts(
        dep=dep.name,
        source=head if dirty is None else f"{head}+{dirty}",
        series=series_digest,
        recipe=digest_texts(project.pyproject, project.cmakelists, helper, json.dumps(dep.install, sort_keys=True)),
        toolchain=ctx.toolchain.versions(uses_cuda),
        torch=ctx.toolchain.env.torch,
        torch_target=dep.torch_target,
        archs=tuple(archs),
        flags=("Release", *dep.build.cmake_args),
        python_abi=ctx.bundle.python_abi,
    )
    state = CheckoutState.load(checkout)
    return BuildRequest(dep, checkout, head, dirty is not None, state.head if state else None, parts, project, tuple(archs))


def reuse(ctx: BuildContext, request: BuildRequest) -> Outcome | None:
    """The artifact for the request's key when it is already in place or in the store."""
    target = ctx.artifacts / request.dep.name
    current = stored_artifact(target)
    if current is not None and current.key == request.key:
        return Outcome(request.dep.name, "cached", artifact=target, record=current)
    stored = ctx.store.lookup(request.dep.name, request.key)
    if stored is None:
        return None
    materialize(stored, target)
    return Outcome(request.dep.name, "cached", artifact=target, record=stored_artifact(target))


def build(ctx: BuildContext, request: BuildRequest, jobs: int, on_line: Callable[[str], None] = lambda _: None) -> Outcome:
    """Compile ``request`` with ``jobs`` parallel compiler processes; never raises for a
    compiler failure (the Outcome says what failed, with the log)."""
    dep = request.dep
    tree = ctx.state_dir / "build" / dep.name
    log_path = ctx.state_dir / "logs" / f"{dep.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    project_dir, wheel_dir = tree / "project", tree / "wheel"
    cmake_dir = tree / f"cmake-{_configure_digest(request)}"
    for stale in tree.glob("cmake-*"):  # a build tree per configuration; keep only the current one
        if stale != cmake_dir:
            shutil.rmtree(stale, ignore_errors=True)
    shutil.rmtree(wheel_dir, ignore_errors=True)
    project_dir.mkdir(parents=True, exist_ok=True)
    request.project.write(project_dir)

    started = time.monotonic()
    returncode = _run_logged(
        [str(ctx.toolchain.env.python), "-c", DRIVER, str(wheel_dir), json.dumps(_settings(ctx, request, cmake_dir))],
        cwd=project_dir, env=_environment(ctx, jobs), log_path=log_path, on_line=on_line,
    )
    seconds = time.monotonic() - started
    log = log_path.read_text(errors="replace")
    if returncode != 0:
        unstable = unstable_includes(log, request.checkout, torch_include_roots(ctx.toolchain.env.torch_dir))
        return Outcome(dep.name, "failed", seconds, log=log_path, unstable=unstable)
    used = _cmake_cuda_version(cmake_dir)
    if used is not None and used != ctx.toolchain.cuda.release:
        return Outcome(dep.name, "failed", seconds, log=log_path,
                       error=f"{dep.name}: CMake compiled with nvcc {used}, not the selected {ctx.toolchain.cuda.release}")
    wheels = sorted(wheel_dir.glob("*.whl"))
    if len(wheels) != 1:
        found = ", ".join(w.name for w in wheels) or "none"
        return Outcome(dep.name, "failed", seconds, log=log_path,
                       error=f"{dep.name}: scikit-build-core exited 0 but left {found} instead of one wheel in {wheel_dir}")
    staging = ctx.store.root / dep.name / f".tmp-{request.key}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    _unpack(wheels[0], staging / FILES_DIR)
    missing = _missing_modules(dep, staging / FILES_DIR)
    if missing:
        shutil.rmtree(staging)
        return Outcome(dep.name, "failed", seconds, log=log_path,
                       error=f"{dep.name}: the build produced no {', '.join(missing)} (an abi3 module named by the recipe)")
    # Deflated once here, so every merge copies the compressed members instead of recompressing.
    from assembler.wheel.artifact import PACK_NAME, pack_files  # the wheel package only when building

    pack_files(staging / FILES_DIR, staging / PACK_NAME)
    record = artifact_record(ctx, request, seconds)
    (staging / ARTIFACT_JSON).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    stored = ctx.store.publish(staging, dep.name, request.key)
    materialize(stored, ctx.artifacts / dep.name)
    return Outcome(dep.name, "built", seconds, artifact=ctx.artifacts / dep.name, log=log_path,
                   record=stored_artifact(ctx.artifacts / dep.name))


def artifact_record(ctx: BuildContext, request: BuildRequest, seconds: float) -> dict[str, Any]:
    """artifact.json: what the merge step and the wheel's metadata need to say where it came from."""
    tc, dep = ctx.toolchain, request.dep
    return {
        "dep": dep.name,
        "commit": dep.commit,
        "head": request.head,
        "dirty": request.dirty,
        "series_head": request.series_head,
        "source": dep.source,
        "patches": list(dep.series),
        "series_digest": request.parts.series,
        "key": request.key,
        "toolchain": {
            "cuda": tc.cuda.version if request.cuda else None,
            "nvcc": tc.cuda.release if request.cuda else None,
            "cuda_origin": tc.cuda.origin if request.cuda else None,
            "cxx": tc.cxx,
            "torch": tc.env.torch,
            "python_abi": ctx.bundle.python_abi,
            "torch_target": dep.torch_target,
            "cmake": tc.env.cmake,
            "ninja": tc.env.ninja,
            "scikit_build_core": tc.env.scikit_build_core,
        },
        "archs": list(request.archs),
        "build_seconds": round(seconds, 2),
    }


def _configure_digest(request: BuildRequest) -> str:
    """What forces a fresh CMake tree: everything in the key except the sources themselves."""
    return replace(request.parts, source="", series="").digest()[:12]


def _settings(ctx: BuildContext, request: BuildRequest, cmake_dir: Path) -> dict[str, str]:
    tc = ctx.toolchain
    settings = {
        "build-dir": str(cmake_dir),
        "cmake.define.ASSEMBLER_SOURCE_DIR": str(request.checkout),
        "cmake.define.ASSEMBLER_CMAKE_DIR": str(recipe.CMAKE_HELPER_DIR),
        "cmake.define.ASSEMBLER_PYTHON_ABI": ctx.bundle.python_abi,
        "cmake.define.ASSEMBLER_TORCH_TARGET": request.dep.torch_target,
        "cmake.define.ASSEMBLER_TORCH_DIR": str(tc.env.torch_dir),
    }
    if request.cuda:
        settings["cmake.define.CMAKE_CUDA_COMPILER"] = str(tc.cuda.nvcc)
    if request.archs:
        settings["cmake.define.CMAKE_CUDA_ARCHITECTURES"] = recipe.cmake_archs(request.archs)
    return settings


def _environment(ctx: BuildContext, jobs: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV and not k.startswith("SKBUILD_")}
    env = ctx.toolchain.cuda.environment(env)
    env["PATH"] = os.pathsep.join([str(ctx.toolchain.env.python.parent), env["PATH"]])
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs)
    return env


def _run_logged(command: list[str], cwd: Path, env: dict[str, str], log_path: Path, on_line: Callable[[str], None]) -> int:
    with log_path.open("w") as log, subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            on_line(line.rstrip("\n"))
        return process.wait()


def _unpack(wheel: Path, target: Path) -> None:
    """The wheel's payload without its dist-info (the merged wheel writes its own)."""
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if member.is_dir() or member.filename.split("/")[0].endswith(".dist-info"):
                continue
            path = Path(archive.extract(member, target))
            mode = (member.external_attr >> 16) & 0o777
            path.chmod(mode or 0o644)


def _cmake_cuda_version(cmake_dir: Path) -> str | None:
    """The nvcc version CMake actually configured (None when the project enabled no CUDA): the
    last guard against a dependency's own CMake picking up another toolkit."""
    for found in cmake_dir.glob("CMakeFiles/*/CMakeCUDACompiler.cmake"):
        match = re.search(r'set\(CMAKE_CUDA_COMPILER_VERSION "([^"]+)"\)', found.read_text())
        if match:
            return match.group(1)
    return None


def _missing_modules(dep: Dependency, files: Path) -> list[str]:
    destination = files / recipe.module_destination(dep)
    return [f"{ext.name}.abi3.so" for ext in dep.build.extensions if not (destination / f"{ext.name}.abi3.so").is_file()]


def ninja_progress(line: str) -> tuple[int, int] | None:
    match = NINJA_STEP.match(line)
    return (int(match.group(1)), int(match.group(2))) if match else None


def format_failure(outcome: Outcome, tail_lines: int = 30) -> str:
    """What the user reads for a failed dependency: the unstable includes when that is the
    cause, else the tail of the log."""
    if outcome.unstable:
        return "\n".join(item.describe(outcome.dep) for item in outcome.unstable)
    if outcome.log is None:
        return outcome.error or ""
    return log_tail(outcome.log.read_text(errors="replace"), tail_lines)
