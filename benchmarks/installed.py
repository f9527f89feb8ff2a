"""An interpreter with assemble installed as users get it, for the start-up benchmarks.

`uv tool install assemble` and pipx give a virtual environment holding a regular (not
editable) install whose byte-code is compiled. Timing the development venv instead would add the
editable install's import hook (~10-25 ms of site start-up) and, where PYTHONDONTWRITEBYTECODE
is set (as on this project's machines), the compilation of every changed module on every run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def installed_python(directory: Path) -> Path:
    """Create a venv in ``directory`` with this checkout of assemble installed (uv, byte-code
    compiled) and return its interpreter."""
    from uv import find_uv_bin

    uv = find_uv_bin()
    python = directory / "bin" / "python"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(directory)], check=True)
    subprocess.run([uv, "pip", "install", "-q", "--compile-bytecode", "--python", str(python), str(ROOT)], check=True)
    return python


def run_env(**extra: str) -> dict[str, str]:
    """The environment the timed commands run in: as installed, byte-code is read, never
    compiled (the first run writes what --compile-bytecode left out)."""
    env = {**os.environ, **extra}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env
