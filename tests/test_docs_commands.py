"""The commands the README's quick tour and docs/ci.md tell a user to type parse as written
(issue 22, items 6 and 7), and docs/ci.md describes `plan --matrix --json` as it is."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from assembler.builder.matrix import MatrixEntry, matrix_document
from assembler.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
CI = (ROOT / "docs" / "ci.md").read_text()
README = (ROOT / "README.md").read_text()


def commands(text: str) -> list[str]:
    """Every `assemble ...` command inside a code block (shell or YAML), comments cut."""
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in block.splitlines():
            match = re.search(r"(?:^|run: |\$\()\s*(assemble [^#|)>]*)", line)
            if match:
                found.append(match[1].strip())
    return found


def parse(command: str) -> None:
    words = shlex.split(command.replace("${{ matrix.dep }}", "vecadd").replace("${{ matrix.shard }}", "1/2"))[1:]
    build_parser(words[0]).parse_args(words)


def quick_tour() -> list[str]:
    tour = re.split(r"\n##+ ", README.split("## Quick tour", 1)[1], maxsplit=1)[0]
    return [c for c in commands(tour) if not re.search(r"[\[\]|]|\bDEP\b", c)]  # placeholders stay placeholders


@pytest.mark.parametrize("command", commands(CI))
def test_every_command_of_docs_ci_parses(command: str) -> None:
    parse(command)  # `audit --check dist/*.whl` did not: --check takes torch|abi3|all


@pytest.mark.parametrize("command", quick_tour())
def test_every_concrete_command_of_the_quick_tour_parses(command: str) -> None:
    parse(command)


def test_the_quick_tour_says_where_to_run_it() -> None:
    tour = re.split(r"\n##+ ", README.split("## Quick tour", 1)[1], maxsplit=1)[0]
    assert "cd examples/stable-abi" in tour and ".venv/bin/assemble" in tour and "make demo" in tour
    assert {"deps", "status", "show", "audit", "verify"} <= {c.split()[1] for c in quick_tour()}


def test_docs_ci_describes_the_matrix_document_as_printed() -> None:
    section = CI.split("## `assemble plan --matrix`", 1)[1].split("\n## ", 1)[0]
    example = re.search(r"```\n(.*?)```", section, re.S)
    assert example is not None
    entry = MatrixEntry("vecadd", "k" * 32, "helper", ("9.0a",), 1, 1, False, None)
    printed = matrix_document([entry])
    assert set(printed) == {"include"}  # the document alone: no envelope, whatever ci.md said
    documented = set(re.findall(r'"(\w+)":', example[1]))
    assert documented == {"include", *entry.to_json()}
    assert "jq -c '{include}'" not in CI and "may carry other top-level keys" not in CI


def test_the_repository_ignores_what_make_test_writes() -> None:
    """`make test` runs ruff, mypy and pytest in the clone; none of their caches shows up in git status (item 18)."""
    ignored = set((ROOT / ".gitignore").read_text().split())
    assert {".mypy_cache/", ".ruff_cache/", ".pytest_cache/"} <= ignored


def test_the_readme_names_the_migration_verdict_as_the_output_does() -> None:
    """One phrase (item 19): `patches` prints "migrated on fork" (JSON migrated_on_fork)."""
    assert "| dependency | migrated on fork | migrated upstream |" in (ROOT / "assembler" / "upstreaming" / "table.py").read_text()
    assert "our side" not in README and '"migrated on fork"' in README
