"""assess and migrate preprocess a unit once (issue #27 item 8): a directives-only pass is kept
in the cache and reused while every file it read, and every directory a new header could
appear in, is as it was; an edit, or a header added where the search would find it first,
runs the preprocessor again. Real gcc, real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from assembler.check.compilers import SCAN, Pass
from assembler.migration import active

REAL_RUN = active._run


@pytest.fixture(name="tree")
def tree_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "dep"
    (root / "inc").mkdir(parents=True)
    (root / "inc" / "k.h").write_text("#pragma once\n#ifdef FAST\nint fast();\n#else\nint slow();\n#endif\n")
    (root / "u.cpp").write_text('#include "k.h"\nint x = 1;\n')
    return root


def _lines(root: Path, calls: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> dict[str, set[int]]:
    def counting(command: list[str], cwd: Path) -> tuple[bytes, str]:
        calls.append(command)
        return REAL_RUN(command, cwd)

    monkeypatch.setattr(active, "_run", counting)
    scan = Pass("c++", ("g++", "-std=c++17", "-DFAST", f"-I{root / 'inc'}", *SCAN, str(root / "u.cpp")))
    found = active.active_lines([scan], root, root)
    return {str(path.relative_to(root)): lines for path, lines in found.lines.items()}


def test_a_pass_is_reused_until_what_it_read_changes(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    first = _lines(tree, calls, monkeypatch)
    assert first["inc/k.h"] == {3} and 2 in first["u.cpp"]
    assert _lines(tree, calls, monkeypatch) == first and len(calls) == 1  # the second asks no preprocessor
    header = tree / "inc" / "k.h"
    header.write_text(header.read_text().replace("int fast();", "int fast();\nint faster();"))
    os.utime(header, ns=(header.stat().st_atime_ns, header.stat().st_mtime_ns + 10**9))
    assert _lines(tree, calls, monkeypatch)["inc/k.h"] == {3, 4} and len(calls) == 2


def test_a_header_added_first_in_the_search_runs_it_again(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    _lines(tree, calls, monkeypatch)
    (tree / "k.h").write_text("int shadow();\n")  # the unit's own directory comes first for "k.h"
    os.utime(tree, ns=(tree.stat().st_atime_ns, tree.stat().st_mtime_ns + 10**9))
    assert _lines(tree, calls, monkeypatch)["k.h"] == {1} and len(calls) == 2


def test_a_pass_with_a_stand_in_is_reused_until_the_header_appears(tree: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """FA2's CUDA units on a CPU build torch need a stand-in (c10/cuda's generated header): the
    pass is kept with it, reused (the stand-in reported again), and run again once the header
    is made where the search finds it (its directory's mtime changes)."""
    (tree / "u.cpp").write_text('#include "k.h"\n#include "gen/made.h"\nint x = 1;\n')
    calls: list[list[str]] = []
    first = _lines(tree, calls, monkeypatch)
    assert len(calls) == 3 and first["u.cpp"] >= {3}  # a pass, the -MG scan, the pass with the stand-in
    assert _lines(tree, calls, monkeypatch) == first and len(calls) == 3  # kept: no preprocessor asked
    scan = Pass("c++", ("g++", "-std=c++17", "-DFAST", f"-I{tree / 'inc'}", *SCAN, str(tree / "u.cpp")))
    assert active.active_lines([scan], tree, tree).stand_ins == ["gen/made.h"]
    (tree / "inc" / "gen").mkdir()
    (tree / "inc" / "gen" / "made.h").write_text("int made();\n")
    os.utime(tree / "inc", ns=(tree.stat().st_atime_ns, (tree / "inc").stat().st_mtime_ns + 10**9))
    made = _lines(tree, calls, monkeypatch)
    assert len(calls) == 4 and made["inc/gen/made.h"] == {1}
