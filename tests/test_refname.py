"""assembler.manifest.refname against git's own `git check-ref-format --branch` on a corpus:
hand-picked edge cases plus generated names over the characters the rules are about."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from assembler.manifest.refname import branch_problem

EDGE_CASES = [
    "main", "release/2.10", "v1.0", "feature/x-y_z", "@", "x/@", "a@b", "é", "refs/heads/x", "HEAD", "head",
    "-x", "--upload-pack=touch pwned;git-upload-pack", "a..b", "a@{b", "@{-1}", "a/.b", ".a", "a.", "a.lock",
    "a/b.lock", "foo.lock/bar", "a/", "/a", "a//b", "a b", "a\tb", "a\\b", "a~1", "a^", "a:b", "a?", "a*", "a[b",
    "a\x7fb", "a\x01", "", ".", "..", "a/./b", "a.lock.b", "lock", ".lock", "a/..", "x@", "@@", "{", "a{b}",
    "main:refs/heads/evil", "+main", "a\nb", "a;b", "$(touch x)", "`x`", "a'b", 'a"b', "ü/ß",
]
ALPHABET = "ab./-@{}~^:?*[\\ .lockHEAD\t\x7fé+"


def _corpus(count: int) -> list[str]:
    rng = random.Random(10)  # fixed seed: the same corpus every run
    generated = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 9))) for _ in range(count)]
    return EDGE_CASES + generated


def _git_accepts(names: list[str], cwd: Path) -> list[bool]:
    """git's verdict for each name (run outside any repository, so '@{-1}' is not expanded).
    The names go as arguments after '--', never through a shell."""
    script = ('for n in "$@"; do if git check-ref-format --branch "$n" >/dev/null 2>&1; then echo 1; else echo 0; fi; '
              'done')
    out = subprocess.run(["sh", "-c", script, "sh", *names], cwd=cwd, capture_output=True, text=True, check=True,
                         env={**os.environ, "GIT_CEILING_DIRECTORIES": str(cwd.parent)})
    return [line == "1" for line in out.stdout.splitlines()]


@pytest.mark.parametrize("count", [int(os.environ.get("ASSEMBLE_FUZZ_EXAMPLES", "600"))])
def test_branch_rules_match_git(tmp_path: Path, count: int) -> None:
    names = [n for n in _corpus(count) if "\x00" not in n]
    verdicts = _git_accepts(names, tmp_path)
    assert len(verdicts) == len(names)
    mismatches = [(n, git_ok, branch_problem(n)) for n, git_ok in zip(names, verdicts, strict=True)
                  if git_ok != (branch_problem(n) is None)]
    assert not mismatches, mismatches[:10]
    assert sum(verdicts) > 20 and sum(not ok for ok in verdicts) > 20  # the corpus exercises both sides


def test_option_like_names_are_refused_with_a_reason() -> None:
    assert (branch_problem("--upload-pack=touch pwned;git-upload-pack")
            == "it starts with '-' (it would read as an option)")
    assert branch_problem("main:refs/heads/evil") == "it contains ':'"
    assert branch_problem("a\nb") == "it contains the control character '\\n'"
