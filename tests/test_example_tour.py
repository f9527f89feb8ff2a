"""The offline part of the README's quick tour, run as written inside a copy of
examples/stable-abi at 80 columns (issue 22, items 7, 9, 21 and 22)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_assemble


def tour(ws: Path, cache: Path, *words: str) -> str:
    result = run_assemble(*words, cwd=ws, env={"ASSEMBLE_CACHE": str(cache), "COLUMNS": "80"})
    assert result.returncode == 0, (words, result.stderr)
    return result.stdout


def test_the_quick_tour_offline_in_the_example(example_ws: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    tour(example_ws, cache, "deps")
    tour(example_ws, cache, "checkout")
    # right after the first checkout: the fork-pinned scalekit's upstream mirror was never
    # fetched, and `patches --offline` failed with "(never fetched) has no main"
    tour(example_ws, cache, "patches", "--offline")
    status = tour(example_ws, cache, "status")
    for dep in ("vecadd", "scalekit", "rowsum"):
        assert f"{dep}: pin " in status and f"branch assemble/{dep} at " in status
    assert max(len(line) for line in status.splitlines()) <= 80, status
    patch = tour(example_ws, cache, "show", "vecadd", "0002")
    assert patch.startswith("From ") and "diff --git" in patch
