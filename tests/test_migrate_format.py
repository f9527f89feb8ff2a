"""`assemble migrate` formats what it wrote in the dependency's own clang-format style (the real
clang-format of the PyPI wheel, ``--lines`` only) and never an untouched line: a badly
formatted line the migration did not touch stays byte for byte, also when clang-format would
change it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from assembler.migration.clangformat import _within, executable, reformat, style_file, touched_lines
from tests.build_support import assemble, example_copy

STYLE = "BasedOnStyle: LLVM\nSpaceBeforeParens: Always\nColumnLimit: 120\n"
BAD = "  const float   scale  =  static_cast<float>( alpha );"  # clang-format would respace it


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def test_only_the_touched_lines_are_formatted(tmp_path: Path) -> None:
    binary = executable()
    assert binary is not None, "the clang-format wheel is a dependency"
    style = tmp_path / ".clang-format"
    style.write_text(STYLE)
    before = "int  untouched  =  1 ;\nint f(int x) { return x; }\n"
    after = "int  untouched  =  1 ;\nint g(int   x){return x;}\n"
    assert touched_lines(before, after) == [(2, 2)]
    formatted = reformat(after, [True, True, True], touched_lines(before, after), tmp_path / "a.cpp", style, binary)
    assert formatted.text == "int  untouched  =  1 ;\nint g (int x) { return x; }\n"
    assert formatted.active == [True, True, True]


def test_what_clang_format_changes_outside_the_touched_lines_is_dropped() -> None:
    text = "int  a  =  1 ;\nint   b;\nint  c  =  3 ;"
    formatted = "int a = 1;\nint b;\nint c = 3;"  # as if clang-format had reached past line 2
    kept = _within(text, [True, False, True], formatted, [(2, 2)])
    assert kept.text == "int  a  =  1 ;\nint b;\nint  c  =  3 ;"
    assert kept.active == [True, False, True]


def test_a_style_file_above_the_checkout_is_not_the_projects(tmp_path: Path) -> None:
    checkout = tmp_path / "home" / "forks" / "dep"
    (checkout / "csrc").mkdir(parents=True)
    (tmp_path / "home" / ".clang-format").write_text(STYLE)
    assert style_file(checkout / "csrc" / "a.cpp", checkout) is None
    (checkout / ".clang-format").write_text(STYLE)
    assert style_file(checkout / "csrc" / "a.cpp", checkout) == (checkout / ".clang-format").resolve()


@pytest.mark.integration
def test_migrate_formats_its_lines_in_the_projects_style_and_no_other(tmp_path: Path, private_cache: Path) -> None:
    """vecadd's unmigrated upstream with a planted .clang-format and a badly formatted line the
    migration does not touch: the rewritten lines follow the style, that line stays as it is."""
    import tomlkit

    ws = example_copy(tmp_path / "ws")
    manifest = tomlkit.parse((ws / "deps.toml").read_text())
    for name in ("scalekit", "rowsum"):
        del manifest["deps"][name]  # type: ignore[union-attr]
    (ws / "deps.toml").write_text(tomlkit.dumps(manifest))
    shutil.rmtree(ws / "patches" / "vecadd")
    assert assemble("-C", str(ws), "checkout", "vecadd", cache=private_cache).returncode == 0
    fork = ws / "forks" / "vecadd"
    (fork / ".clang-format").write_text(STYLE)
    source = fork / "csrc" / "add_scaled.cpp"
    text = source.read_text()
    good = "  const float scale = static_cast<float>(alpha);"
    assert good in text
    source.write_text(text.replace(good, BAD))
    _git(fork, "add", "-A")
    _git(fork, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m",
         "Plant a style and a badly formatted line")
    planted = source.read_text().splitlines()

    result = assemble("-C", str(ws), "migrate", "vecadd", "--no-check", "--json", cache=private_cache)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["clang_format"] == {"style": ".clang-format", "errors": []}
    migrated = source.read_text().splitlines()
    assert BAD in migrated  # untouched: as it was
    # touched: the project's style (a C++ source spells the tensor short after migrate's using-declaration)
    assert "  Tensor out = torch::stable::empty_like (x);" in migrated
    # every line no step touched is still there, in order
    untouched = [line for line in planted if "at::" not in line and "TORCH_" not in line and "data_ptr" not in line
                 and "contiguous" not in line and ".view(" not in line and "#include" not in line
                 and "m.impl" not in line and "expected float32" not in line]
    assert [line for line in migrated if line in untouched] == untouched
    # the check's message was aligned under TORCH_CHECK's bracket: it moves with it (alignment.py)
    message = next(n for n, line in enumerate(migrated) if "expected float32" in line)
    assert "STD_TORCH_CHECK (" in migrated[message - 1], migrated[message - 1:message + 1]
    assert migrated[message].index('"') == migrated[message - 1].index("(") + 1, migrated[message - 1:message + 1]
    assert _git(fork, "status", "--porcelain") == ""
