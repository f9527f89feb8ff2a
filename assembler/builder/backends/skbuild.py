"""What the helper and cmake backends share: a generated scikit-build-core project (see
``builder.recipe``), built inside the build environment against the toolkit selected for
``--cuda``, its wheel unpacked as the artifact's files, its compile commands kept."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from assembler import jsonfile
from assembler.builder import recipe
from assembler.builder.artifact_keys import digest_texts
from assembler.builder.backends import (
    BuildFailure,
    Prepared,
    Work,
    refuse_escaping_links,
    scrubbed_environment,
    write_compdb,
)
from assembler.manifest import Dependency
from assembler.manifest.model import BackendName, BuildRecipe
from assembler.toolchain.cxx import cxx_name
from assembler.toolchain.driver import driver_stub
from assembler.toolchain.sccache import cmake_launcher_defines

if TYPE_CHECKING:
    from assembler.builder.request import BuildContext, BuildRequest

DRIVER = (
    "import json, sys\n"
    "from scikit_build_core.build import build_wheel\n"
    "print('assemble: wheel', build_wheel(sys.argv[1], json.loads(sys.argv[2])))\n"
)

# How the cmake backend tells a dependency's own CMake its archs (part of its artifact key, so
# a change rebuilds): CMAKE_CUDA_ARCHITECTURES 90a-real and TORCH_CUDA_ARCH_LIST 9.0a, SASS only
# for arch-specific targets unless the recipe sets ptx = true.
ARCH_SPELLING = "CMAKE_CUDA_ARCHITECTURES and TORCH_CUDA_ARCH_LIST, arch-specific targets SASS only"


class ScikitBuildBackend:
    """Base of ``helper`` and ``cmake``; they differ in the project ``recipe.generate`` writes and
    in :attr:`from_extensions` (the helper's own extensions, else the dependency's own CMake)."""

    name: BackendName
    from_extensions: bool
    cpp_extension_std = False  # the CMake helper's floor, c++17
    pyinit_in_sources = False  # the helper generates each module's PyInit_
    setup_py_builds = False  # CMake builds; a setup.py beside it is not what assemble runs

    def uses_cuda(self, recipe: BuildRecipe) -> bool:
        raise NotImplementedError

    def nothing_to_build(self, recipe: BuildRecipe) -> bool:
        return False

    def extension_modules(self, dep: Dependency) -> tuple[str, ...]:
        return ()

    def unit_std(self, dep: Dependency, language: str) -> str | None:
        return None

    def prepare(self, ctx: BuildContext, dep: Dependency, checkout: Path) -> Prepared:
        project = recipe.generate(dep, ctx.bundle.python_abi)
        helper = (recipe.CMAKE_HELPER_DIR / "AssemblerStableExtension.cmake").read_text()
        texts = [project.pyproject, project.cmakelists, helper, json.dumps(dep.install, sort_keys=True)]
        if not self.from_extensions:  # the helper's keys stay what they were before backends existed
            texts += [f"backend={self.name}", json.dumps(dep.build.build_env),
                      f"cuda-architectures: {ARCH_SPELLING}, ptx={dep.build.ptx}"]
        return Prepared(recipe=digest_texts(*texts), uses_cuda=self.uses_cuda(dep.build))

    def build(self, ctx: BuildContext, request: BuildRequest, jobs: int, work: Work) -> None:
        project_dir, wheel_dir = work.tree / "project", work.tree / "wheel"
        cmake_dir = work.tree / f"cmake-{configure_digest(request)}"
        for stale in work.tree.glob("cmake-*"):  # a build tree per configuration; keep only the current one
            if stale != cmake_dir:
                shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(wheel_dir, ignore_errors=True)
        project_dir.mkdir(parents=True, exist_ok=True)
        recipe.generate(request.dep, ctx.bundle.python_abi).write(project_dir)
        env = scrubbed_environment(dict(os.environ))
        env = ctx.toolchain.cuda.environment(env)
        env["PATH"] = os.pathsep.join([str(ctx.toolchain.env.python.parent), env["PATH"]])
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs)
        if request.archs and not self.from_extensions:  # find_package(Torch) reads it (see recipe.torch_arch_list)
            env["TORCH_CUDA_ARCH_LIST"] = recipe.torch_arch_list(request.archs, request.dep.build.ptx)
        env.update(request.dep.build.build_env)
        settings = json.dumps(self._settings(ctx, request, cmake_dir))
        command = [str(ctx.toolchain.env.python), "-c", DRIVER, str(wheel_dir), settings]
        if work.run(command, project_dir, env) != 0:
            export_compdb(cmake_dir, work.compdb)  # what did compile is still worth checking
            raise BuildFailure()
        export_compdb(cmake_dir, work.compdb)
        refuse_escaping_links(ctx, request)  # the wheel was read through the checkout's links
        used = cmake_cuda_version(cmake_dir)
        if used is not None and used != ctx.toolchain.cuda.release:
            raise BuildFailure(f"{request.dep.name}: CMake compiled with nvcc {used}, "
                               f"not the selected {ctx.toolchain.cuda.release}")
        unpack(one_wheel(wheel_dir, request.dep.name, "scikit-build-core"), work.files)
        missing = self.missing_modules(request.dep, work.files)
        if missing:
            raise BuildFailure(f"{request.dep.name}: the build produced no {', '.join(missing)} "
                               "(an abi3 module named by the recipe)")

    def missing_modules(self, dep: Dependency, files: Path) -> list[str]:
        return []

    def _settings(self, ctx: BuildContext, request: BuildRequest, cmake_dir: Path) -> dict[str, str]:
        tc = ctx.toolchain
        settings = {
            "build-dir": str(cmake_dir),
            "cmake.define.ASSEMBLER_SOURCE_DIR": str(request.checkout),
            "cmake.define.ASSEMBLER_CMAKE_DIR": str(recipe.CMAKE_HELPER_DIR),
            "cmake.define.ASSEMBLER_PYTHON_ABI": ctx.bundle.python_abi,
            "cmake.define.ASSEMBLER_TORCH_TARGET": request.dep.torch_target,
            "cmake.define.ASSEMBLER_TORCH_DIR": str(tc.env.torch_dir),
            "cmake.define.CMAKE_EXPORT_COMPILE_COMMANDS": "ON",
            **cmake_launcher_defines(ctx.compiler_cache),  # sccache, or explicitly none
        }
        if request.cuda:
            settings["cmake.define.CMAKE_CUDA_COMPILER"] = str(tc.cuda.nvcc)
            settings["cmake.define.ASSEMBLER_CUDA_HOME"] = str(tc.cuda.root)
            if not self.from_extensions:  # FindCUDAToolkit's CUDA::cuda_driver; no stub in wheels (toolchain.driver)
                stub = driver_stub(tc.cuda.root, cmake_dir.parent / "assemble-driver", cxx_name())
                settings["cmake.define.CUDA_cuda_driver_LIBRARY"] = str(stub)
        if request.archs:
            # the helper decides per extension; a dependency's own CMake gets SASS-only spellings
            sass_only = not self.from_extensions and not request.dep.build.ptx
            settings["cmake.define.CMAKE_CUDA_ARCHITECTURES"] = recipe.cmake_archs(request.archs, sass_only)
        return settings


def configure_digest(request: BuildRequest) -> str:
    """What forces a fresh build tree: everything in the key except the sources themselves."""
    return replace(request.parts, source="", series="").digest()[:12]


def export_compdb(cmake_dir: Path, target: Path) -> None:
    """CMake's compile_commands.json ({directory, command, file}) as {directory, file, arguments}."""
    source = cmake_dir / "compile_commands.json"
    if not source.is_file():
        return
    entries = jsonfile.load(source)
    write_compdb(target, [
        {"directory": e["directory"], "file": e["file"], "arguments": e.get("arguments") or shlex.split(e["command"])}
        for e in entries
    ])


