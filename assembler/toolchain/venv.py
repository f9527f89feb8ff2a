"""Cached virtual environments, one per (Python major.minor, package pins), shared by every
workspace, made by uv from its cache (see ``installer``).

A venv is complete or absent: it is built in a temporary directory, its marker written last,
then renamed into place under a file lock, so a crash or a concurrent assemble never leaves a
half-installed environment that a later build would silently use.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from assembler.cache import cache_root, creating, touch
from assembler.toolchain.installer import create_venv, install, installer

MARKER = ".assemble-venv.json"


def python_tag() -> str:
    """The interpreter identity that goes into a venv's key: implementation and major.minor (a
    point release keeps the ABI and the site-packages path, so it keeps the environments)."""
    return f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}"


def venv_key(packages: Sequence[str], constraints: Sequence[Path] = ()) -> str:
    parts: dict[str, object] = {"python": python_tag(), "packages": sorted(packages)}
    if constraints:
        parts["constraints"] = [path.read_text() for path in constraints]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def venv_python(path: Path) -> Path:
    return path / "bin" / "python"


def site_packages(path: Path) -> Path:
    return next(path.glob("lib/python3*/site-packages"))


def installed_versions(path: Path) -> dict[str, str]:
    """Distribution name -> version in the venv at ``path`` (no interpreter start)."""
    return dist_versions(site_packages(path))


def dist_versions(directory: Path) -> dict[str, str]:
    """Distribution name -> version, read from the names of the dist-info directories that pip
    installed into ``directory`` (site-packages, or a ``pip install --target`` directory)."""
    versions: dict[str, str] = {}
    for info in directory.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        versions[name.lower().replace("_", "-")] = version
    return dict(sorted(versions.items()))


def ensure_venv(
    packages: Sequence[str],
    label: str,
    progress: Callable[[str], None] = lambda _: None,
    constraints: Sequence[Path] = (),
) -> Path:
    """A venv with ``packages`` (requirement strings, resolved under ``constraints`` files) installed,
    created on first use with uv (pip when uv cannot run) and reused while its interpreter exists.

    Raises ToolchainError naming the requirement no release satisfies, NetworkError when an
    index cannot be reached.
    """
    root = cache_root() / "venvs"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{label}-{venv_key(packages, constraints)}"
    if _usable(final):
        touch(final / MARKER)
        return final
    with creating(final):
        if _usable(final):
            return final
        if final.exists():  # an older, unmarked tree, or one whose interpreter is gone: never trust it
            shutil.rmtree(final)
        for leftover in root.glob(f".tmp-{final.name}-*"):  # from a creation that was killed
            shutil.rmtree(leftover, ignore_errors=True)
        staging = root / f".tmp-{final.name}-{os.getpid()}"
        tool = installer()
        started = time.monotonic()
        try:
            progress(f"creating {label} environment with {tool} ({', '.join(packages)})")
            create_venv(tool, staging, progress, started)
            install(
                tool, venv_python(staging), packages, constraints=constraints, progress=progress, started=started,
                doing=f"cannot create the {label} environment ({', '.join(packages)})",
                log=root / f"{label}-install-failure.log",
            )
            _relocate(staging, final)
            installed = installed_versions(staging)
            marker = {
                "packages": sorted(packages), "python": python_tag(), "python_version": platform.python_version(),
                "installer": str(tool), "installed": installed,
                "constraints": {path.name: path.read_text() for path in constraints},
            }
            (staging / MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
            os.replace(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    progress(f"{label} environment ready in {time.monotonic() - started:.1f} s ({len(installed)} packages)")
    return final


def _usable(path: Path) -> bool:
    """Marked complete, and its interpreter still runs from where the venv points (a removed
    base Python, e.g. after a pyenv upgrade, leaves a dangling bin/python)."""
    return (path / MARKER).is_file() and venv_python(path).exists()


def _relocate(staging: Path, final: Path) -> None:
    """Point the scripts the installer wrote (their shebangs name the staging path) at the final
    path. Each is rewritten into a new file: uv hard-links from its cache, and an in-place write
    would change the cache's copy too."""
    old, new = str(staging).encode(), str(final).encode()
    for script in [*(staging / "bin").iterdir(), staging / "pyvenv.cfg"]:
        if script.is_symlink() or not script.is_file() or script.stat().st_size > 1 << 20:
            continue
        data = script.read_bytes()
        if old in data and b"\0" not in data:
            fresh = script.with_name(f".{script.name}.relocated")
            fresh.write_bytes(data.replace(old, new))
            os.chmod(fresh, script.stat().st_mode)
            os.replace(fresh, script)
