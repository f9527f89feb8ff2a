"""Select the CUDA toolkit ``--cuda X.Y`` asks for: a local one whose nvcc reports X.Y, else a
hermetic one assembled from NVIDIA's PyPI wheels into the cache. Never another version."""

from __future__ import annotations

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

from assembler.cache import cache_root, creating, touch
from assembler.errors import NetworkError, ToolchainError
from assembler.toolchain.installer import install, installer
from assembler.toolchain.venv import dist_versions

VERSION_RE = re.compile(r"^\d+\.\d+$")
RELEASE_RE = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)")
# The pieces nvcc needs to compile and link an extension: the driver and its host-side
# front ends, cicc/libnvvm, the CRT headers, CCCL (cub/thrust/libcu++) and libcudart.
HERMETIC_PACKAGES = ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-cuda-cccl", "nvidia-cuda-runtime", "nvidia-nvvm")
MARKER = ".assemble-toolkit.json"
TOOLKIT_DIRS = ("bin", "include", "lib", "nvvm")


@dataclass(frozen=True)
class CudaToolkit:
    version: str  # "13.2", what was asked
    release: str  # "13.2.86", what nvcc reports
    root: Path  # a CUDA_HOME: bin/nvcc, include/, lib/
    origin: str  # where it came from: "CUDA_HOME", "/usr/local/cuda-13.2", "PATH", "PyPI"
    packages: dict[str, str] = field(default_factory=dict)  # hermetic: wheel name -> version

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with this toolkit first and every other CUDA hint removed."""
        env = {k: v for k, v in base.items() if k not in {"CUDA_PATH", "CUDAToolkit_ROOT", "CUDA_BIN_PATH", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"}}
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


def select_cuda(version: str, progress: Callable[[str], None] = lambda _: None) -> CudaToolkit:
    """The toolkit for ``version`` (X.Y): a local one when its nvcc reports X.Y, else the PyPI
    wheels. Raises ToolchainError listing what was tried (NetworkError when PyPI is out of reach)."""
    if not VERSION_RE.match(version):
        raise ToolchainError(f"--cuda {version!r} is not a MAJOR.MINOR CUDA version", hint="pass e.g. --cuda 13.2")
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
            return CudaToolkit(version=version, release=found[1], root=root, origin=origin)
    try:
        return hermetic_cuda(version, progress)
    except (ToolchainError, NetworkError) as error:
        reach = "let this machine reach PyPI" if isinstance(error, NetworkError) else error.hint or "check the version"
        raise type(error)(
            f"no CUDA {version} toolkit: {'; '.join(tried)}; and from PyPI: {error.message}",
            hint=f"install CUDA {version} and set CUDA_HOME, or {reach}",
        ) from None


def hermetic_cuda(version: str, progress: Callable[[str], None] = lambda _: None) -> CudaToolkit:
    """CUDA ``version`` from NVIDIA's wheels, installed once into the cache and reused."""
    root = cache_root() / "toolchains"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"cuda-{version}-{_platform_key()}"
    marker = final / MARKER
    if not marker.is_file():
        with creating(final):
            if not marker.is_file():
                _install_hermetic(version, final, progress)
    touch(marker)
    recorded = json.loads(marker.read_text())
    toolkit = CudaToolkit(
        version=version, release=recorded["release"], root=final / "cuda", origin="PyPI", packages=recorded["packages"],
    )
    return toolkit


def _platform_key() -> str:
    return hashlib.sha256(f"{sys.platform}-{os.uname().machine}".encode()).hexdigest()[:8]


def _install_hermetic(version: str, final: Path, progress: Callable[[str], None]) -> None:
    shutil.rmtree(final, ignore_errors=True)
    staging = final.with_name(f".tmp-{final.name}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    requirements = [f"{name}=={version}.*" for name in HERMETIC_PACKAGES]
    tool = installer()
    started = time.monotonic()
    progress(f"installing CUDA {version} from PyPI with {tool} ({', '.join(HERMETIC_PACKAGES)})")
    try:
        staging.mkdir(parents=True)
        # uv needs no pip in this interpreter (a `uv tool install` or pipx venv has none)
        install(
            tool, Path(sys.executable), requirements, target=staging / "wheels", options=["--no-deps", "--only-binary", ":all:"],
            doing=f"installing {' '.join(requirements)}", progress=progress, started=started,
        )
        packages = dist_versions(staging / "wheels")
        toolkit = staging / "cuda"
        for package_root in sorted((staging / "wheels" / "nvidia").iterdir()):
            for sub in TOOLKIT_DIRS:
                if (package_root / sub).is_dir():
                    _merge_tree(package_root / sub, toolkit / sub)
        _complete_layout(toolkit)
        found = nvcc_release(toolkit / "bin" / "nvcc")
        if found is None or found[0] != version:
            raise ToolchainError(f"the nvcc in {', '.join(requirements)} reports {found[0] if found else 'nothing'}")
        (staging / MARKER).write_text(json.dumps({"release": found[1], "packages": packages}, indent=2, sort_keys=True) + "\n")
        staging.rename(final)
        progress(f"CUDA {version} ready in {time.monotonic() - started:.1f} s (nvcc {found[1]})")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


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
