"""The torch window of a wheel (``verify --torch window``): every torch minor release it should
work on, from its floor to the newest release the configured package index offers, each minor
at its latest patch.

The floor is the highest of what the wheel's objects need (the audit's ``min_torch``: the
release that added the newest stable-ABI shim symbol they import) and what the wheel declares
(each dependency's ``torch_target`` in its ``assembler.json``, its ``Requires-Dist: torch``
lower bound; the workspace's ``torch-target`` for a wheel without a record).

The releases are asked of the index by the installer that makes the verify environments
(``toolchain.installer``: uv, else pip), with the user's pip configuration (indexes, find-links,
constraints: ``toolchain.pipconfig``), for this interpreter's tags. So a listed release is one
``verify`` can install, and a pip constraint that caps torch caps the window too. The index is
walked down from the top: the newest release, then the newest below its minor, and so on until
none is above the floor (one resolution per minor; seconds with uv's cache).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from assembler.errors import AssembleError, InputError, NetworkError, ToolchainError
from assembler.manifest.model import Manifest
from assembler.toolchain.installer import Installer, install_error, installer
from assembler.toolchain.pipconfig import pip_settings, uv_environment, uv_flags
from assembler.verify.progress import wrapped
from assembler.verify.specs import wheel_record

WINDOW = "window"  # the spelling of `--torch window`
_MAX_MINORS = 100  # a walk down the index stops here whatever it finds (no index has that many minors above a floor)
_NO_SOLUTION = re.compile(r"No solution found|unsatisfiable|ResolutionImpossible|No matching distribution found"
                          r"|Could not find a version that satisfies")
_CUDA_LABEL = re.compile(r"^cu(\d+)(\d)$")  # cu130 -> 13.0, cu128 -> 12.8


@dataclass(frozen=True)
class Floor:
    """One lower bound on the window and what sets it."""

    version: str  # as written: "2.10" (a torch-target) or "2.13.0" (a shim symbol's release)
    source: str  # "symbols", "torch-target" or "requires-dist"
    detail: str  # who sets it, in words

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "source": self.source, "detail": self.detail}


@dataclass(frozen=True)
class Release:
    """One torch release of the window, as the index offers it."""

    version: str  # the public version verify asks for: "2.13.0"
    resolved: str  # what the installer picks for it: "2.13.0+cpu", "2.14.1"

    @property
    def cuda(self) -> str | None:
        """The CUDA its local label names (``+cu130`` -> "13.0", ``+cpu`` -> "cpu"); None when it
        has no label (PyPI's default build: its CUDA is read from the installed torch)."""
        local = Version(self.resolved).local
        if local is None:
            return None
        match = _CUDA_LABEL.match(local)
        return f"{match.group(1)}.{match.group(2)}" if match else local

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "resolved": self.resolved, "label_cuda": self.cuda}


@dataclass(frozen=True)
class TorchWindow:
    floor: Floor  # the highest of ``floors``: where the window starts
    floors: tuple[Floor, ...]
    releases: tuple[Release, ...]  # oldest first, one per minor
    index: str  # where the releases came from, in words (installer, pip configuration files)

    @property
    def versions(self) -> list[str]:
        return [release.version for release in self.releases]

    def describe(self) -> str:
        """One line for the progress output."""
        listed = ", ".join(r.resolved for r in self.releases)
        return f"torch window: {listed} (index: {self.index})"

    def to_json(self) -> dict[str, Any]:
        return {
            "floor": self.floor.to_json(), "floors": [floor.to_json() for floor in self.floors],
            "releases": [release.to_json() for release in self.releases], "index": self.index,
        }


def torch_window(wheel: Path, manifest: Manifest | None,
                 progress: Callable[[str], None] = lambda _: None) -> TorchWindow:
    """The window of ``wheel`` (see the module docstring). InputError (exit 2) when the wheel
    names no floor at all; ToolchainError (exit 7) when the index offers no release at or above
    it; NetworkError (exit 3) when the index cannot be reached."""
    floors = wheel_floors(wheel, manifest)
    if not floors:
        raise InputError(
            f"{wheel.name}: no torch floor to start a window from (no Requires-Dist on torch, no torch-target in its "
            "assembler.json, no stable-ABI shim symbol in its objects)",
            hint="name the releases to verify on: --torch X.Y.Z (repeatable)",
        )
    floor = max(floors, key=lambda f: Version(f.version))
    progress("\n".join(wrapped(f"torch window: from the floor {floor.version} ({floor.detail}); asking the package "
                                "index for each minor's latest release")))
    tool = installer()
    releases = offered_releases(floor.version, tool)
    index = index_description(tool)
    if not releases:
        newest = newest_release(tool)
        raise ToolchainError(
            f"the torch window of {wheel.name} is empty: its floor is torch {floor.version} ({floor.detail}), and the "
            f"newest release the package index offers is {newest or 'none'} ({index}).",
            hint="point pip's configuration at an index with newer torch releases, or lift the pip constraint that "
                 "caps torch (pip config list shows both)",
        )
    return TorchWindow(floor, tuple(floors), tuple(releases), index)


