"""Cached virtual environments, one per (Python, package pins), shared by every workspace.

A venv is complete or absent: it is built in a temporary directory, its marker written last,
then renamed into place under a file lock, so a crash or a concurrent assemble never leaves a
half-installed environment that a later build would silently use.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from collections.abc import Callable, Sequence
from pathlib import Path

import filelock

from assembler.cache import cache_root
from assembler.errors import ToolchainError

MARKER = ".assemble-venv.json"
_NO_MATCH = re.compile(
    r"Could not find a version that satisfies the requirement (?P<req>\S+)(?: \(from versions: (?P<versions>[^)]*)\))?"
)


def python_tag() -> str:
    """The interpreter identity that goes into a venv's key: implementation and full version."""
    return f"{sys.implementation.name}-{'.'.join(map(str, sys.version_info[:3]))}"


def venv_key(packages: Sequence[str]) -> str:
    payload = json.dumps({"python": python_tag(), "packages": sorted(packages)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def venv_python(path: Path) -> Path:
    return path / "bin" / "python"


def site_packages(path: Path) -> Path:
    return next(path.glob("lib/python3*/site-packages"))


def installed_versions(path: Path) -> dict[str, str]:
    """Distribution name -> version, read from dist-info directory names (no interpreter start)."""
    versions: dict[str, str] = {}
    for info in site_packages(path).glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        versions[name.lower().replace("_", "-")] = version
    return versions


def ensure_venv(packages: Sequence[str], label: str, progress: Callable[[str], None] = lambda _: None) -> Path:
    """A venv with exactly ``packages`` (pip requirement strings) installed, created on first use.

    Raises ToolchainError naming the requirement pip could not satisfy.
    """
    root = cache_root() / "venvs"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{label}-{venv_key(packages)}"
    if (final / MARKER).is_file():
        return final
    with filelock.FileLock(str(final) + ".lock"):
        if (final / MARKER).is_file():
            return final
        if final.exists():  # an older, unmarked tree: never trust it
            shutil.rmtree(final)
        for leftover in root.glob(f".tmp-{final.name}-*"):  # from a creation that was killed
            shutil.rmtree(leftover, ignore_errors=True)
        staging = root / f".tmp-{final.name}-{os.getpid()}"
        try:
            progress(f"creating {label} environment ({', '.join(packages)})")
            venv.EnvBuilder(with_pip=True, symlinks=True, clear=True).create(staging)
            _pip_install(staging, packages, label)
            _relocate(staging, final)
            marker = {"packages": sorted(packages), "python": python_tag(), "installed": installed_versions(staging)}
            (staging / MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
            os.replace(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final


def _pip_install(path: Path, packages: Sequence[str], label: str) -> None:
    command = [
        str(venv_python(path)), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
        "--progress-bar", "off", *packages,
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode == 0:
        return
    output = result.stdout + result.stderr
    (path.parent / f"{label}-pip-failure.log").write_text(output)
    match = _NO_MATCH.search(output)
    if match:
        versions = (match.group("versions") or "").strip()
        hint = f"available: {versions}" if versions and versions != "none" else "check the version and that PyPI is reachable"
        raise ToolchainError(f"cannot install {match.group('req')} into the {label} environment: no matching release", hint=hint)
    last = next((line for line in reversed(output.splitlines()) if line.strip()), "pip failed")
    raise ToolchainError(
        f"cannot create the {label} environment ({', '.join(packages)}): {last.strip()}",
        hint=f"full pip output: {path.parent / f'{label}-pip-failure.log'}",
    )


def _relocate(staging: Path, final: Path) -> None:
    """Point the scripts pip wrote (their shebangs name the staging path) at the final path."""
    old, new = str(staging).encode(), str(final).encode()
    for script in [*(staging / "bin").iterdir(), staging / "pyvenv.cfg"]:
        if script.is_symlink() or not script.is_file() or script.stat().st_size > 1 << 20:
            continue
        data = script.read_bytes()
        if old in data and b"\0" not in data:
            script.write_bytes(data.replace(old, new))
