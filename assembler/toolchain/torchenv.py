"""The build environment: a cached venv with the torch asked for, scikit-build-core, PyPI cmake
(>= 3.26 for Development.SABIModule) and ninja. Its versions are read back and checked, so a
build never runs against a torch other than the one requested."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from assembler.errors import ToolchainError
from assembler.toolchain.venv import ensure_venv, installed_versions, site_packages, venv_python

BUILD_TOOLS = ("scikit-build-core>=0.10", "cmake>=3.26", "ninja>=1.11")


@dataclass(frozen=True)
class BuildEnv:
    path: Path
    python: Path
    torch: str  # installed version, e.g. "2.13.0+cpu"
    torch_dir: Path  # site-packages/torch: headers under include/, libraries under lib/
    torch_cuda: str | None  # CUDA version torch was built with (None for a CPU build)
    cmake: str
    ninja: str
    scikit_build_core: str


def torch_requirement(version: str) -> str:
    try:
        Version(version)
    except InvalidVersion:
        raise ToolchainError(f"{version!r} is not a torch version", hint="pass e.g. --torch 2.13.0") from None
    return f"torch=={version}"


def ensure_build_env(torch: str, progress: Callable[[str], None] = lambda _: None) -> BuildEnv:
    """The build venv for ``torch`` (exact version), created on first use and cached."""
    path = ensure_venv([torch_requirement(torch), *BUILD_TOOLS], label=f"build-torch{torch}", progress=progress)
    return describe_build_env(path, torch)


def describe_build_env(path: Path, torch: str) -> BuildEnv:
    versions = installed_versions(path)
    installed = versions.get("torch")
    if installed is None or not _same_release(installed, torch):
        raise ToolchainError(
            f"the build environment {path} holds torch {installed or '(none)'}, not {torch}",
            hint=f"delete {path} and re-run",
        )
    torch_dir = site_packages(path) / "torch"
    return BuildEnv(
        path=path,
        python=venv_python(path),
        torch=installed,
        torch_dir=torch_dir,
        torch_cuda=_torch_cuda(torch_dir),
        cmake=versions["cmake"],
        ninja=versions["ninja"],
        scikit_build_core=versions["scikit-build-core"],
    )


def _same_release(installed: str, requested: str) -> bool:
    """2.13.0+cpu satisfies 2.13.0 (pip semantics); a requested local label must match exactly."""
    want, have = Version(requested), Version(installed)
    return want == have if want.local else want.public == have.public


def _torch_cuda(torch_dir: Path) -> str | None:
    """torch.version.cuda, read from torch/version.py without importing torch (seconds saved)."""
    text = (torch_dir / "version.py").read_text()
    match = re.search(r"^cuda(?:: [^=]+)? = ['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match.group(1) if match else None
