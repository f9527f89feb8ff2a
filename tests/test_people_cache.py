"""`assemble cache info` read by a person (#30 minors): a mirror is named by the URL it mirrors,
whole, not by its directory name (the URL cut to its last 60 characters: host and owner lost);
at COLUMNS=80 every line fits, a long URL on a line of its own broken only after a ``/``.
Real bare repositories made by git, configured as `assemble` configures its mirrors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from assembler.git.mirrors import mirror_path
from assembler.report.table import cell_width
from tests.conftest import run_assemble
from tests.test_cache_cmd import NO_MIRRORS

URL = "https://github.com/a-rather-long-organisation-name/flash-attention-kernels-for-hopper.git"


def test_cache_info_names_mirrors_by_their_url_within_80_columns(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("ASSEMBLE_CACHE", str(cache))  # where mirror_path puts the mirror
    mirror = mirror_path(NO_MIRRORS, URL)
    subprocess.run(["git", "init", "-q", "--bare", str(mirror)], check=True)
    subprocess.run(["git", "-C", str(mirror), "config", "remote.origin.url", URL], check=True)
    assert "a-rather-long-organisation-name" not in mirror.name  # what main printed: the name, cut from the left
    info = run_assemble("cache", "info", env={"ASSEMBLE_CACHE": str(cache), "COLUMNS": "80"})
    assert info.returncode == 0, info.stderr
    lines = info.stdout.splitlines()
    # the cache's own path is the test's temporary directory (its length is the machine's): not measured
    measured = [line for line in lines if str(cache) not in line]
    assert max(cell_width(line) for line in measured) <= 80, "\n".join(f"{cell_width(line):3} {line}" for line in lines)
    assert URL in "".join(line.strip() for line in lines), info.stdout  # whole, if over lines broken after a "/"
