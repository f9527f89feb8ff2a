"""The offline part of the README's ten-line tour, run as written inside a copy of
examples/stable-abi at 80 columns (issue 22, items 7, 9, 21 and 22; issue 30: the tour is
read from the README, so a command changed there is the command run here)."""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.conftest import run_assemble
from tests.test_docs_commands import quick_tour

# what needs no toolchain, no build and no network: the rest (check, build, audit, verify) is the demo's
OFFLINE = ("deps", "checkout", "status", "show", "patches")


def tour(ws: Path, cache: Path, *words: str) -> str:
    result = run_assemble(*words, cwd=ws, env={"ASSEMBLE_CACHE": str(cache), "COLUMNS": "80"})
    assert result.returncode == 0, (words, result.stderr)
    return result.stdout


def test_the_quick_tour_offline_in_the_example(example_ws: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    offline = [shlex.split(command)[1:] for command in quick_tour() if command.split()[1] in OFFLINE]
    assert [words[0] for words in offline] == list(OFFLINE), offline  # in the order a newcomer meets them
    assert ["patches", "--offline"] in offline  # the tour's `patches` reads the mirrors as fetched
    printed = {words[0]: tour(example_ws, cache, *words) for words in offline}
    # `patches --offline` runs right after the first checkout: the fork-pinned scalekit's upstream
    # mirror was never fetched, and it failed with "(never fetched) has no main"
    status = printed["status"]
    for dep in ("vecadd", "scalekit", "rowsum"):
        assert f"{dep}: pin " in status and f"branch assemble/{dep} at " in status
    assert max(len(line) for line in status.splitlines()) <= 80, status
    patch = printed["show"]
    assert patch.startswith("From ") and "diff --git" in patch
