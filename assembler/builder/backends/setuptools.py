"""``backend = "setuptools"``: the dependency's own setup.py / pyproject.toml, usually
``torch.utils.cpp_extension``, as most torch kernel libraries ship (FlashMLA, FlashKDA, QuTLASS).

The wheel is built by calling the project's PEP 517 backend (``setuptools.build_meta`` unless
its pyproject.toml names another) inside the torch build environment, without build isolation
and without pip: the torch it compiles against is the one the key names. Our settings come in
through the environment, which ``torch.utils.cpp_extension`` reads:

- ``CFLAGS``/``CXXFLAGS`` (g++) and ``NVCC_APPEND_FLAGS`` (nvcc): ``-DTORCH_TARGET_VERSION``,
  ``-DPy_LIMITED_API`` and the recipe's ``defines``;
- ``TORCH_CUDA_ARCH_LIST`` from the dependency's archs (arch-specific ones
  SASS only unless ``ptx``: see ``torch_arch_list``), ``MAX_JOBS`` from ``--jobs``,
  ``CUDA_HOME`` (and nvcc first on PATH) from the selected toolkit;
- the recipe's ``build-env``;
- ``DIST_EXTRA_CONFIG``: setuptools' build and egg-info directories go to our build tree, so
  the checkout stays clean (a dirty checkout would change the next build's key);
- with a CPU-only torch and a CUDA recipe: cpp_extension's ``CUDA_HOME`` (which such a torch
  leaves unset) and link stand-ins for ``libtorch_cuda``/``libc10_cuda`` (``cuda_stand_ins``);
- ``LDFLAGS``: ``-Wl,--no-as-needed`` (``KEEP_LIBRARIES``), so ``libtorch_cuda`` stays in a CUDA
  module's DT_NEEDED whatever the compiler's default, and the stand-ins' directories.

The setup.py must itself ask for abi3 (``py_limited_api=True`` on each extension and
``options={"bdist_wheel": {"py_limited_api": "cp39"}}``): a module without the ``.abi3.so``
suffix fails the build, since the bundle is one cp39-abi3 wheel.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from assembler.builder.artifact_keys import digest_texts
from assembler.builder.backends import (
    Backend,
    BuildFailure,
    Prepared,
    Work,
    refuse_escaping_links,
    scrubbed_environment,
    stable_defines,
    write_compdb,
)
from assembler.builder.backends.skbuild import configure_digest, one_wheel, unpack
from assembler.builder.recipe import torch_arch_list
from assembler.builder.units import RecipePathError
from assembler.fsutil import atomic_write
from assembler.manifest import MANIFEST_NAME, Dependency
from assembler.manifest.model import BackendName, BuildRecipe
from assembler.toolchain.cxx import cxx_name
from assembler.toolchain.driver import driver_stub
from assembler.toolchain.sccache import setuptools_environment, unshimmed
from assembler.toolchain.venv import installed_versions

if TYPE_CHECKING:
    from assembler.builder.request import BuildContext, BuildRequest

PROJECT_FILES = ("pyproject.toml", "setup.py")
# What CUDAExtension links beyond libtorch_cpu; a CPU-only torch lacks them (see cuda_stand_ins).
TORCH_CUDA_LIBRARIES = ("c10_cuda", "torch_cuda")
# Bump when what the backend injects or does to the built files changes: it is part of the key.
BACKEND_VERSION = ("4: defines + file-prefix maps (checkout, torch) in CFLAGS/CXXFLAGS/NVCC_APPEND_FLAGS; strip; "
                   "CUDA stand-ins; --no-as-needed in LDFLAGS")
# In LDFLAGS, which distutils puts after the compiler driver and before the objects and the
# setup.py's -l libraries: every library an extension names stays in DT_NEEDED, whatever the
# compiler's default (Debian's and Ubuntu's gcc link --as-needed). CUDAExtension names
# torch_cuda, where the Stable ABI's CUDA half lives; its soname stand-in (cuda_stand_ins)
# satisfies no symbol at link time, so --as-needed would drop it and the module would fail to
# load. A CppExtension names no CUDA library, so a CPU module of the same setup.py gains none.
# The CMake helper does the same (AssemblerStableExtension.cmake).
KEEP_LIBRARIES = "-Wl,--no-as-needed"
DRIVER = """\
import importlib, os, sys
project, wheel_dir = sys.argv[1], sys.argv[2]
os.chdir(project)
sys.path.insert(0, project)
name, paths = "setuptools.build_meta:__legacy__", []
if os.path.exists("pyproject.toml"):
    import tomllib
    with open("pyproject.toml", "rb") as f:
        system = tomllib.load(f).get("build-system", {})
    name, paths = system.get("build-backend", name), system.get("backend-path", [])
