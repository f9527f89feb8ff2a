"""The `status` sample the docs show is what `status` prints (issue 30: the README's sample
differed from the real output). The sample's situation is made for real in a copy of the example:
a checkout, `assemble check vecadd`, then one commit and one edit in forks/vecadd; every line
of each sample in the README and the docs must be the real line, SHAs and times aside. The
build line needs a build; it is held to what the build evidence says of a STABLE audit with
`--verify` passing on the example's two torch versions, by the code that prints it."""

from __future__ import annotations

import re
from pathlib import Path

from assembler.audit.gate import GateVerdict, Verdict
from assembler.builder.evidence import BuildEvidence
from tests.build_support import HERMETIC_CUDA
from tests.conftest import ROOT, run_assemble
from tests.gitrepo import git

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def samples() -> list[tuple[str, list[str]]]:
    """(page, lines) of every block in the docs that shows `status` of the example's vecadd."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```[a-z]*\n(vecadd: pin .*?)```", page.read_text(), re.S):
            found.append((page.relative_to(ROOT).as_posix(), block.splitlines()))
    return found


def normal(line: str) -> str:
    """A line with its SHAs, timestamps and dates made placeholders."""
    line = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", "<time>", line)
    line = re.sub(r"\b\d{4}-\d\d-\d\d\b", "<date>", line)
    return re.sub(r"\b[0-9a-f]{12}\b", "<sha>", line)


def test_the_status_samples_are_what_status_prints(example_ws: Path, private_cache: Path) -> None:
    documented = samples()
    assert {page for page, _ in documented} >= {"docs/getting-started.md", "docs/reference/commands.md"}
    env = {"ASSEMBLE_CACHE": str(private_cache), "COLUMNS": "80"}

    def assemble(*words: str) -> str:
        result = run_assemble(*words, cwd=example_ws, env=env)
        assert result.returncode == 0, (words, result.stderr)
        return result.stdout

    assemble("checkout")
    assemble("check", "vecadd", "--cuda", HERMETIC_CUDA)
    fork = example_ws / "forks" / "vecadd"
    source = fork / "csrc" / "add_scaled.cpp"
    source.write_text(source.read_text() + "// the scale is a double: no dtype to check\n")
    git(fork, "commit", "-q", "-am", "Check the scale's dtype")
    (fork / "README.md").write_text((fork / "README.md").read_text() + "local note\n")
    printed = assemble("status", "vecadd").splitlines()
    assert max(len(line) for line in printed) <= 80

    stable = BuildEvidence((GateVerdict.of(Verdict.STABLE),), "2026-12-02T22:05:49+00:00", True,
                           verified=("2.13.0", "2.14.1"))
    for page, lines in documented:
        building = [line for line in lines if line.startswith("  build: ")]
        assert [normal(line) for line in building] == [normal(f"  build: {stable.summary()}")], page
        assert [normal(line) for line in lines if not line.startswith("  build: ")] == [
            normal(line) for line in printed if not line.startswith("  build: ")], page