def one_wheel(wheel_dir: Path, dep: str, tool: str) -> Path:
    wheels = sorted(wheel_dir.glob("*.whl"))
    if len(wheels) != 1:
        found = ", ".join(w.name for w in wheels) or "none"
        raise BuildFailure(f"{dep}: {tool} exited 0 but left {found} instead of one wheel in {wheel_dir}")
    return wheels[0]


def unpack(wheel: Path, target: Path) -> None:
    """The wheel's payload without its dist-info (the merged wheel writes its own); the files a
    wheel keeps under <name>.data/purelib or platlib go to the root, as an installer puts them."""
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            parts = member.filename.split("/")
            if member.is_dir() or parts[0].endswith(".dist-info"):
                continue
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in {"purelib", "platlib"}:
                    continue  # scripts, headers, data: nothing a torch extension bundle ships
                parts = parts[2:]
            if any(part in {"", ".", ".."} for part in parts):
                raise BuildFailure(f"{wheel.name}: member {member.filename!r} leaves the artifact")
            kind = stat.S_IFMT(member.external_attr >> 16)
            if kind not in (0, stat.S_IFREG):  # a link's target (or a device) is never a file of the artifact
                raise BuildFailure(f"{wheel.name}: member {member.filename!r} is not a regular file (mode {kind:o}): "
                                   "artifacts hold regular files only")
            path = target.joinpath(*parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, path.open("wb") as out:
                shutil.copyfileobj(source, out)
            mode = (member.external_attr >> 16) & 0o777
            path.chmod(mode or 0o644)


def cmake_cuda_version(cmake_dir: Path) -> str | None:
    """The nvcc version CMake actually configured (None when the project enabled no CUDA): the
    last guard against a dependency's own CMake picking up another toolkit."""
    for found in cmake_dir.glob("CMakeFiles/*/CMakeCUDACompiler.cmake"):
        match = re.search(r'set\(CMAKE_CUDA_COMPILER_VERSION "([^"]+)"\)', found.read_text())
        if match:
            return match.group(1)
    return None
