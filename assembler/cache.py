"""Where shared, re-creatable state lives: git mirrors, toolchains, venvs, build artifacts."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_root() -> Path:
    """$ASSEMBLE_CACHE, else the platform's user cache directory (~/.cache/assembler)."""
    override = os.environ.get("ASSEMBLE_CACHE")
    root = Path(override) if override else Path(platformdirs.user_cache_dir("assembler"))
    root.mkdir(parents=True, exist_ok=True)
    return root
