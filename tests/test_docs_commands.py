"""The commands the README's ten-line tour and docs/ci.md tell a user to type parse as written
(issue 22, items 6 and 7), and docs/ci.md describes `plan --matrix --json` as it is. Every
`assemble` command in a shell or YAML block of the README and of the docs site (docs/**/*.md)
parses too, and every `make` target they name exists (issue 30)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from assembler.builder.matrix import MatrixEntry, matrix_document
from assembler.cli import COMMAND_MODULES, build_parser

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
    try:
        build_parser(words[0] if words and words[0] in COMMAND_MODULES else None).parse_args(words)
    except SystemExit as stop:  # --version, --help: argparse's way of succeeding
        assert stop.code == 0, command


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]  # where the commands a user reads live
SHELL_BLOCK = re.compile(r"```(?:sh|bash|shell|console|ya?ml)\n(.*?)```", re.S)


def shell_commands(text: str, program: str) -> list[str]:
    """Every command of ``program`` in the shell and YAML blocks of a page: wherever a command can
    start (a line, after `run:` or `command:`, `&&`, `||`, `;`, `|`, inside `$(...)` or quotes), with
    a path before it or not (`.venv/bin/assemble`), up to a redirection; comments cut."""
    found = []
    for block in SHELL_BLOCK.findall(text):
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#.*", "", line)
            for segment in re.split(r"&&|\|\||[;|()\"]|\$\(", line):
                segment = re.sub(r"^\s*(?:-\s+)?(?:(?:run|command):\s*(?:>-?)?)?\s*", "", segment)
                match = re.match(rf"^(?:\S*/)?({program}(?:\s[^>]*)?)(?:>|$)", segment.rstrip())
                if match:
                    found.append(match[1].strip())
    return found


DOCS_COMMANDS = [(page.relative_to(ROOT).as_posix(), command) for page in DOCS
                 for command in shell_commands(page.read_text(), "assemble")]


def test_the_docs_pages_hold_commands() -> None:
    pages = {page for page, _ in DOCS_COMMANDS}
    assert {"README.md", "docs/index.md", "docs/getting-started.md", "docs/ci.md", "docs/guides/migrate.md"} <= pages
    assert len(DOCS_COMMANDS) > 80
    # the old README's tour named each of these; they live in the docs now
    named = {command.split()[1] for page, command in DOCS_COMMANDS if page != "README.md"}
    assert {"export", "rebase", "assess", "migrate", "review", "sbom", "size", "plan", "ci", "merge"} <= named


@pytest.mark.parametrize(("page", "command"), DOCS_COMMANDS,
                         ids=[f"{page}: {command}"[:100] for page, command in DOCS_COMMANDS])
def test_every_command_of_the_docs_site_parses(page: str, command: str) -> None:
    parse(command)


def test_every_make_target_the_docs_name_exists() -> None:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    named = {command.split()[1] for page in DOCS
             for command in shell_commands(page.read_text(), "make") if " " in command}
    assert named and named <= targets, named - targets


TOUR_HEADING = "## A ten-line tour"


def tour_section() -> str:
    """The README's tour, up to the next heading."""
    return re.split(r"\n##+ ", README.split(TOUR_HEADING, 1)[1], maxsplit=1)[0]


def quick_tour() -> list[str]:
    """The tour's commands, as written (no placeholders: each is meant to be typed)."""
    return commands(tour_section())


@pytest.mark.parametrize("command", commands(CI))
def test_every_command_of_docs_ci_parses(command: str) -> None:
    parse(command)  # `audit --check dist/*.whl` did not: --check takes torch|abi3|all


@pytest.mark.parametrize("command", quick_tour())
def test_every_concrete_command_of_the_quick_tour_parses(command: str) -> None:
    parse(command)


def test_the_quick_tour_says_where_to_run_it() -> None:
    tour = tour_section()
    assert "cd examples/stable-abi" in tour and ".venv/bin/assemble" in tour and "make demo" in tour
    assert {"deps", "status", "show", "audit", "verify"} <= {c.split()[1] for c in quick_tour()}
    assert not any(re.search(r"[\[\]|]|\bDEP\b", c) for c in quick_tour())  # typed as written


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


def test_the_docs_name_the_migration_verdict_as_the_output_does() -> None:
    """One phrase (item 19): `patches` prints "migrated on fork" (JSON migrated_on_fork)."""
    assert ("| dependency | migrated on fork | migrated upstream |"
            in (ROOT / "assembler" / "upstreaming" / "table.py").read_text())
    texts = {page.relative_to(ROOT).as_posix(): page.read_text() for page in DOCS}
    assert [page for page, text in texts.items() if "our side" in text] == []
    assert '"migrated on fork"' in texts["docs/reference/commands.md"]
