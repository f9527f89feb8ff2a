"""One cached venv per torch version to verify against, holding torch and nothing else.

The venvs come from the shared ``ensure_venv`` (complete-or-absent, file-locked, keyed by the
interpreter and the pins), so a 5.5 GB CUDA torch is downloaded once per cache. The wheel under
test is never installed into them: a verify run installs it into a scratch directory instead,
which keeps the cached environment identical for every later run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from assembler.errors import AssembleError, InputError, NetworkError
from assembler.toolchain.torchenv import torch_requirement
from assembler.toolchain.venv import ensure_venv, installed_versions, venv_python


@dataclass(frozen=True)
class TorchEnv:
    requested: str  # the version asked for, e.g. "2.14.1"
    installed: str  # what pip resolved it to, e.g. "2.14.1+cu130" or "2.13.0+cpu"
    path: Path
    python: Path


def ensure_torch_env(version: str, progress: Callable[[str], None] = lambda _: None) -> TorchEnv:
    """The verify venv for torch ``version``, created on first use.

    A version that cannot be installed is an operational error of the verify run (exit 2),
    named in the message, whatever the toolchain layer calls it; an unreachable package index
    stays a network error (exit 3).
    """
    try:
        path = ensure_venv([torch_requirement(version)], label=f"verify-torch{version}", progress=progress)
    except NetworkError:
        raise
    except AssembleError as error:
        raise InputError(f"torch {version}: {error.message}", hint=error.hint) from None
    installed = installed_versions(path).get("torch")
    if installed is None:
        raise InputError(f"the verify environment {path} holds no torch", hint=f"delete {path} and re-run")
    return TorchEnv(requested=version, installed=installed, path=path, python=venv_python(path))