for path in reversed(paths):
    sys.path.insert(0, os.path.abspath(path))
if os.environ.get("ASSEMBLE_CUDA_HOME"):
    # A CPU-only torch turns cpp_extension's CUDA support off (CUDA_HOME = None); the Stable ABI
    # does not need torch's CUDA half to compile, so point it at the selected toolkit.
    import torch.utils.cpp_extension as cpp_extension
    if cpp_extension.CUDA_HOME is None:
        cpp_extension.CUDA_HOME = os.environ["ASSEMBLE_CUDA_HOME"]
module, _, attribute = name.partition(":")
backend = importlib.import_module(module)
for part in filter(None, attribute.split(".")):
    backend = getattr(backend, part)
print("assemble: PEP 517 backend", name, flush=True)
print("assemble: wheel", backend.build_wheel(wheel_dir, {}), flush=True)
"""
EXTRA_CONFIG = """\
# Written by assemble: setuptools builds into assemble's tree, never into the checkout.
[build]
build_base = {build_base}
[egg_info]
egg_base = {egg_base}
"""


class SetuptoolsBackend:
    name = BackendName.SETUPTOOLS
    from_extensions = False
    cpp_extension_std = True  # torch.utils.cpp_extension adds -std=c++20 (2.10+) unless the setup.py says
    pyinit_in_sources = True  # setup.py's Extension is a Python module: its PyInit_ is in its sources
    setup_py_builds = True

    def uses_cuda(self, recipe: BuildRecipe) -> bool:
        """When the recipe sets cuda-archs or lists a .cu source (its setup.py decides the rest)."""
        return recipe.cuda_archs is not None or any(source.endswith(".cu") for source in recipe.sources)

    def nothing_to_build(self, recipe: BuildRecipe) -> bool:
        return False

    def extension_modules(self, dep: Dependency) -> tuple[str, ...]:
        return ()

    def unit_std(self, dep: Dependency, language: str) -> str | None:
        return None  # cpp_extension's, unless its setup.py adds one (then its compile commands say)

    def prepare(self, ctx: BuildContext, dep: Dependency, checkout: Path) -> Prepared:
        project = checkout / dep.build.project_dir
        if not any((project / name).is_file() for name in PROJECT_FILES):
            raise RecipePathError(ctx.state_dir.parent / MANIFEST_NAME, ("deps", dep.name, "build", "project-dir"),
                                  dep.build.project_dir,
                                  f"{dep.build.project_dir} holds neither {' nor '.join(PROJECT_FILES)} in {checkout}")
        versions = installed_versions(ctx.toolchain.env.path)
        recipe = digest_texts(
            f"backend={self.name}", dep.build.project_dir, json.dumps(dep.build.defines),
            json.dumps(dep.build.build_env), json.dumps(dep.install, sort_keys=True), DRIVER, EXTRA_CONFIG,
            BACKEND_VERSION, *stable_defines(dep, ctx.bundle.python_abi),
            *(("ptx",) if dep.build.ptx else ()),  # unset keeps the keys that came before the key
        )
        tools = (("setuptools", versions.get("setuptools", "(none)")),)
        return Prepared(recipe=recipe, uses_cuda=self.uses_cuda(dep.build), tools=tools)

    def build(self, ctx: BuildContext, request: BuildRequest, jobs: int, work: Work) -> None:
        dep = request.dep
        build_base = work.tree / f"setuptools-{configure_digest(request)}"
        for stale in work.tree.glob("setuptools-*"):  # one tree per configuration, as for CMake
            if stale != build_base:
                shutil.rmtree(stale, ignore_errors=True)
        wheel_dir, egg_base = work.tree / "wheel", build_base / "egg-info"
        shutil.rmtree(wheel_dir, ignore_errors=True)
        shutil.rmtree(egg_base, ignore_errors=True)  # stale SOURCES.txt would list deleted files
        # What the last build installed (build_lib) and staged for its wheel (bdist) goes too: a
        # module it made under another name (cp311 before setup.py asked for abi3) would be
        # shipped again. Objects (temp.*) stay: ninja decides what to recompile.
        for stale in [*build_base.glob("lib.*"), *build_base.glob("bdist.*")]:
            shutil.rmtree(stale, ignore_errors=True)
        wheel_dir.mkdir(parents=True)
        egg_base.mkdir(parents=True)
        config = build_base / "assemble-setup.cfg"
        # replaced, never written through: a link planted in the build tree stays a link to nothing we write
        atomic_write(config, EXTRA_CONFIG.format(build_base=build_base, egg_base=egg_base), inside=work.tree)
        env = self.environment(ctx, request, jobs, config)
        try:
            stand_ins = cuda_stand_ins(build_base, ctx.toolchain.env.torch_dir) if request.cuda else None
        except (OSError, subprocess.CalledProcessError) as error:
            raise BuildFailure(f"{dep.name}: cannot make the link stand-ins for torch's CUDA "
                               f"libraries: {error}") from None
        # -lcuda (QuTLASS's extra_link_args) links a driver stub where the toolkit has none (toolchain.driver)
        driver = (driver_stub(ctx.toolchain.cuda.root, build_base / "assemble-driver", cxx_name()).parent
                  if request.cuda else None)
        link_dirs = [directory for directory in (stand_ins, driver) if directory is not None]
        env["LDFLAGS"] = " ".join([*(shlex.quote(f"-L{directory}") for directory in link_dirs), KEEP_LIBRARIES])
        if stand_ins is not None:
            env["ASSEMBLE_CUDA_HOME"] = str(ctx.toolchain.cuda.root)
        ninja = ctx.toolchain.env.python.parent / "ninja"
        wrapper_dir, wrapper_env = ninja_wrapper(build_base, ninja)
        env.update(wrapper_env, PATH=os.pathsep.join([str(wrapper_dir), env["PATH"]]))
        # sccache: c++/nvcc shims (and torch's own ccache/sccache detection off); toolchain.sccache
        env.update(setuptools_environment(ctx.compiler_cache, build_base / "assemble-sccache", env,
                                          ctx.toolchain.cuda.nvcc if request.cuda else None))
        project = request.checkout / dep.build.project_dir
        command = [str(ctx.toolchain.env.python), "-c", DRIVER, str(project), str(wheel_dir)]
        status = work.run(command, project, env)
        export_compdb(build_base, ninja, work.compdb)
        if status != 0:
            raise BuildFailure()
        refuse_escaping_links(ctx, request)  # setup.py copied package data through the checkout's links
        wheel = one_wheel(wheel_dir, dep.name, "the setuptools build")
        unpack(wheel, work.files)
        modules = sorted(path.relative_to(work.files).as_posix() for path in work.files.rglob("*.so"))
        strip(work.files, modules)
        not_abi3 = [module for module in modules if not module.endswith(".abi3.so")]
        if not_abi3:
            raise BuildFailure(
                f"{dep.name}: {', '.join(not_abi3)} is not an abi3 module: pass py_limited_api=True to each extension "
                f'and options={{"bdist_wheel": {{"py_limited_api": "cp{ctx.bundle.python_abi.replace(".", "")}"}}}} to '
                "setup() (the bundle is one abi3 wheel)")

    def environment(self, ctx: BuildContext, request: BuildRequest, jobs: int, config: Path) -> dict[str, str]:
        """The build's environment: ours on top of the user's, minus what could change the build."""
        tc, dep = ctx.toolchain, request.dep
        env = tc.cuda.environment(scrubbed_environment(dict(os.environ)))
        env["PATH"] = os.pathsep.join([str(tc.env.python.parent), env["PATH"]])
        defines = " ".join(shlex.quote(f"-D{define}") for define in stable_defines(dep, ctx.bundle.python_abi))
        # Paths in the binaries (__FILE__ of checks, debug info) relative to the checkout and
        # torch, not to where they happen to live: the bytes do not depend on the cache's place.
        prefix_maps = [f"-ffile-prefix-map={request.checkout}={dep.name}",
                       f"-ffile-prefix-map={tc.env.torch_dir}=torch"]
        host = " ".join(shlex.quote(flag) for flag in prefix_maps)
        device = " ".join(shlex.quote(f"-Xcompiler={flag}") for flag in prefix_maps)
        env.update(dep.build.build_env)
        env.update(
            CFLAGS=f"{defines} {host}",
            CXXFLAGS=f"{defines} {host}",
            NVCC_APPEND_FLAGS=f"{defines} {device}",
            MAX_JOBS=str(jobs),
            DIST_EXTRA_CONFIG=str(config),
        )
        if request.archs:
            env["TORCH_CUDA_ARCH_LIST"] = torch_arch_list(request.archs, dep.build.ptx)
        return env



def cuda_stand_ins(build_base: Path, torch_dir: Path) -> Path | None:
    """A directory of link-time stand-ins for the torch CUDA libraries a CPU-only torch lacks
    (None when torch has them all). Each is an empty shared library carrying the real soname,
    so the module records DT_NEEDED libtorch_cuda.so exactly as against the real file and the
    torch that loads it provides it: the Stable ABI does not depend on the build's torch
    flavour. The CMake helper does the same (``_assembler_resolve_library``)."""
    missing = [name for name in TORCH_CUDA_LIBRARIES if not (torch_dir / "lib" / f"lib{name}.so").is_file()]
    if not missing:
        return None
    directory = build_base / "assemble-soname"
    directory.mkdir(parents=True, exist_ok=True)
    compiler = shutil.which(cxx_name()) or "c++"
    for name in missing:
        library = directory / f"lib{name}.so"
        if not library.is_file():
            subprocess.run([compiler, "-shared", "-x", "c++", os.devnull, f"-Wl,-soname,lib{name}.so",
                            "-o", str(library)],
                           check=True, capture_output=True)
    return directory


def strip(files: Path, modules: list[str]) -> None:
    """Strip the extension modules as the CMake backends' install/strip does (setuptools does
    not): symbol tables and debug info off, the dynamic symbols the loader needs kept."""
    tool = shutil.which("strip")
    if tool is None:
        return
    for module in modules:
        subprocess.run([tool, str(files / module)], check=True, capture_output=True)


NINJA_WRAPPER = """\
#!/bin/sh
# Written by assemble: keep each build.ninja torch.utils.cpp_extension runs (one per extension,
# each overwriting the last) for the compile commands, then run the real ninja.
if [ -f build.ninja ] && [ "$1" != "--version" ]; then
  n=$(ls "$ASSEMBLE_NINJA_SAVE" | wc -l)
  cp build.ninja "$ASSEMBLE_NINJA_SAVE/$n.ninja" && pwd > "$ASSEMBLE_NINJA_SAVE/$n.dir"
