"""Cached virtual environments, one per (Python major.minor, package pins), shared by every
workspace, made by uv from its cache (see ``installer``).

A venv is complete or absent: it is built in a temporary directory, its marker written last,
then renamed into place under a file lock, so a crash or a concurrent assemble never leaves a
half-installed environment that a later build would silently use.

A sealed venv (``verify``'s: the code of the wheel under test runs with its interpreter) is also
pristine or re-made: its files are copies, not hard links into uv's cache (an in-place write
would reach uv's cache and every environment linked to it), its byte code is compiled when it is
made (probes run with ``-B`` and write nothing), and a manifest of every entry (kind, mode,
size, mtime, ctime, inode; a link's target) is recorded before its marker. Each use compares the
tree with it; ctime cannot be set back by a process, so a file rewritten and its mtime restored
still shows. A changed environment is never used again: it is re-made (``ensure_venv``) or
discarded (``discard_changed``).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from assembler.cache import cache_root, creating, touch
from assembler.jsonfile import load
from assembler.toolchain.installer import create_venv, install, installer

MARKER = ".assemble-venv.json"
FILES = ".assemble-files.json"  # a sealed venv's manifest: every entry as it was made
_UNWATCHED = frozenset({MARKER, FILES})  # top-level files a use touches (the marker's mtime is the last use)
Manifest = dict[str, list[Any]]  # relative path ("." for the root) -> the entry's identity


def python_tag() -> str:
    """The interpreter identity that goes into a venv's key: implementation and major.minor (a
    point release keeps the ABI and the site-packages path, so it keeps the environments)."""
    return f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}"


def venv_key(packages: Sequence[str], constraints: Sequence[Path] = (), sealed: bool = False) -> str:
    parts: dict[str, object] = {"python": python_tag(), "packages": sorted(packages)}
    if constraints:
        parts["constraints"] = [path.read_text() for path in constraints]
    if sealed:
        parts["sealed"] = 1
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
    sealed: bool = False,
) -> Path:
    """A venv with ``packages`` (requirement strings, resolved under ``constraints`` files) installed,
    created on first use with uv (pip when uv cannot run) and reused while its interpreter exists
    (and, ``sealed``, while its files are as its manifest says: else it is made again).

    Raises ToolchainError naming the requirement no release satisfies, NetworkError when an
    index cannot be reached.
    """
    root = cache_root() / "venvs"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{label}-{venv_key(packages, constraints, sealed)}"
    if _usable(final, sealed):
        touch(final / MARKER)
        return final
    with creating(final):
        if _usable(final, sealed):
            return final
        if sealed and (final / MARKER).is_file():
            recorded = recorded_files(final)
            why = summary(changed_files(final, recorded)) if recorded is not None else f"its {FILES} is missing"
            progress(f"the {label} environment changed since it was made ({why}): making it again")
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
                # pip copies and compiles by default; uv hard-links from its cache and compiles nothing
                options=["--link-mode=copy", "--compile-bytecode"] if sealed and tool.uv is not None else (),
            )
            _relocate(staging, final)
            if sealed:
                _write_json(staging / FILES, snapshot(staging))
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


def _usable(path: Path, sealed: bool = False) -> bool:
    """Marked complete, and its interpreter still runs from where the venv points (a removed
    base Python, e.g. after a pyenv upgrade, leaves a dangling bin/python); sealed, its files
    still as its manifest recorded them."""
    if not ((path / MARKER).is_file() and venv_python(path).exists()):
        return False
    if not sealed:
        return True
    recorded = recorded_files(path)
    return recorded is not None and not changed_files(path, recorded)


def _write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, separators=(",", ":"), sort_keys=True) + "\n")


def snapshot(path: Path) -> Manifest:
    """Every entry under ``path`` (links not followed) with what a change to it changes: a file's
    mode, size, mtime, ctime and inode; a directory's mode and inode; a link's target. The
    marker and the manifest itself are left out (a use touches the marker)."""
    found: Manifest = {".": ["d", *_identity(os.lstat(path))[1:3]]}
    stack = [(str(path), "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                rel = prefix + entry.name
                if not prefix and entry.name in _UNWATCHED:
                    continue
                info = entry.stat(follow_symlinks=False)
                if entry.is_symlink():
                    found[rel] = ["l", os.readlink(entry.path)]
                elif entry.is_dir(follow_symlinks=False):
                    found[rel] = ["d", *_identity(info)[1:3]]
                    stack.append((entry.path, rel + "/"))
                else:
                    found[rel] = _identity(info)
    return found


def _identity(info: os.stat_result) -> list[Any]:
    return ["f", info.st_mode, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def recorded_files(path: Path) -> Manifest | None:
    """The manifest a sealed venv was made with; None when it has none or it does not read."""
    try:
        value = load(path / FILES)
    except (OSError, ValueError):  # jsonfile's errors are ValueErrors: too deep included
        return None
    return value if isinstance(value, dict) else None


def changed_files(path: Path, recorded: Mapping[str, list[Any]]) -> list[str]:
    """What differs between the tree at ``path`` and ``recorded``: "added X", "removed X",
    "changed X" (sorted; empty when nothing did). A tree that cannot be read is changed."""
    try:
        now = snapshot(path)
    except OSError as error:
        return [f"unreadable {error.filename or path} ({error.strerror or error})"]
    changes = [f"added {name}" for name in sorted(now.keys() - recorded.keys())]
    changes += [f"removed {name}" for name in sorted(recorded.keys() - now.keys())]
    changes += [f"changed {name}" for name in sorted(now.keys() & recorded.keys()) if now[name] != list(recorded[name])]
    return changes


def summary(changes: Sequence[str], shown: int = 3) -> str:
    """The first few changes in one line."""
    more = len(changes) - shown
    return "; ".join(changes[:shown]) + (f"; and {more} more" if more > 0 else "") if changes else "nothing"


def discard_changed(path: Path, recorded: Mapping[str, list[Any]]) -> bool:
    """Remove the sealed venv at ``path`` when it is still the one ``recorded`` describes (the
    same root directory) and differs from it; the next ``ensure_venv`` makes it again. Taken
    exclusively, so it waits for every other run using it. Whether it was removed."""
    with creating(path):
        try:
            root = os.lstat(path)
        except FileNotFoundError:
            return False
        if list(recorded.get(".", [])) != ["d", root.st_mode, root.st_ino] or not changed_files(path, recorded):
            return False  # made again meanwhile, or as recorded after all
        trash = path.with_name(f".trash-{path.name}-{os.getpid()}")
        os.replace(path, trash)
        shutil.rmtree(trash, ignore_errors=True)
        return True


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
