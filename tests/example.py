"""The example workspace and its `make_upstreams.py`, shared by tests and benchmarks.

The script lives beside examples/stable-abi/deps.toml (users run it there), so it is loaded by
path rather than imported from the package.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "stable-abi"


def make_upstreams(dest: Path, advance: bool = False) -> dict[str, str]:
    """Create the example's upstream repositories under ``dest``; repository -> head SHA."""
    module = sys.modules.get("make_upstreams")
    if module is None:
        spec = importlib.util.spec_from_file_location("make_upstreams", EXAMPLE / "make_upstreams.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return module.make_upstreams(dest, advance=advance)
