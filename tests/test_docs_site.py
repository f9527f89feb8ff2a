"""The docs site (issue 30, items 2 and 3): `mkdocs build --strict` succeeds, so every link and
anchor resolves and every page is in the navigation, and the reference pages are exactly what the
code makes of the argument parser, the manifest schema, the exit codes and the JSON Schemas."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from assembler.cli import reference
from tests.conftest import ROOT

# what the README links to: each is a page the site builds
PAGES = sorted({page.partition("#")[0] for page in re.findall(r"\]\(docs/([^)\s]+\.md(?:#[^)\s]*)?)\)",
                                                              (ROOT / "README.md").read_text())})


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's end-of-life banner, not a finding
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], capture_output=True, text=True, env=env, timeout=600)


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    result = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert len(PAGES) >= 15, PAGES
    for page in PAGES:  # what the README links to
        built = tmp_path / "site" / page.removesuffix(".md").removesuffix("index") / "index.html"
        assert (ROOT / "docs" / page).is_file() and built.is_file(), page


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    with (tmp_path / "docs" / "concepts.md").open("a") as page:
        page.write("\nSee [the verdicts](reference/commands.md#no-such-heading) and [gone](guides/gone.md).\n")
    result = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "guides/gone.md" in result.stderr and "no-such-heading" in result.stderr


def test_the_reference_is_what_the_code_makes() -> None:
    assert reference.stale(ROOT) == [], "stale: run `python -m assembler.cli.reference` and commit the result"


def test_a_reference_page_that_drifted_is_named_and_rewritten(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    for part in ("docs/reference", "assembler/data/schemas"):
        shutil.copytree(ROOT / part, tmp_path / part)
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    cli = tmp_path / "docs" / "reference" / "cli.md"
    cli.write_text(cli.read_text().replace("--assembler-requirement", "--assembler-requirment"))
    (tmp_path / "assembler" / "data" / "schemas" / "deps-toml.json").unlink()
    assert reference.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "stale: docs/reference/cli.md" in err and "stale: assembler/data/schemas/deps-toml.json" in err
    assert reference.main(["--root", str(tmp_path)]) == 0
    assert reference.main(["--check", "--root", str(tmp_path)]) == 0
    assert cli.read_text() == (ROOT / "docs" / "reference" / "cli.md").read_text()


def test_the_cli_reference_names_every_command_and_option() -> None:
    """Made from the parser: each subcommand's heading and each of its option strings are on the page."""
    from assembler.cli import COMMAND_MODULES, build_parser

    text = (ROOT / "docs" / "reference" / "cli.md").read_text()
    commands = dict(reference._subcommands(build_parser()))
    for name in COMMAND_MODULES:
        assert f"## `assemble {name}`" in text, name
        for action in commands[name]._actions:
            for option in action.option_strings if action.help != argparse.SUPPRESS else ():  # hidden: internal
                assert option in text, (name, option)


def test_every_toml_block_of_the_docs_holds_keys_and_values_deps_toml_accepts() -> None:
    """A fragment of deps.toml in the docs (a [cache] table, a recipe) completed with what it leaves out
    (a [bundle], a dependency's pin) is valid against the shipped schema: the docs name no key that
    does not exist and no value the manifest refuses."""
    import json
    import re
    import tomllib

    import jsonschema

    from assembler.manifest.schema import schema_path

    validator = jsonschema.Draft7Validator(json.loads(schema_path().read_text()))
    checked = 0
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for block in re.findall(r"```toml\n(.*?)```", page.read_text(), re.S):
            data = tomllib.loads(block)
            bundle = data.setdefault("bundle", {})
            bundle.setdefault("name", "docs")
            bundle.setdefault("version", "1.0")
            for dep in data.get("deps", {}).values():
                dep.setdefault("commit", "0" * 40)
                if "source" not in dep:
                    dep.setdefault("upstream", "https://example.invalid/dep.git")
            errors = [f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
                      for error in validator.iter_errors(data)]
            assert errors == [], (page.relative_to(ROOT), errors)
            checked += 1
    assert checked >= 8
