"""Select the CUDA toolkit ``--cuda X.Y`` asks for: a local one whose nvcc reports X.Y, else a
hermetic one assembled from NVIDIA's PyPI wheels into the cache. Never another version.

The hermetic toolkit is NVIDIA's ``cuda-toolkit`` wheel with the extras a build needs: its
``nvcc``, ``cccl`` and ``cudart`` extras always, and each of the dependency's
``cuda-components`` (``curand``, ``cublas``, ``nvrtc``, ...). The metapackage pins every
library's wheel to its CUDA release (curand 10.4.2 is CUDA 13.2's) and names CUDA 12's
``-cu12`` wheels and CUDA 13's unsuffixed ones alike, so 12.x and 13.x install the same way.
Each set of components is its own toolkit directory in the cache (``cuda-13.2-<platform>`` or
``cuda-13.2-<platform>-curand+nvrtc``), installed once and reused; a local toolkit is used
only when it has every component's headers."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from assembler import jsonfile
from assembler.cache import KINDS, cache_root, creating, touch
from assembler.errors import NetworkError, ToolchainError
from assembler.toolchain.installer import install, installer
from assembler.toolchain.venv import dist_versions

VERSION_RE = re.compile(r"^\d+\.\d+$")
RELEASE_RE = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)")
# The pieces nvcc needs to compile and link an extension, as cuda-toolkit extras: the driver
# and its host-side front ends, cicc/libnvvm and the CRT headers (nvcc), CCCL (cub/thrust/libcu++)
# and libcudart (cudart).
METAPACKAGE = "cuda-toolkit"
BASE_EXTRAS = ("nvcc", "cccl", "cudart")
# The file that shows a toolkit has a component (a local toolkit is used only when it has them all).
COMPONENT_FILES = {
    "cublas": "include/cublas_v2.h", "cufft": "include/cufft.h", "cufile": "include/cufile.h",
    "cupti": "include/cupti.h", "curand": "include/curand.h", "cusolver": "include/cusolverDn.h",
    "cusparse": "include/cusparse.h", "npp": "include/npp.h", "nvfatbin": "include/nvFatbin.h",
    "nvjitlink": "include/nvJitLink.h", "nvjpeg": "include/nvjpeg.h", "nvml": "include/nvml.h",
    "nvptxcompiler": "include/nvPTXCompiler.h", "nvrtc": "include/nvrtc.h", "nvtx": "include/nvtx3/nvToolsExt.h",
    "profiler": "include/cuda_profiler_api.h", "culibos": "lib/libculibos.a",
}
MARKER = ".assemble-toolkit.json"
# CUDA 12's nvidia-cuda-nvcc-cu12 wheels (12.0.76 to 12.9.86) hold only bin/ptxas, nvvm and the
# CRT headers, for JIT users; the nvcc driver is on PyPI from CUDA 13.0 on. An older major is
# refused before anything is downloaded (CUDA 12.4's wheels are ~24 MB of no nvcc).
FIRST_COMPLETE_MAJOR = 13
TOOLKIT_DIRS = ("bin", "include", "lib", "nvvm")


@dataclass(frozen=True)
class CudaToolkit:
    version: str  # "13.2", what was asked
    release: str  # "13.2.86", what nvcc reports
    root: Path  # a CUDA_HOME: bin/nvcc, include/, lib/
    origin: str  # where it came from: "CUDA_HOME", "/usr/local/cuda-13.2", "PATH", "PyPI"
    packages: dict[str, str] = field(default_factory=dict)  # hermetic: wheel name -> version
    components: tuple[str, ...] = ()  # the cuda-components it was selected with (sorted)

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with this toolkit first and every other CUDA hint removed."""
        env = {k: v for k,
               v in base.items()
               if k not in {"CUDA_PATH", "CUDAToolkit_ROOT", "CUDA_BIN_PATH", "NVCC_PREPEND_FLAGS",
                            "NVCC_APPEND_FLAGS"}}
        env["CUDA_HOME"] = str(self.root)
        env["CUDACXX"] = str(self.nvcc)
        env["PATH"] = os.pathsep.join([str(self.root / "bin"), env.get("PATH", "")])
        return env


