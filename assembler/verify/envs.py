"""One cached venv per torch version to verify against, holding torch and nothing else.

The venvs come from the shared ``ensure_venv`` (complete-or-absent, file-locked, keyed by the
interpreter and the pins), so a 5.5 GB CUDA torch is downloaded once per cache. The wheel under
test is never installed into them: a verify run installs it into a scratch directory instead.
They are sealed (``toolchain.venv``): copies, not links into uv's cache, with a manifest of
their files. The wheel's code runs with their interpreter, so the runner makes them read-only
for the probe where the kernel allows it, and compares each with the manifest it was found with
after every run; one that changed fails the run and is made again.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.errors import AssembleError, InputError, NetworkError, ToolchainError
from assembler.jsonfile import loads
from assembler.toolchain.installer import installer
from assembler.toolchain.torchenv import torch_requirement
from assembler.toolchain.venv import ensure_venv, installed_versions, recorded_files, venv_python


@dataclass(frozen=True)
class TorchEnv:
    requested: str  # the version asked for, e.g. "2.14.1"; with --python "2.11.0+cu130 (/usr/bin/python3)"
    installed: str  # what pip resolved it to, e.g. "2.14.1+cu130" or "2.13.0+cpu"
    path: Path
    python: Path
    given: bool = False  # an interpreter the user named (--python): used as it is, never created
    # a cached environment's manifest as this run found it (toolchain.venv.snapshot); None for --python
    files: Mapping[str, list[Any]] | None = field(default=None, compare=False, repr=False)


# Run by the named interpreter: its torch version and prefix without importing torch (seconds).
_QUERY = """
import importlib.metadata, importlib.util, json, os, sys
version = None
try:
    version = importlib.metadata.version("torch")
except importlib.metadata.PackageNotFoundError:
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        path = os.path.join(os.path.dirname(spec.origin), "version.py")
        if os.path.isfile(path):
            for line in open(path):
                if line.startswith("__version__"):
                    version = line.split("=", 1)[1].strip().strip(chr(34) + chr(39))
print(json.dumps({"torch": version, "prefix": sys.prefix, "python": sys.version.split()[0]}))
"""


def interpreter_env(python: Path) -> TorchEnv:
    """The torch already installed in the interpreter ``python`` (``verify --python``): nothing is
    created or downloaded. InputError (exit 2) when it does not run or holds no torch."""
    try:
        result = subprocess.run([str(python), "-I", "-c", _QUERY], capture_output=True, text=True, timeout=120,
                                check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise InputError(f"--python {python}: cannot run it ({error})",
                         hint="pass the path of a Python interpreter") from None
    try:
        found = loads(result.stdout.strip().splitlines()[-1], f"--python {python}'s answer")
        if not isinstance(found, dict):
            raise ValueError("not an object")
    except (ValueError, IndexError):
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"--python {python}: not a working Python interpreter ({last})",
                         hint="pass the path of a Python interpreter") from None
    if not found.get("torch"):
        raise InputError(f"--python {python}: no torch installed in it (Python {found['python']}, {found['prefix']})",
                         hint="name an interpreter that has torch, or use --torch VERSION")
    return TorchEnv(requested=f"{found['torch']} ({python})", installed=found["torch"], path=Path(found["prefix"]),
                    python=python, given=True)


def unavailable(version: str, error: AssembleError) -> ToolchainError:
    """torch ``version`` could not be installed: one full sentence saying so and what the
    installer said, and a hint naming what the index does offer (its newest release, asked the
    way the environments are made), the log and the way to pick releases that exist."""
    from assembler.verify.window import index_description, newest_release

    said = error.message.split("): ", 1)[-1].rstrip(".")  # after "cannot create the ... environment (torch==X)"
    try:
        newest = newest_release()
        where = index_description(installer())
    except AssembleError:  # the index fails this time too: the installer's own words are the answer
        newest, where = None, "pip's configuration"
    offered = f"The newest release the package index offers here is {newest}." if newest else (
        "The package index offers no torch release here.")
    fix = (f"pass --torch {newest}, or --torch window for each minor from the wheel's floor to the newest"
           if newest else "check the index settings (pip config list)")
    log = f"; the installer's output is in {error.hint.removeprefix('full installer output: ')}" if error.hint else ""
    return ToolchainError(f"torch {version} cannot be installed: {said}. {offered}",
                          hint=f"{fix} (indexes and constraints: {where}){log}")


def ensure_torch_env(version: str, progress: Callable[[str], None] = lambda _: None) -> TorchEnv:
    """The verify venv for torch ``version``, created on first use.

    A version that cannot be installed is "not available" (ToolchainError, exit 7), as for
    `build` and `check`: one exit code for it, named in the message; an unreachable package
    index stays a network error (exit 3).
    """
    try:
        path = ensure_venv([torch_requirement(version)], label=f"verify-torch{version}", progress=progress, sealed=True)
    except NetworkError:
        raise
    except AssembleError as error:
        raise unavailable(version, error) from None
    installed = installed_versions(path).get("torch")
    if installed is None:
        raise InputError(f"the verify environment {path} holds no torch", hint=f"delete {path} and re-run")
    files = recorded_files(path)  # what ensure_venv has just compared the tree with
    if files is None:
        raise InputError(f"the verify environment {path} has no manifest of its files",
                         hint=f"delete {path} and re-run")
    return TorchEnv(requested=version, installed=installed, path=path, python=venv_python(path), files=files)
