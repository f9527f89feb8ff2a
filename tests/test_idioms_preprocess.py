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


def test_flags_given_to_every_pass_spare_the_stand_in_retry(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """assess gives each pass the compile proof's stand-in directory (c10/cuda's generated
    header on a CPU build torch): the pass finds the header there and runs once, not three
    times (a pass, the -MG scan, the pass again); what ``skip`` names (a submodule) is not counted."""
    (tree / "u.cpp").write_text('#include "k.h"\n#include "gen/made.h"\n#include "sub/s.h"\nint x = 1;\n')
    (tree / "sub").mkdir()
    (tree / "sub" / "s.h").write_text("int from_submodule();\n")
    given = tree.parent / "given"
    (given / "gen").mkdir(parents=True)
    (given / "gen" / "made.h").write_text("int made();\n")
    calls: list[list[str]] = []

    def counting(command: list[str], cwd: Path) -> tuple[bytes, str]:
        calls.append(command)
        return REAL_RUN(command, cwd)

    monkeypatch.setattr(active, "_run", counting)
    scan = Pass("c++", ("g++", "-std=c++17", f"-I{tree / 'inc'}", f"-I{tree}", *SCAN, str(tree / "u.cpp")))
    found = active.active_lines([scan], tree, tree, skip=(tree / "sub",), extra=("-isystem", str(given)))
    assert len(calls) == 1 and found.stand_ins == [] and not found.errors
    assert {path.relative_to(tree).as_posix() for path in found.lines} == {"u.cpp", "inc/k.h"}
    assert found.lines[tree / "u.cpp"] >= {4}


def _collect_line_by_line(output: bytes, cwd: Path, root: Path, skip: tuple[Path, ...]) -> dict[Path, set[int]]:
    """What a marker-following reader must find: every line read one by one."""
    lines: dict[Path, set[int]] = {}
    current: set[int] | None = None
    number = 0
    for raw in output.split(b"\n"):
        marker = active._MARKER.match(raw)
        if marker is not None:
            name = marker.group(2).decode()
            path = Path(os.path.normpath(cwd / name))
            inside = (not name.startswith("<") and path.is_relative_to(root)
                      and not any(path.is_relative_to(folder) for folder in skip))
            current = lines.setdefault(path, set()) if inside else None
            number = int(marker.group(1))
            continue
        if current is not None and raw.strip():
            current.add(number)
        number += 1
    return lines


@pytest.mark.parametrize("seed", range(40))
def test_the_marker_reader_counts_what_a_line_by_line_reading_does(tmp_path: Path, seed: int) -> None:
    """The reader skips from marker to marker (FA2: 14 MB a pass, mostly others' headers): it
    must find the lines a plain line-by-line reading finds, whatever the mix of markers, blank
    lines, ``#`` lines that are not markers, and a last line without a newline."""
    import random

    chooser = random.Random(seed)
    root = tmp_path / "dep"
    names = ["a.h", "dir/b.h", "sub/c.h", "/usr/include/stdio.h", "<built-in>", "../outside.h"]
    pieces: list[bytes] = []
    for _ in range(chooser.randint(0, 30)):
        kind = chooser.random()
        if kind < 0.3:
            pieces.append(f'# {chooser.randint(1, 900)} "{chooser.choice(names)}" {chooser.choice(["", "1", "2 3"])}'
                          .rstrip().encode())
        else:
            pieces.append(chooser.choice([b"", b"  ", b"int x;", b"# pragma once", b"#define A 1", b"#  1 x", b"}"]))
    output = b"\n".join(pieces) + chooser.choice([b"", b"\n"])
    found: dict[Path, set[int]] = {}
    active._collect(output, root, root, found, (root / "sub",))
    expected = _collect_line_by_line(output, root, root, (root / "sub",))
    assert {path: numbers for path, numbers in found.items() if numbers} == \
        {path: numbers for path, numbers in expected.items() if numbers}