def nvcc_release(nvcc: Path) -> tuple[str, str] | None:
    """(X.Y, X.Y.Z) that ``nvcc --version`` reports, or None when it does not run."""
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60, check=False).stdout
    except OSError:
        return None
    match = RELEASE_RE.search(out)
    return (match.group(1), match.group(2)) if match else None


def _local_candidates(version: str) -> list[tuple[str, Path]]:
    candidates: list[tuple[str, Path]] = []
    if os.environ.get("CUDA_HOME"):
        candidates.append(("CUDA_HOME", Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"))
    candidates.append((f"/usr/local/cuda-{version}", Path(f"/usr/local/cuda-{version}/bin/nvcc")))
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(("PATH", Path(on_path)))
    return candidates


def missing_components(root: Path, components: tuple[str, ...]) -> list[str]:
    """The components whose headers (or library) the toolkit at ``root`` lacks."""
    return [name for name in components if not (root / COMPONENT_FILES[name]).exists()]


def select_cuda(version: str, progress: Callable[[str], None] = lambda _: None,
                components: tuple[str, ...] = ()) -> CudaToolkit:
    """The toolkit for ``version`` (X.Y) with ``components``: a local one when its nvcc reports
    X.Y and it has them, else the PyPI wheels. Raises ToolchainError listing what was tried
    (NetworkError when PyPI is out of reach)."""
    if not VERSION_RE.match(version):
        raise ToolchainError(f"--cuda {version!r} is not a MAJOR.MINOR CUDA version", hint="pass e.g. --cuda 13.2")
    components = tuple(sorted(set(components)))
    tried: list[str] = []
    for origin, nvcc in _local_candidates(version):
        if not nvcc.is_file():
            tried.append(f"{origin}: no {nvcc}")
            continue
        found = nvcc_release(nvcc)
        if found is None:
            tried.append(f"{origin}: {nvcc} does not run")
        elif found[0] != version:
            tried.append(f"{origin}: {nvcc} is CUDA {found[0]}")
        else:
            root = nvcc.resolve().parent.parent
            lacking = missing_components(root, components)
            if lacking:
                tried.append(f"{origin}: {root} lacks "
                             f"{', '.join(f'{name} ({COMPONENT_FILES[name]})' for name in lacking)}")
                continue
            return CudaToolkit(version=version, release=found[1], root=root, origin=origin, components=components)
    try:
        return hermetic_cuda(version, progress, components)
    except (ToolchainError, NetworkError) as error:
        reach = "let this machine reach PyPI" if isinstance(error, NetworkError) else error.hint or "check the version"
        raise type(error)(
            f"no CUDA {version} toolkit: {'; '.join(tried)}; and from PyPI: {error.message}",
            hint=f"install CUDA {version} and set CUDA_HOME, or {reach}",
        ) from None


def hermetic_cuda(version: str, progress: Callable[[str], None] = lambda _: None,
                  components: tuple[str, ...] = ()) -> CudaToolkit:
    """CUDA ``version`` with ``components`` from NVIDIA's wheels, installed once into the cache and reused."""
    if int(version.split(".")[0]) < FIRST_COMPLETE_MAJOR:
        raise ToolchainError(
            f"PyPI has no nvcc for CUDA {version}: NVIDIA's CUDA {version.split('.')[0]} wheels "
            f"(nvidia-cuda-nvcc-cu{version.split('.')[0]}) hold only ptxas; nvcc is there from CUDA "
            f"{FIRST_COMPLETE_MAJOR}.0 on",
            hint=f"use --cuda {FIRST_COMPLETE_MAJOR}.0 or newer, which PyPI has complete")
    root = cache_root() / "toolchains"
    root.mkdir(parents=True, exist_ok=True)
    components = tuple(sorted(set(components)))
    final = root / toolkit_dir_name(version, components)
    marker = final / MARKER
    if not marker.is_file():
        with creating(final):
            if not marker.is_file():
                _install_hermetic(version, final, progress, components)
    touch(marker)
    recorded = jsonfile.load(marker, hint=f"delete {final} and run again: it is re-installed")
    toolkit = CudaToolkit(
        version=version, release=recorded["release"], root=final / "cuda", origin="PyPI", packages=recorded["packages"],
        components=components,
    )
    return toolkit


def toolkit_dir_name(version: str, components: tuple[str, ...]) -> str:
    """``cuda-13.2-<platform>``, with ``-curand+nvrtc`` for components (a digest when that is long)."""
    base = f"cuda-{version}-{_platform_key()}"
    if not components:
        return base
    joined = "+".join(components)
    return f"{base}-{joined if len(joined) <= 60 else hashlib.sha256(joined.encode()).hexdigest()[:12]}"


def toolkit_requirement(version: str, components: tuple[str, ...]) -> str:
    """What the hermetic toolkit installs: ``cuda-toolkit[nvcc,cccl,cudart,curand]==13.2.*``."""
    return f"{METAPACKAGE}[{','.join((*BASE_EXTRAS, *components))}]=={version}.*"


def published_versions(package: str = METAPACKAGE) -> list[str] | None:
    """The releases of ``package`` the configured index serves (PEP 691 JSON, else the HTML
    simple page), newest last; None when the index cannot be asked."""
    import urllib.request

    from assembler.toolchain.pipconfig import pip_settings

    settings = pip_settings()
    if settings.no_index:
        return None
    index = (settings.index_url or "https://pypi.org/simple").rstrip("/")
    request = urllib.request.Request(f"{index}/{package}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read().decode(errors="replace")
    except (OSError, ValueError):
        return None
    names = re.findall(rf"{package.replace('-', '[-_]')}-(\d[\w.]*?)(?:\.tar\.gz|-py)", body)
    from packaging.version import InvalidVersion, Version

    found: set[Version] = set()
    for name in names:
        try:
            found.add(Version(name))
        except InvalidVersion:
            continue
    return [str(v) for v in sorted(found)]


def _minor_versions(versions: list[str]) -> list[str]:
    """X.Y of each release, once, in order: 12.8.0, 12.8.1, 12.9.0 -> 12.8, 12.9."""
    # not 0.0.x placeholders
    return list(dict.fromkeys(".".join(v.split(".")[:2]) for v in versions if int(v.split(".")[0]) >= 11))


def _platform_key() -> str:
    return hashlib.sha256(f"{sys.platform}-{os.uname().machine}".encode()).hexdigest()[:8]


def _install_hermetic(version: str, final: Path, progress: Callable[[str], None], components: tuple[str, ...]) -> None:
    shutil.rmtree(final, ignore_errors=True)
    staging = final.with_name(f".tmp-{final.name}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    requirement = toolkit_requirement(version, components)
    tool = installer()
    started = time.monotonic()
    progress(f"installing CUDA {version} from PyPI with {tool} ({requirement})")
    try:
        staging.mkdir(parents=True)
        # uv needs no pip in this interpreter (a `uv tool install` or pipx venv has none). The
        # metapackage's dependencies are the pinned nvidia-* wheels of the extras asked for.
        try:
            install(
                tool, Path(sys.executable), [requirement], target=staging / "wheels",
                options=["--only-binary", ":all:"],
                doing=f"installing {requirement}", progress=progress, started=started,
            )
        except ToolchainError as error:
            raise _no_release(version, error) from None
        _check_extras(staging / "wheels", version, components)
        packages = {name: v for name, v in dist_versions(staging / "wheels").items() if name != METAPACKAGE}
        toolkit = staging / "cuda"
        for package_root in sorted((staging / "wheels" / "nvidia").iterdir()):
            for sub in TOOLKIT_DIRS:
                if (package_root / sub).is_dir():
                    _merge_tree(package_root / sub, toolkit / sub)
        _complete_layout(toolkit)
        if not (toolkit / "bin" / "nvcc").is_file():
            raise _no_nvcc(version, packages)
        found = nvcc_release(toolkit / "bin" / "nvcc")
        if found is None or found[0] != version:
            raise ToolchainError(f"the nvcc of {requirement} reports {found[0] if found else 'nothing'}")
        lacking = missing_components(toolkit, components)
        if lacking:
            raise ToolchainError(f"{requirement} installed no {', '.join(COMPONENT_FILES[name] for name in lacking)}")
        (staging / MARKER).write_text(json.dumps({"release": found[1], "packages": packages}, indent=2, sort_keys=True)
                                      + "\n")
        staging.rename(final)
        progress(f"CUDA {version} ready in {time.monotonic() - started:.1f} s (nvcc {found[1]})")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _no_release(version: str, error: ToolchainError) -> ToolchainError:
    """A version NVIDIA publishes no wheels for, said with the versions that exist (the
    installer's own resolver message runs to hundreds of characters)."""
    published = published_versions()
    if published is None:
        return error
    minors = _minor_versions(published)
    if version in minors:
        return error  # it exists: something else failed
    complete = [minor for minor in minors if int(minor.split(".")[0]) >= FIRST_COMPLETE_MAJOR]
    return ToolchainError(
        f"NVIDIA publishes no CUDA {version} wheels ({METAPACKAGE} exists for {', '.join(minors)}; "
        f"those with an nvcc: {', '.join(complete) or 'none'})",
        hint=f"pick one of those, e.g. --cuda {complete[-1] if complete else minors[-1]}")


def _no_nvcc(version: str, packages: dict[str, str]) -> ToolchainError:
    nvcc_wheel = next((f"{name} {v}" for name, v in packages.items() if name.startswith("nvidia-cuda-nvcc")),
                      "its nvcc wheel")
    return ToolchainError(
        f"NVIDIA's CUDA {version} wheels ship no nvcc ({nvcc_wheel} holds only ptxas; PyPI has nvcc from CUDA "
        f"{FIRST_COMPLETE_MAJOR}.0 on)",
        hint=f"use --cuda {FIRST_COMPLETE_MAJOR}.0 or newer, which PyPI has complete")


def _check_extras(wheels: Path, version: str, components: tuple[str, ...]) -> None:
    """Every component is an extra of the installed metapackage (an installer only warns about
    an unknown extra, and the toolkit would silently lack it)."""
    provided: set[str] = set()
    for metadata in wheels.glob(f"{METAPACKAGE.replace('-', '_')}-*.dist-info/METADATA"):
        provided |= {line.split(":", 1)[1].strip() for line in metadata.read_text(errors="replace").splitlines()
                     if line.startswith("Provides-Extra:")}
    unknown = [name for name in (*BASE_EXTRAS, *components) if name not in provided]
    if unknown:
        raise ToolchainError(f"CUDA {version} on PyPI has no {', '.join(unknown)} component ({METAPACKAGE} provides "
                             f"{', '.join(sorted(provided)) or 'nothing'})",
                             hint="remove it from cuda-components, or pick a CUDA version that has it")


def _merge_tree(source: Path, target: Path) -> None:
    """Move ``source``'s entries under ``target``, merging directories the wheels share
    (CUDA 12 ships one package directory per component, CUDA 13 one nvidia/cu13 tree)."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        destination = target / entry.name
        if entry.is_dir() and not entry.is_symlink() and destination.is_dir():
            _merge_tree(entry, destination)
        elif not destination.exists():
            entry.rename(destination)


def _complete_layout(toolkit: Path) -> None:
    """What a CUDA_HOME has and the wheels lack: the unversioned libcudart.so link that
    `-lcudart` and CMake's FindCUDAToolkit look for, and lib64/."""
    lib = toolkit / "lib"
    for versioned in sorted(lib.glob("lib*.so.*")):
        plain = lib / (versioned.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(versioned.name)
    if not (toolkit / "lib64").exists():
        (toolkit / "lib64").symlink_to("lib")


def versions_on_machine() -> list[str]:
    """The CUDA X.Y versions `--cuda` finds here without a download: hermetic toolkits in the
    cache and local ``/usr/local/cuda-X.Y`` (shell completion; read from directory names, no nvcc)."""
    found: set[str] = set()
    toolchains = cache_root() / KINDS["toolchains"]
    local = Path("/usr/local")
    for base, prefix in ((toolchains, "cuda-"), (local, "cuda-")):
        with contextlib.suppress(OSError):
            for path in base.iterdir():
                version = path.name.removeprefix(prefix).split("-", 1)[0]
                if path.name.startswith(prefix) and path.is_dir() and re.fullmatch(r"\d+\.\d+", version):
                    found.add(version)
    return sorted(found, key=lambda v: tuple(int(part) for part in v.split(".")))
