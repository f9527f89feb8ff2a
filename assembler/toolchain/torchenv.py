"""The build environment: a cached venv with the torch asked for and the build tools pinned by
``assembler/data/build-constraints.txt`` (scikit-build-core, PyPI cmake >= 3.26 for
Development.SABIModule, ninja, setuptools, wheel). Its versions are read back and checked, so a
build never runs against a torch or tools other than the ones requested."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from assembler.errors import ToolchainError
from assembler.jsonfile import load
from assembler.toolchain.venv import MARKER, ensure_venv, installed_versions, site_packages, venv_python

BUILD_CONSTRAINTS = Path(__file__).resolve().parent.parent / "data" / "build-constraints.txt"
BUILD_TOOLS = ("scikit-build-core", "cmake", "ninja", "setuptools", "wheel")


def pinned_build_tools() -> dict[str, str]:
    """Tool -> the exact version ``build-constraints.txt`` pins."""
    pins: dict[str, str] = {}
    for line in BUILD_CONSTRAINTS.read_text().splitlines():
        requirement = line.split("#", 1)[0].strip()
        if requirement:
            name, _, version = requirement.partition("==")
            pins[name.strip()] = version.strip()
    return pins


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
    setuptools: str = ""
    wheel: str = ""
    installer: str = ""  # what made the environment, e.g. "uv 0.13.9"
    python_version: str = field(default="", compare=False)  # the interpreter's full version, e.g. "3.11.7"

    def tool_versions(self) -> dict[str, str]:
        """The build tools for the build report and artifact keys: tool -> exact version."""
        return {"scikit-build-core": self.scikit_build_core, "cmake": self.cmake, "ninja": self.ninja,
                "setuptools": self.setuptools, "wheel": self.wheel}


def torch_requirement(version: str) -> str:
    try:
        Version(version)
    except InvalidVersion:
        raise ToolchainError(f"{version!r} is not a torch version", hint="pass e.g. --torch 2.13.0") from None
    return f"torch=={version}"


def ensure_build_env(torch: str, progress: Callable[[str], None] = lambda _: None) -> BuildEnv:
    """The build venv for ``torch`` (exact version), created on first use and cached."""
    path = ensure_venv(
        [torch_requirement(torch), *BUILD_TOOLS], label=f"build-torch{torch}", progress=progress,
        constraints=[BUILD_CONSTRAINTS],
    )
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
    pins = pinned_build_tools()
    drifted = [f"{tool} {versions.get(tool, '(none)')}" for tool,
               version in pins.items() if versions.get(tool) != version]
    if drifted:
        raise ToolchainError(
            f"the build environment {path} holds {', '.join(drifted)}, not the versions of {BUILD_CONSTRAINTS.name}",
            hint=f"delete {path} and re-run",
        )
    marker = load(path / MARKER, hint=f"delete {path} and re-run")
    if not isinstance(marker, dict):
        raise ToolchainError(f"{path / MARKER}: not a JSON object", hint=f"delete {path} and re-run")
    return BuildEnv(
        path=path,
        python=venv_python(path),
        torch=installed,
        torch_dir=torch_dir,
        torch_cuda=_torch_cuda(torch_dir),
        cmake=versions["cmake"],
        ninja=versions["ninja"],
        scikit_build_core=versions["scikit-build-core"],
        setuptools=versions["setuptools"],
        wheel=versions["wheel"],
        installer=str(marker.get("installer", "pip")),
        python_version=str(marker.get("python_version", "")),
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