fi
exec "$ASSEMBLE_REAL_NINJA" "$@"
"""


def ninja_wrapper(build_base: Path, ninja: Path) -> tuple[Path, dict[str, str]]:
    """A ``ninja`` that saves each build.ninja it runs: (its directory, for the front of PATH; its
    environment)."""
    bin_dir, saved = build_base / "assemble-bin", build_base / "ninja-files"
    shutil.rmtree(saved, ignore_errors=True)
    saved.mkdir(parents=True)
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "ninja"
    atomic_write(wrapper, NINJA_WRAPPER, inside=build_base)
    wrapper.chmod(0o755)
    return bin_dir, {"ASSEMBLE_NINJA_SAVE": str(saved), "ASSEMBLE_REAL_NINJA": str(ninja)}


def export_compdb(build_base: Path, ninja: Path, target: Path) -> None:
    """The compile commands of every build.ninja the wrapper saved, as {directory, file, arguments}."""
    entries: list[dict[str, object]] = []
    saved = build_base / "ninja-files"
    for build_file in sorted(saved.glob("*.ninja"), key=lambda path: int(path.stem)):
        directory = build_file.with_suffix(".dir").read_text().strip()
        try:
            out = subprocess.run([str(ninja), "-f", str(build_file), "-t", "compdb"], cwd=directory,
                                 capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            continue
        for entry in json.loads(out):
            if str(entry.get("file", "")).endswith((".c", ".cc", ".cpp", ".cxx", ".cu")):
                arguments = unshimmed(shlex.split(entry["command"]))  # the real nvcc, not our sccache shim
                entries.append({"directory": entry["directory"], "file": entry["file"], "arguments": arguments})
    if entries:
        write_compdb(target, entries)


BACKEND: Backend = SetuptoolsBackend()  # backends.get finds it by the module's name
