"""report.table: the plain-text tables `assemble deps` and `assemble patches` draw instead of rich
(whose import alone would take ~40 ms of the 100 ms start-up budget).

Exact renderings with and without edges (and the same text rich's default Table draws),
identifier columns never cut on a narrow width, free text wrapped between words, wide
characters, colour on and off (--color, NO_COLOR, a real pseudo-terminal), control characters
in cells shown escaped, and the real commands on the example workspace and a hostile subject.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import termios
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from assembler.report import output
from assembler.report.table import Cell, TextTable, cell_width, clean, layout, wrap
from tests.conftest import GitWorkspace, run_assemble
from tests.example import EXAMPLE

SGR = re.compile(r"\x1b\[[0-9;]*m")
BOX = re.compile("[\u2500-\u257f]")  # box-drawing characters
SHA = "b89ec77f0b891aa438086f6cfc0bfe8446ddc81b"


@pytest.fixture(autouse=True)
def default_settings() -> Iterator[None]:
    output.configure()
    yield
    output.configure()


def sample(edge: bool = True, title: str | None = "kern-bundle 1.0.0 — /w/deps.toml") -> TextTable:
    table = TextTable("dependency", "commit", "subject", text=("subject",), title=title, edge=edge)
    table.add_row("kern", "0123456789ab", "Use stable tensor type")
    table.add_row("ab", "-", "Port")
    return table


def test_edges_exactly() -> None:
    assert sample().render() == (
        "kern-bundle 1.0.0 — /w/deps.toml\n"
        "┏━━━━━━━━━━━━┳━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━┓\n"
        "┃ dependency ┃ commit       ┃ subject                ┃\n"
        "┡━━━━━━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━┩\n"
        "│ kern       │ 0123456789ab │ Use stable tensor type │\n"
        "│ ab         │ -            │ Port                   │\n"
        "└────────────┴──────────────┴────────────────────────┘\n"
    )


def test_without_edges_exactly() -> None:
    assert sample(edge=False, title=None).render() == (
        "dependency ┃ commit       ┃ subject\n"
        "━━━━━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━\n"
        "kern       │ 0123456789ab │ Use stable tensor type\n"
        "ab         │ -            │ Port\n"
    )
    single = TextTable("patch", edge=False)
    single.add_row("0001-a.patch")
    assert single.render() == "patch\n━━━━━━━━━━━━\n0001-a.patch\n"


@pytest.mark.parametrize("edge", [True, False])
def test_draws_what_rich_drew(edge: bool) -> None:
    """The tables looked like this with rich (box.HEAVY_HEAD, left-justified title); rich pads
    the last column with spaces, which a plain table leaves off."""
    from rich.console import Console
    from rich.table import Table

    buffer = io.StringIO()
    console = Console(file=buffer, width=200, color_system=None, highlight=False)
    drawn = Table(title=None if not edge else "kern-bundle 1.0.0", title_justify="left", show_edge=edge, pad_edge=edge)
    drawn.add_column("dependency", no_wrap=True)
    drawn.add_column("commit", no_wrap=True)
    drawn.add_column("subject", overflow="fold")
    ours = sample(edge=edge, title="kern-bundle 1.0.0" if edge else None)
    for row in ours.rows:
        drawn.add_row(*(cell.text for cell in row))
    console.print(drawn)
    assert ours.render() == "".join(line.rstrip(" ") + "\n" for line in buffer.getvalue().splitlines())


def test_identifiers_are_never_cut_and_free_text_wraps_between_words() -> None:
    table = TextTable("commit", "path", "evidence", text=("evidence",))
    url = "https://git.invalid/kern/pull/7"
    table.add_row(SHA, "patches/kern/0001-Use-stable-tensor-type.patch", f"forwarded upstream as {url} last week")
    narrow = table.render(width=40)
    assert narrow == (
        "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓\n"
        "┃ commit                                   ┃ path                                           ┃ "
        "evidence                        ┃\n"
        "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩\n"
        f"│ {SHA} │ patches/kern/0001-Use-stable-tensor-type.patch │ forwarded upstream as           │\n"
        f"│                                          │                                                │ {url} │\n"
        "│                                          │                                                │ last "
        "week                       │\n"
        "└──────────────────────────────────────────┴────────────────────────────────────────────────┴─────────────────────────────────┘\n"
    )
    assert table.render(width=None).count("\n") == 5  # no width to fit: the row on one line
    assert table.render(width=1000) == table.render(width=None)


def test_free_text_fits_a_narrow_terminal() -> None:
    table = TextTable("patch", "subject", "status", text=("subject",), edge=False)
    table.add_row("0001-a.patch", "Port add_scaled to torch::stable::Tensor and STABLE_TORCH_LIBRARY", "forwarded")
    table.add_row("0002-b.patch", "Docs", "local")
    fitted = table.render(width=50)
    assert fitted == (
        "patch        ┃ subject                 ┃ status\n"
        "━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━\n"
        "0001-a.patch │ Port add_scaled to      │ forwarded\n"
        "             │ torch::stable::Tensor   │\n"
        "             │ and                     │\n"
        "             │ STABLE_TORCH_LIBRARY    │\n"
        "0002-b.patch │ Docs                    │ local\n"
    )
    assert max(cell_width(line) for line in fitted.splitlines()) <= 50
    assert wrap("a  b\tc", 3) == ["a b", "c"] and wrap("", 5) == [""] and wrap("longword x", 4) == ["longword", "x"]


def test_plain_columns_exactly() -> None:
    """Piped (plain): a header row, then the rows, columns two spaces apart, no box characters,
    no trailing spaces (as uv, pip and cibuildwheel print); fitted only to a width given."""
    assert sample().render(plain=True) == (
        "kern-bundle 1.0.0 — /w/deps.toml\n"
        "dependency  commit        subject\n"
        "kern        0123456789ab  Use stable tensor type\n"
        "ab          -             Port\n"
    )
    assert sample(edge=False).render(plain=True) == sample().render(plain=True)
    fitted = sample(title=None).render(width=37, plain=True)
    assert fitted == (
        "dependency  commit        subject\n"
        "kern        0123456789ab  Use stable\n"
        "                          tensor type\n"
        "ab          -             Port\n"
    )
    assert not BOX.search(fitted)


def test_a_long_word_breaks_after_a_slash_only_where_that_makes_the_table_fit() -> None:
    """A URL in free text stays whole while wrapping words is enough; when only breaking it
    fits the width, it breaks after a ``/`` (each component whole), never inside a name; when
    even that cannot fit, it stays whole (breaking would gain nothing)."""
    assert wrap("upstream: example.invalid/stable-abi/scalekit-fork.git", 19) == [
        "upstream:", "example.invalid/", "stable-abi/", "scalekit-fork.git"]
    assert wrap("fork: https://h.invalid/a/b", 30) == ["fork: https://h.invalid/a/b"]
    assert wrap("see https://h.invalid/abc/d", 13) == ["see https://", "h.invalid/", "abc/d"]
    table = TextTable("name", "source", text=("source",))
    table.add_row("kern", "upstream: example.invalid/stable-abi/scalekit-fork.git")
    fitted = table.render(width=30)
    assert fitted.splitlines()[3:-1] == [
        "│ kern │ upstream:           │",
        "│      │ example.invalid/    │",
        "│      │ stable-abi/         │",
        "│      │ scalekit-fork.git   │",
    ]
    assert max(cell_width(line) for line in fitted.splitlines()) == 30
    assert "example.invalid/stable-abi/scalekit-fork.git" in table.render(width=55)  # words alone fit
    too_narrow = table.render(width=20)  # no break fits 20 columns: the URL stays whole
    assert "│      │ example.invalid/stable-abi/scalekit-fork.git │" in too_narrow.splitlines()


def test_wide_characters_keep_the_columns_aligned() -> None:
    table = TextTable("name", "subject", text=("subject",))
    table.add_row("kern", "修正 カーネル")
    table.add_row("e\u0301t\u00e9", "plain")
    lines = table.render().splitlines()
    assert cell_width("修正") == 4 and cell_width("e\u0301") == 1
    assert {cell_width(line) for line in lines} == {cell_width(lines[0])}
    assert lines[3] == "│ kern │ 修正 カーネル │"


def test_colour_only_when_asked() -> None:
    table = TextTable("patch", "status", edge=False)
    table.add_row("0001-a.patch", Cell("forwarded", "yellow"))
    table.add_row("0002-b.patch", Cell("upstream", "green"))
    coloured = table.render(colour=True)
    assert ("\x1b[1mpatch\x1b[0m" in coloured and "\x1b[33mforwarded\x1b[0m" in coloured
            and "\x1b[32mupstream\x1b[0m" in coloured)
    assert SGR.sub("", coloured) == table.render(colour=False)
    assert "\x1b" not in table.render(colour=False)
    titled = TextTable("a", title="bundle")
    assert titled.render(colour=True).startswith("\x1b[3mbundle\x1b[0m\n")
    with pytest.raises(ValueError, match="unknown style 'blink'"):
        Cell("x", "blink")


def test_colour_and_width_follow_the_stream_the_flag_and_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a real pseudo-terminal: its width and colour; NO_COLOR and --color never turn colour
    off, --color always turns it on in a pipe, which is never fitted to a width."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    leader, follower = os.openpty()
    try:
        termios.tcsetwinsize(follower, (24, 61))
        with open(follower, "w", encoding="utf-8", closefd=False) as terminal:
            assert layout(terminal) == (61, True)
            monkeypatch.setenv("COLUMNS", "90")
            assert layout(terminal) == (90, True)
            monkeypatch.delenv("COLUMNS")
            monkeypatch.setenv("NO_COLOR", "1")
            assert layout(terminal) == (61, False)
            output.configure(color="always")
            assert layout(terminal) == (61, True)
            output.configure(color="never")
            monkeypatch.delenv("NO_COLOR")
            assert layout(terminal) == (61, False)
    finally:
        os.close(leader)
        os.close(follower)
    piped = io.StringIO()
    output.configure()
    assert layout(piped) == (None, False)
    output.configure(color="always")
    assert layout(piped) == (None, True)
    table = TextTable("a")
    table.add_row("x")
    table.print(piped)
    assert "\x1b[1ma\x1b[0m" in piped.getvalue()


def test_boxes_on_a_terminal_plain_columns_in_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """print() draws boxes on a real pseudo-terminal (fitted to it) and plain columns anywhere
    else, with the same cells."""
    monkeypatch.delenv("COLUMNS", raising=False)  # COLUMNS, as in shutil, wins over the terminal's own size
    leader, follower = os.openpty()
    try:
        termios.tcsetwinsize(follower, (24, 40))
        with open(follower, "w", encoding="utf-8", closefd=False) as terminal:
            sample().print(terminal)
        drawn = os.read(leader, 65536).decode("utf-8").replace("\r\n", "\n")
    finally:
        os.close(leader)
        os.close(follower)
    assert SGR.sub("", drawn) == sample().render(width=40)
    assert drawn.count("┃") == 4 and max(cell_width(SGR.sub("", line)) for line in drawn.splitlines()) <= 40
    piped = io.StringIO()
    sample().print(piped)
    assert piped.getvalue() == sample().render(plain=True) and not BOX.search(piped.getvalue())


def test_control_characters_are_shown_not_obeyed() -> None:
    hostile = "Fix\x1b]0;pwned\x07 the\nbuild\x1b[2J\u202eevil\x9b31m"
    assert clean(hostile) == "Fix\\x1b]0;pwned\\x07 the build\\x1b[2J\\u202eevil\\x9b31m"
    assert clean("plain text — ünïcode 修正") == "plain text — ünïcode 修正"
    table = TextTable("patch", "subject", text=("subject",), title="title\x1b[31m\nline")
    table.add_row("0001-\x1b[8m.patch", hostile)
    table.add_row(Cell("x\ny", "red"), "ok")
    for colour in (False, True):
        text = table.render(width=30, colour=colour)
        assert "\x1b" not in SGR.sub("", text) and "\x07" not in text and "\u202e" not in text and "\x9b" not in text
        assert "\\x1b[2J" in text and "x y" in text
        assert text.splitlines()[0] == (SGR.sub("", text.splitlines()[0]) if not colour else text.splitlines()[0])
    assert table.render().splitlines()[0] == "title\\x1b[31m line"


def test_rows_must_match_the_columns() -> None:
    with pytest.raises(ValueError, match="not among"):
        TextTable("a", text=("b",))
    with pytest.raises(ValueError, match="a row of 2 cells in a table of 1 columns"):
        TextTable("a").add_row("x", "y")


def test_deps_prints_the_table(tmp_path: Path) -> None:
    """`assemble deps` on the example workspace (never checked out): every dependency's name,
    source, short commit, track, patch count and checkout state, aligned, without colour in a
    pipe."""
    workspace = tmp_path / "example"
    shutil.copytree(EXAMPLE, workspace, ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble"))
    result = run_assemble("-C", str(workspace), "deps", env={"ASSEMBLE_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr
    manifest = tomllib.loads((workspace / "deps.toml").read_text())
    lines = result.stdout.splitlines()
    bundle = manifest["bundle"]
    assert lines[0] == f"{bundle['name']} {bundle['version']} — {workspace / 'deps.toml'}"
    assert re.fullmatch(r"dependency  source +commit +track  patches  checkout", lines[1])  # piped: plain columns
    assert not BOX.search(result.stdout)
    starts = [lines[1].index(header) for header in ("source", "commit", "track", "patches", "checkout")]
    rows = [[line[start:end].strip() for start, end in zip([0, *starts], [*starts, None], strict=True)]
            for line in lines[2:]]
    expected = []
    for name, dep in manifest["deps"].items():
        source = dep.get("source", dep["upstream"])  # a fork is built from its own source
        kind = "upstream" if source == dep["upstream"] else "fork"
        series = workspace / "patches" / name / "series"
        count = sum(1 for line in series.read_text().splitlines() if line.strip() and not line.startswith("#"))
        expected.append([name, f"{kind}: {source.split('://')[-1]}", dep["commit"][:12], dep["track"], str(count),
                         "absent"])
    assert rows == expected
    assert "\x1b" not in result.stdout


def test_deps_fits_80_columns_on_a_terminal_and_in_a_pipe(tmp_path: Path) -> None:
    """`assemble deps` on the example workspace at COLUMNS=80 (111 columns before): on a real
    pseudo-terminal, boxed and within 80 columns, the source wrapped after a ``/`` and every
    name and SHA whole; piped, plain columns within 80."""
    import subprocess
    import sys

    workspace = tmp_path / "example"
    shutil.copytree(EXAMPLE, workspace, ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble"))
    env = {**os.environ, "COLUMNS": "80", "ASSEMBLE_CACHE": str(tmp_path / "cache"), "NO_COLOR": "1"}
    command = [sys.executable, "-m", "assembler", "-C", str(workspace), "deps"]
    leader, follower = os.openpty()
    try:
        termios.tcsetwinsize(follower, (24, 80))
        process = subprocess.run(command, stdout=follower, stderr=subprocess.PIPE, env=env, timeout=60)
        assert process.returncode == 0, process.stderr
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the pty's far side is closed: everything is read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
    drawn = b"".join(chunks).decode("utf-8").replace("\r\n", "\n").splitlines()
    assert max(cell_width(line) for line in drawn) <= 80  # the title too: it wraps between words, the path whole
    assert str(workspace / "deps.toml") in "".join(drawn[:3])  # broken after a "/" only
    drawn = drawn[next(index for index, line in enumerate(drawn) if line.startswith("┏")) - 1:]
    assert drawn[1].startswith("┏") and drawn[-1].startswith("└")
    manifest = tomllib.loads((workspace / "deps.toml").read_text())
    body = "\n".join(drawn[4:-1])
    for name, dep in manifest["deps"].items():
        assert f"│ {name} " in body and f" {dep['commit'][:12]} " in body
        source = dep.get("source", dep["upstream"]).split("://")[-1]
        pieces = [line.split("│")[2].strip() for line in drawn[4:-1]]
        assert "".join(piece for piece in pieces if piece).count(source) == 1  # whole once the breaks are joined
    piped = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert piped.returncode == 0, piped.stderr
    assert not BOX.search(piped.stdout) and max(cell_width(line) for line in piped.stdout.splitlines()) <= 80


def test_patches_shows_a_hostile_subject_escaped(git_workspace: GitWorkspace) -> None:
    """A patch whose Subject carries terminal escapes: `assemble patches` prints them as text,
    even with --color always (whose only escapes are its own colours)."""
    patch = sorted(git_workspace.patches.glob("*.patch"))[0]
    text = patch.read_text()
    assert "Subject: [PATCH] Use stable tensor type" in text
    patch.write_text(text.replace("Subject: [PATCH] Use stable tensor type",
                                  "Subject: [PATCH] Use stable\x1b[2J\x1b]0;pwned\x07 type"))
    for colour in ("never", "always"):
        result = git_workspace.assemble("--color", colour, "patches")
        assert result.returncode == 0, result.stderr
        assert "Use stable\\x1b[2J\\x1b]0;pwned\\x07 type" in result.stdout
        assert "\x1b" not in SGR.sub("", result.stdout) and "\x07" not in result.stdout
        assert ("\x1b[1mkern\x1b[0m: pin " in result.stdout) == (colour == "always")
    plain = git_workspace.assemble("patches").stdout.splitlines()
    assert plain[0].startswith("kern: pin ") and plain[1].startswith("  migrated on fork: ")
    assert plain[2] == "  migration progress: not assessed (`assemble assess kern`)"
    assert re.fullmatch(r"patch +subject +status +evidence", plain[3]) and not BOX.search("\n".join(plain))


def test_notes_under_a_row_span_from_their_column_to_the_edge() -> None:
    """What `assemble patches` and `sbom` print at 80 columns: the patch file name and the
    evidence on lines of their own under the row, from the status column on, never cut."""
    table = TextTable("patch", "status", "subject", text=("subject",), edge=False, notes_at="status")
    table.add_row("0001", "forwarded", "Use header-only scalar types",
                  notes=["0001-Use-header-only-scalar-types.patch", "https://example.invalid/pull/1"])
    assert table.render(width=40) == (
        "patch ┃ status    ┃ subject\n"
        "━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━\n"
        "0001  │ forwarded │ Use header-only\n"
        "      │           │ scalar types\n"
        "      │ 0001-Use-header-only-scalar-types.patch\n"  # wider than the room: whole, on a line of its own
        "      │ https://example.invalid/pull/1\n"
    )
    assert table.render(width=40, plain=True) == (
        "patch  status     subject\n"
        "0001   forwarded  Use header-only scalar\n"
        "                  types\n"
        "       0001-Use-header-only-scalar-types.patch\n"
        "       https://example.invalid/pull/1\n"
    )
    boxed = TextTable("a", "b", notes_at="a")
    boxed.add_row("x", "y", notes=["note"])
    assert boxed.render().splitlines()[3:5] == ["│ x │ y │", "│ note  │"]
    with pytest.raises(ValueError, match="notes columns"):
        TextTable("a", notes_at="b")


def test_numbers_align_right_and_a_title_has_lines() -> None:
    table = TextTable("kind", "entries", "size", right=("entries", "size"), title=("cache: /c", "second line"))
    table.add_row("mirrors", "12", "1.5 MB")
    table.add_row("total", "3", "0 B")
    assert table.render() == (
        "cache: /c\n"
        "second line\n"
        "┏━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━┓\n"
        "┃ kind    ┃ entries ┃   size ┃\n"
        "┡━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━┩\n"
        "│ mirrors │      12 │ 1.5 MB │\n"
        "│ total   │       3 │    0 B │\n"
        "└─────────┴─────────┴────────┘\n"
    )
    long = TextTable("a", title="verify /a/very/long/path/to/a/wheel.whl")
    long.add_row("x")
    title = long.render(width=20).splitlines()[:2]
    assert title == ["verify /a/very/long/", "path/to/a/wheel.whl"]  # wrapped after a "/", no name cut
    assert long.render().splitlines()[0] == "verify /a/very/long/path/to/a/wheel.whl"


def test_fits_says_whether_words_alone_make_it_fit() -> None:
    table = TextTable("name", "subject", text=("subject",))
    table.add_row("0001-a-long-patch-file-name.patch", "a subject of several words")
    assert table.fits(None) and table.fits(80)
    assert not table.fits(46) and table.fits(46, plain=True)  # the name and "several": 40; plain takes 2 more, boxes 7
    assert table.fits(47) and not table.fits(41, plain=True)
    paths = TextTable("object", text=("object",))
    paths.add_row("merge_demo/vecadd/_vecadd_C.abi3.so")
    assert not paths.fits(30) and paths.fits(30, breaking=True)


def test_paragraph_wraps_prose_with_a_hanging_indent() -> None:
    from assembler.report.table import paragraph

    assert (paragraph("  alpha beta gamma delta epsilon", 14, hang="    ")
            == "  alpha beta\n    gamma\n    delta\n    epsilon\n")
    assert paragraph("alpha\x1b beta", None) == "alpha\\x1b beta\n"  # no width: one line; cleaned


def test_patch_label_is_the_number_show_takes() -> None:
    from assembler.series.seriesfile import find_patch, patch_label

    names = ["0001-a.patch", "0002-b.patch", "0002-c.patch", "local.patch"]
    assert [patch_label(names, name) for name in names] == ["0001", "0002-b.patch", "0002-c.patch", "local.patch"]
    assert all(find_patch(names, patch_label(names, name)) == name for name in names)
