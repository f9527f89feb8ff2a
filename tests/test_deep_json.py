"""Deeply nested JSON in data files (issue 29, item 16): ``[[[[...]]]]`` a hundred thousand levels
deep made `sbom`, `size` and `verify` exit 70 (RecursionError). Data files are read through one
function, ``assembler.jsonfile.loads``: not JSON, or nested deeper than ``MAX_DEPTH``, is an
InputError (exit 2) naming the file. Real wheels, the CLI in this process (its own stack depth,
as users run it), no mocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assembler.errors import InputError
from assembler.jsonfile import MAX_DEPTH, JsonFileError, depth, loads
from tests.conftest import run_assemble
from tests.hostile_wheels import WHEEL_NAME, Archive, member, wheel_entries

DEEP = "[" * 100_000 + "]" * 100_000  # RecursionError in json itself
NESTED = '{"deps": ' + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "}"  # parses, deeper than the limit
DIST_INFO = "pkg-1.0.dist-info"


def wheel_with(tmp_path: Path, name: str, text: str) -> Path:
    entries = [member("pkg/__init__.py", b""), member(f"{DIST_INFO}/{name}", text.encode()), *wheel_entries({})]
    return Archive(entries).write(tmp_path / WHEEL_NAME)


def assert_exit_2_naming(args: list[str], *needles: str) -> None:
    done = run_assemble(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr
    first = done.stderr.splitlines()[0]
    for needle in needles:
        assert needle in first, first


@pytest.mark.parametrize("text", [DEEP, NESTED], ids=["recursion", "over-the-limit"])
def test_size_of_a_wheel_whose_assembler_json_nests_deeply(tmp_path: Path, text: str) -> None:
    wheel = wheel_with(tmp_path, "assembler.json", text)
    assert_exit_2_naming(["size", str(wheel)], WHEEL_NAME, f"{DIST_INFO}/assembler.json", "nested")


def test_size_of_a_directory_whose_assembler_json_nests_deeply(tmp_path: Path) -> None:
    info = tmp_path / "tree" / DIST_INFO
    info.mkdir(parents=True)
    (info / "assembler.json").write_text(DEEP)
    assert_exit_2_naming(["size", str(tmp_path / "tree")], str(info / "assembler.json"), "nested")


@pytest.mark.parametrize("text", [DEEP, NESTED], ids=["recursion", "over-the-limit"])
def test_sbom_of_a_wheel_whose_sbom_nests_deeply(tmp_path: Path, text: str) -> None:
    wheel = wheel_with(tmp_path, "sboms/pkg.cdx.json", text)
    assert_exit_2_naming(["sbom", str(wheel)], WHEEL_NAME, f"{DIST_INFO}/sboms/pkg.cdx.json", "nested")
    (tmp_path / "other").mkdir()
    assert_exit_2_naming(["sbom", str(wheel), str(wheel_with(tmp_path / "other", "sboms/pkg.cdx.json", "{}"))],
                         f"{DIST_INFO}/sboms/pkg.cdx.json", "nested")


def test_verify_of_a_wheel_whose_assembler_json_nests_deeply(tmp_path: Path) -> None:
    """Refused while reading the wheel's specs, before any torch environment is made."""
    wheel = wheel_with(tmp_path, "assembler.json", DEEP)
    cache = tmp_path / "cache"
    done = run_assemble("verify", str(wheel), "--torch", "2.13.0", cwd=tmp_path, env={"ASSEMBLE_CACHE": str(cache)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert f"{DIST_INFO}/assembler.json" in done.stderr and "nested" in done.stderr
    assert not (cache / "venvs").exists()


@pytest.mark.integration
def test_the_reader_bounds_depth_not_size() -> None:
    """At the limit it reads; one level more it refuses; a wide, shallow document of a million
    values is read (the depth walk runs only when brackets could nest that deep)."""
    at_limit = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert depth(loads(at_limit, "x.json")) == MAX_DEPTH
    with pytest.raises(JsonFileError, match=f"x.json: JSON nested more than {MAX_DEPTH} levels deep"):
        loads("[" + at_limit + "]", "x.json")
    wide = json.dumps({"files": [[i, str(i)] for i in range(1_000_000)]})
    assert len(loads(wide, "wide.json")["files"]) == 1_000_000
    strings = json.dumps(["[" * 10_000, "{" * 10_000])  # brackets inside strings nest nothing
    assert loads(strings.encode(), "s.json") == ["[" * 10_000, "{" * 10_000]


def test_errors_are_input_errors_and_value_errors() -> None:
    """Exit 2 at the CLI; a reader that treats a corrupt cache record as absent (except ValueError) still does."""
    for text in (DEEP, "{not json", b"\xff\xfe"):
        with pytest.raises(JsonFileError) as caught:
            loads(text, "cache/record.json", hint="delete it")
        assert isinstance(caught.value, InputError) and isinstance(caught.value, ValueError)
        assert caught.value.message.startswith("cache/record.json: ") and caught.value.hint == "delete it"
