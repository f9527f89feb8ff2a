"""Nothing in the docs leads out of the repository (issue 30's minor: docs/DESIGN.md named
`../shared/DESIGN.md`, a file a clone does not have). Every Markdown link of the README, the
docs and the example's pages, and every Markdown file a page names in inline code, is a file of
this repository; URLs are not followed (offline)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from tests.conftest import ROOT

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`\n]*`")
NAMED_PAGE = re.compile(r"`([^`\s]+\.md)(?:#[^`\s]*)?`")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").rglob("*.md"))]


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (examples, not references)."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


def alternatives(name: str) -> list[str]:
    """``docs/reference/{cli,json}.md`` as the names it stands for (one level of braces)."""
    parts = re.split(r"\{([^{}]*)\}", name)
    choices = [part.split(",") if index % 2 else [part] for index, part in enumerate(parts)]
    return ["".join(chosen) for chosen in itertools.product(*choices)]


def outside(page: Path, target: str, from_root: bool = False) -> str | None:
    """Why ``target`` named by ``page`` is no file of the repository, or None. A name in inline
    code may be spelled from the repository's root instead of the page."""
    path = target.partition("#")[0]
    if not path:
        return None  # a heading of the page itself
    bases = [page.parent, ROOT] if from_root else [page.parent]
    for base in bases:
        resolved = (base / path).resolve()
        if resolved.is_relative_to(ROOT) and resolved.exists():
            return None
    return f"{page.relative_to(ROOT)}: {target} is not a file of the repository"


def problems(page: Path, text: str) -> list[str]:
    text = prose(text)
    found = [why for target in LINK.findall(CODE_SPAN.sub("", text))
             if not re.match(r"[a-z][a-z0-9+.-]*:", target) and (why := outside(page, target))]
    for match in NAMED_PAGE.finditer(text):
        if any(mark in match.group(1) for mark in "<*"):
            continue  # a pattern (patches/<dep>/*.md), not a file
        found += [why for name in alternatives(match.group(1)) if (why := outside(page, name, from_root=True))]
    return found


def test_nothing_in_the_docs_leads_out_of_the_repository() -> None:
    assert [why for page in pages() for why in problems(page, page.read_text())] == []


def test_the_checker_finds_a_name_outside_the_repository() -> None:
    """What DESIGN.md said before (a page named in inline code), a link out of the clone, and a
    page that is not there are each named; a link to a heading, a URL and an existing page are not."""
    design = ROOT / "docs" / "DESIGN.md"
    before = "The shared picture (`../shared/DESIGN.md`) holds; this file records where ..."
    assert problems(design, before) == ["docs/DESIGN.md: ../shared/DESIGN.md is not a file of the repository"]
    assert problems(design, "see [the plan](../../plan.md) and [gone](guides/gone.md)") == [
        "docs/DESIGN.md: ../../plan.md is not a file of the repository",
        "docs/DESIGN.md: guides/gone.md is not a file of the repository"]
    assert (problems(design, "[a](#caches) [b](https://example.invalid/x.md) [c](security.md) "
                             "`docs/reference/{cli,json}.md`") == [])
    assert (problems(design, "`docs/reference/{cli,gone}.md`")
            == ["docs/DESIGN.md: docs/reference/gone.md is not a file of the repository"])
