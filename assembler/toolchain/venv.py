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
from assembler.errors import AssembleError, NetworkError, ToolchainError

MARKER = ".assemble-venv.json"
_NO_MATCH = re.compile(
    r"Could not find a version that satisfies the requirement (?P<req>\S+)(?: \(from versions: (?P<versions>[^)]*)\))?"
)
# What pip (urllib3 underneath) prints when it cannot reach an index. pip then also reports "No
# matching distribution", which alone means the version does not exist: these lines tell the two apart.
_UNREACHABLE = re.compile(
    r"Could not fetch URL|Failed to establish a new connection|NewConnectionError|ConnectTimeoutError"
    r"|ReadTimeoutError|ProxyError|Temporary failure in name resolution|Name or service not known"
    r"|Network is unreachable|Connection refused|SSLError|certificate verify failed"
)
_CONNECTION_DETAIL = re.compile(r"Failed to establish a new connection: ([^'\")]+)")
_INDEXES = re.compile(r"^Looking in indexes: (.+)$", re.MULTILINE)


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


def pip_error(output: str, doing: str, fallback: type[AssembleError] = ToolchainError, log: Path | None = None) -> AssembleError:
    """The error for a failed ``pip install``, read from its output: NetworkError (exit 3) when an
    index could not be reached, ToolchainError naming the requirement no release satisfies, else
    ``fallback`` with pip's last line. ``doing`` says what was being installed."""
    see = f"full pip output: {log}" if log is not None else None
    unreachable = _UNREACHABLE.search(output)
    if unreachable is not None:
        detail = _CONNECTION_DETAIL.search(output)
        why = detail.group(1).strip() if detail else unreachable.group(0)
        indexes = _INDEXES.search(output)
        where = f"; indexes: {indexes.group(1).strip()}" if indexes else ""
        return NetworkError(
            f"{doing}: a package index could not be reached ({why}{where})",
            hint=see or "check the network, the proxy and pip's index settings (pip config list)",
        )
    match = _NO_MATCH.search(output)
    if match:
        versions = (match.group("versions") or "").strip()
        hint = f"available: {versions}" if versions and versions != "none" else "check the version"
        return ToolchainError(f"{doing}: no release of {match.group('req')}", hint=hint)
    errors = [line.removeprefix("ERROR: ").strip() for line in output.splitlines() if line.startswith("ERROR:")]
    last = errors[0] if errors else next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "pip failed")
    return fallback(f"{doing}: {last}", hint=see)


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
    log = path.parent / f"{label}-pip-failure.log"
    log.write_text(output)
    raise pip_error(output, f"cannot create the {label} environment ({', '.join(packages)})", log=log)


def _relocate(staging: Path, final: Path) -> None:
    """Point the scripts pip wrote (their shebangs name the staging path) at the final path."""
    old, new = str(staging).encode(), str(final).encode()
    for script in [*(staging / "bin").iterdir(), staging / "pyvenv.cfg"]:
        if script.is_symlink() or not script.is_file() or script.stat().st_size > 1 << 20:
            continue
        data = script.read_bytes()
        if old in data and b"\0" not in data:
            script.write_bytes(data.replace(old, new))