def wheel_floors(wheel: Path, manifest: Manifest | None) -> list[Floor]:
    """Every lower bound the wheel carries (see the module docstring), highest first."""
    from assembler.audit.wheel_scan import audit_paths

    found: list[Floor] = []
    [report] = audit_paths([wheel], keep_going=True)
    if report.min_torch:
        setter = max((e for e in report.extensions if e.min_torch), key=lambda e: Version(e.min_torch or "0"))
        symbols = ", ".join(setter.min_torch_symbols[:3]) or "the stable-ABI baseline"
        found.append(Floor(report.min_torch, "symbols", f"the shim symbols of {setter.path}: {symbols}"))
    if report.declared_torch and _is_version(report.declared_torch):
        found.append(Floor(report.declared_torch, "requires-dist", f"Requires-Dist: {report.requires_torch}"))
    found += _declared_targets(wheel, manifest)
    return sorted(found, key=lambda f: Version(f.version), reverse=True)


def _declared_targets(wheel: Path, manifest: Manifest | None) -> list[Floor]:
    """The TORCH_TARGET_VERSION each dependency was built for: the wheel's record (read
    defensively: a value that is not a version is left out), else the workspace's manifest."""
    record = wheel_record(wheel)
    targets: dict[str, str] = {}
    if record is not None:
        for name, entry in record["deps"].items():
            toolchain = entry.get("toolchain") if isinstance(entry, dict) else None
            target = toolchain.get("torch_target") if isinstance(toolchain, dict) else None
            if isinstance(target, str) and _is_version(target):
                targets[str(name)] = target
    elif manifest is not None:
        targets = {name: dep.torch_target for name, dep in manifest.deps.items()}
        targets.setdefault("[bundle]", manifest.bundle.torch_target)
    if not targets:
        return []
    top = max(targets.values(), key=Version)
    who = sorted(name for name, target in targets.items() if Version(target) == Version(top))
    return [Floor(top, "torch-target", f"torch-target {top} of {', '.join(who)}")]


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def offered_releases(floor: str, tool: Installer | None = None, limit: int = _MAX_MINORS) -> list[Release]:
    """The latest patch of each torch minor at or above ``floor`` that the index offers, oldest
    first (at most ``limit`` of them, the newest): the newest release, then the newest below its
    minor, until none is left."""
    tool = tool or installer()
    found: list[Release] = []
    below: Version | None = None
    for _ in range(_MAX_MINORS):
        if len(found) >= limit:
            break
        spec = f"torch>={floor}" + (f",<{below.major}.{below.minor}" if below is not None else "")
        resolved = resolve(spec, tool)
        if resolved is None:
            break
        version = Version(resolved)
        if not version.is_prerelease:  # pip's pick when only a pre-release is left in that minor: look below it
            found.append(Release(version.public, resolved))
        below = version
    return found[::-1]


def newest_release(tool: Installer | None = None) -> str | None:
    """The newest torch release the index offers here (with the user's pip constraints), or None."""
    releases = offered_releases("0", tool, limit=1)
    return releases[-1].resolved if releases else None


def resolve(spec: str, tool: Installer) -> str | None:
    """The version of torch the installer would pick for the requirement ``spec`` (no
    dependencies, binaries only), as the index writes it ("2.13.0+cpu"); None when no release
    satisfies it. uv is told to take no pre-release; pip takes one only when nothing else fits."""
    doing = f"asking the package index for {spec}"
    with tempfile.TemporaryDirectory(prefix="assemble-window-") as scratch:
        if tool.uv is not None:
            settings = pip_settings()
            command = [str(tool.uv), "pip", "compile", "-", "--no-deps", "--no-header", "--no-annotate", "--quiet",
                       "--python", sys.executable, "--only-binary", ":all:", "--prerelease", "disallow",
                       *uv_flags(settings)]
            env = uv_environment(settings, os.environ)
        else:
            command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
                       "--only-binary", ":all:", "--quiet", "--report", "-", "--disable-pip-version-check",
                       "--no-input", spec]
            env = dict(os.environ)
        try:
            result = subprocess.run(command, input=spec + "\n", capture_output=True, text=True, env=env, cwd=scratch,
                                    timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise ToolchainError(f"{doing}: {tool} did not run ({error})",
                                 hint="check that uv or pip runs here") from None
    output = result.stdout + result.stderr
    if result.returncode != 0:
        failure: AssembleError = install_error(output, doing)
        if isinstance(failure, NetworkError) or not _NO_SOLUTION.search(output):
            raise failure
        return None
    return _picked(result.stdout, tool, doing)


def _picked(stdout: str, tool: Installer, doing: str) -> str | None:
    """The torch version in uv's compiled requirements or pip's installation report."""
    version: str | None = None
    if tool.uv is not None:
        match = re.search(r"^torch==(\S+)", stdout, re.MULTILINE)
        version = match.group(1) if match else None
    else:
        try:
            report = json.loads(stdout)
            version = next(str(item["metadata"]["version"]) for item in report["install"]
                           if str(item["metadata"]["name"]).lower() == "torch")
        except (ValueError, KeyError, TypeError, StopIteration):
            version = None
    if version is None or not _is_version(version):
        raise ToolchainError(f"{doing}: {tool} answered without a torch version ({stdout.strip()[:200] or 'nothing'})",
                             hint="run it again; if it persists, report it with the installer's version")
    return version


def index_description(tool: Installer, environ: Mapping[str, str] | None = None) -> str:
    """Where the releases come from, in words: the installer and pip's configuration sources."""
    settings = pip_settings(environ)
    sources = ", ".join(settings.sources) or "no pip configuration: PyPI"
    return f"{tool}, {sources}"


def is_window(value: str) -> bool:
    return value.strip().lower() == WINDOW
