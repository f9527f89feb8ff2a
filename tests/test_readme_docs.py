"""The README fits on a screen and hands over to the docs site (issue 30, item 1): under 200
lines, a tour of ten lines, and every link it holds leads somewhere: a file of the repository,
a page of the site's navigation, a heading of that page. The exit codes are described where the
prose says what raises them, signals included; and `make demo` does not install in silence."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from markdown.extensions.toc import slugify

from assembler.cli import SIGNAL_EXIT_CODES
from assembler.errors import ExitCode
from tests.conftest import ROOT
from tests.test_docs_commands import tour_section

README = ROOT / "README.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def links(text: str) -> list[str]:
    """Every Markdown link target outside code blocks."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return LINK.findall(prose)


def nav_pages() -> set[str]:
    """The pages of mkdocs.yml's navigation, relative to docs/."""
    def walk(node: object) -> set[str]:
        if isinstance(node, str):
            return {node}
        if isinstance(node, list):
            return set().union(*(walk(item) for item in node))
        if isinstance(node, dict):
            return set().union(*(walk(value) for value in node.values()))
        return set()

    return walk(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])


def anchors(page: Path) -> set[str]:
    """The heading ids MkDocs gives a page (the toc extension's slugs of the heading text)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slugify(re.sub(r"[`*]", "", heading).strip(), "-") for heading in re.findall(r"^#+ (.+)$", text, re.M)}


def broken(source: Path, target: str, nav: set[str]) -> str | None:
    """Why a relative link of ``source`` leads nowhere, or None."""
    if re.match(r"[a-z]+:", target):
        return None  # a URL: not ours to resolve offline
    path, _, anchor = target.partition("#")
    resolved = (source.parent / path).resolve() if path else source
    if not resolved.exists():
        return f"{target}: no such file"
    docs = (ROOT / "docs").resolve()
    page = resolved.relative_to(docs).as_posix() if resolved.is_relative_to(docs) else None
    on_site = resolved.suffix != ".md" or page is None or page in nav
    if not on_site:
        return f"{target}: not in mkdocs.yml's nav, so not on the site"
    if anchor and anchor not in anchors(resolved):
        return f"{target}: no heading #{anchor}"
    return None


def test_the_readme_fits_on_a_screen_of_screens() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < 200, len(lines)
    assert max(len(line) for line in lines) <= 120


def test_every_link_of_the_readme_resolves_and_the_docs_are_linked() -> None:
    targets = links(README.read_text())
    nav = nav_pages()
    assert [why for target in targets if (why := broken(README, target, nav))] == []
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in targets}
    # the entry points of the site: a newcomer finds each from the README
    for page in ("index.md", "getting-started.md", "concepts.md", "security.md", "reference/index.md",
                 "reference/cli.md", "reference/commands.md", "reference/exit-codes.md", "guides/migrate.md"):
        assert (ROOT / "docs" / page).resolve() in linked, page


def test_the_link_checker_finds_what_is_broken(tmp_path: Path) -> None:
    """The checker above is not a tautology: a missing page, a page left out of the site's
    navigation and a missing heading are each named."""
    nav = nav_pages()
    assert broken(README, "docs/guides/gone.md", nav) == "docs/guides/gone.md: no such file"
    assert broken(README, "docs/reference/commands.md#no-such-heading", nav) is not None
    assert broken(README, "docs/reference/commands.md#status", nav) is None
    assert broken(README, "docs/concepts.md", nav - {"concepts.md"}) is not None


def test_the_tour_is_ten_lines() -> None:
    (block,) = re.findall(r"```sh\n(.*?)```", tour_section(), re.S)
    assert len(block.splitlines()) == 10, block


def test_every_exit_code_is_described_where_the_prose_says_what_raises_it() -> None:
    """The hand-written table of reference/conventions.md names every code the program exits
    with: each ExitCode and each signal's (130 Ctrl-C, 143 SIGTERM)."""
    text = (ROOT / "docs" / "reference" / "conventions.md").read_text()
    section = text.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    described = {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.M)}
    assert described == {int(code) for code in ExitCode} | set(SIGNAL_EXIT_CODES)
    assert "SIGTERM" in section and "Ctrl-C" in section


def test_make_installs_with_pip_showing_progress() -> None:
    """A fresh clone's `make demo` spent 91 s silent inside `pip install --quiet -e .[test]`:
    the install both commands start with may not be quiet."""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: \$\(STAMP\)", makefile, re.M) and re.search(r"^test: \$\(STAMP\)", makefile, re.M)
    recipe = makefile.split("$(STAMP): pyproject.toml\n", 1)[1].split("\n\n", 1)[0]
    installs = [line for line in recipe.splitlines() if "pip install" in line and "-e " in line]
    assert installs, recipe
    for line in installs:
        assert not re.search(r"\s(--quiet|-q+)\b", line) and "--progress-bar off" not in line, line


def test_the_readme_says_how_long_the_two_commands_take() -> None:
    """A newcomer could not tell a slow `make test` from a hung one: the README gives both
    commands' times, next to the block that names them, as the docs' home page does."""
    for page in (README, ROOT / "docs" / "index.md"):
        text = " ".join(page.read_text().split())
        after = text.split("make test #", 1)[1][:600]
        for command in ("make demo", "make test"):
            assert re.search(rf"`{command}`( takes)? about \d+(-\d+)? minutes", after), (page.name, command, after)
