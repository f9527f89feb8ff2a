"""Start-up stays within budget: the everyday commands import no heavy module.

`assemble deps`, a no-op `assemble checkout` and `assemble patches --offline` run on a checked-out
copy of the example workspace under ``python -X importtime``; the test fails when one of the
listed modules was imported (each costs tens of milliseconds, against a 100 ms budget end to
end; benchmarks/startup.py measures the time itself). Neither ``--json`` nor the tables
(report.table, not rich) load rich.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.example import EXAMPLE, make_upstreams

# Top-level packages that must not load on these paths, and why they are heavy.
HEAVY = {
    "rich": "the console library (~30 ms): only when a table or progress is drawn",
    "git": "GitPython (~100 ms): never imported by assemble (the git layer runs git itself: benchmarks/git_layer.py)",
    "tomlkit": "the comment-keeping TOML writer: only when deps.toml is edited",
    "cyclonedx": "SBOM writing: merge only",
    "auditwheel": "manylinux checks: merge only",
    "elftools": "ELF reading: audit, build, merge",
    "torch": "never in assemble's own process",
    "filelock": "the cache locks: only when a mirror is created or fetched",
    "jsonschema": "a test dependency",
    "email": "RFC 2047 decoding, only for a patch header that needs it",
}

# Modules a path must not load beyond HEAVY: no git process where files answer (the no-op
# checkout reads refs and its state file; an unchanged patches report reuses its classification).
NOT_ON = {
    "checkout (no-op)": {"subprocess", "assembler.git.process"},
    "patches --offline --json": {"subprocess", "assembler.git.process", "assembler.upstreaming.evidence_layers"},
    "patches --offline (table)": {"subprocess", "assembler.git.process", "assembler.upstreaming.evidence_layers"},
}

PATHS = {
    "deps --json": ["deps", "--json"],
    "deps (table)": ["deps"],
    "checkout (no-op)": ["checkout"],
    "patches --offline --json": ["patches", "--offline", "--json"],
    "patches --offline (table)": ["patches", "--offline"],
}


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of the example workspace, checked out and its tracked branches fetched."""
    root = tmp_path_factory.mktemp("startup")
    workspace = root / "example"
    shutil.copytree(EXAMPLE, workspace, ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble"))
    make_upstreams(workspace / "upstreams")
    env = {**os.environ, "ASSEMBLE_CACHE": str(root / "cache")}
    for words in (["checkout"], ["patches", "--json"]):
        result = subprocess.run([sys.executable, "-m", "assembler", "-C", str(workspace), *words], env=env,
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    return workspace, env


def imported_modules(workspace: Path, env: dict[str, str],
                     words: list[str]) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """The modules `python -X importtime -m assembler -C WORKSPACE WORDS` imported."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "assembler", "-C", str(workspace), *words],
                            env=env, capture_output=True, text=True)
    names = set()
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+\d+ \|(\s*)(\S+)$", line)
        if match:
            names.add(match.group(2))
    return names, result


@pytest.mark.parametrize("path", list(PATHS))
def test_everyday_commands_import_no_heavy_module(example: tuple[Path, dict[str, str]], path: str) -> None:
    workspace, env = example
    names, result = imported_modules(workspace, env, PATHS[path])
    assert result.returncode == 0, result.stderr[-2000:]
    assert "assembler.cli" in names, "importtime output not understood"
    heavy = sorted({name.split(".")[0] for name in names} & set(HEAVY))
    assert not heavy, f"`assemble {' '.join(PATHS[path])}` imported " + "; ".join(f"{h} ({HEAVY[h]})" for h in heavy)
    assert not names & NOT_ON.get(path, set()), sorted(names & NOT_ON[path])
    # only the subcommand named is registered, so other commands' modules stay unloaded
    others = {f"assembler.cli.{name}" for name in ("build", "audit", "verify", "merge", "rebase", "sbom")}
    assert not names & others, sorted(names & others)


def test_the_check_sees_a_heavy_import(example: tuple[Path, dict[str, str]]) -> None:
    """The same measurement finds rich where a command still prints with it, `assemble cache
    prune --dry-run` (its lines; no table), so the test can fail."""
    workspace, env = example
    names, result = imported_modules(workspace, env, ["cache", "prune", "--dry-run"])
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rich.console" in names and "rich.table" not in names


def test_refs_read_without_git_agree_with_git(tmp_path: Path) -> None:
    """read_ref/read_head (the no-process reads of the no-op paths) give what git gives: loose
    and packed refs, a symbolic HEAD, a detached HEAD; None for what is not there."""
    from assembler.git.reproducible import read_ref
    from assembler.git.state import read_head

    def git(*args: str) -> str:
        env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
               "GIT_AUTHOR_EMAIL": "t@t.invalid", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid"}
        return subprocess.run(["git", *args], cwd=tmp_path, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q", "-b", "main")
    git("commit", "-q", "--allow-empty", "-m", "one")
    first = git("rev-parse", "HEAD")
    git("commit", "-q", "--allow-empty", "-m", "two")
    second = git("rev-parse", "HEAD")
    git("branch", "old", first)
    git_dir = tmp_path / ".git"
    assert read_head(tmp_path) == second and read_ref(git_dir, "refs/heads/old") == first
    git("pack-refs", "--all")
    assert not (git_dir / "refs" / "heads" / "old").exists()
    assert read_ref(git_dir, "refs/heads/old") == first and read_head(tmp_path) == second
    git("checkout", "-q", "--detach", first)
    assert read_head(tmp_path) == first == git("rev-parse", "HEAD")
    assert read_ref(git_dir, "refs/heads/missing") is None
    assert read_ref(git_dir, "refs/heads/../../HEAD") is None and read_ref(git_dir, "HEAD") is None


@pytest.mark.parametrize("url", ["https://github.com/deepseek-ai/FlashMLA.git", "/srv/mirrors/with space/kern",
                                 "file:///tmp/a;b#c", 'C:\\repos\\"quoted"', "git@host.invalid:owner/repo.git",
                                 " /srv/leading and  double  spaces ", "/srv/tab\there"])
def test_mirror_origin_read_without_git_agrees_with_git(tmp_path: Path, url: str) -> None:
    """A mirror's origin URL is read from its config file without configparser in the usual case
    (mirrors._simple_origin_url) and with it otherwise; either way what git itself reads."""
    from assembler.git.mirrors import origin_url

    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    repo = tmp_path / "mirror.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], env=env, check=True)
    subprocess.run(["git", "-C", str(repo), "config", "remote.origin.url", url], env=env, check=True)
    subprocess.run(["git", "-C", str(repo), "config", "remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"],
                   env=env, check=True)
    assert origin_url(repo) == url


def test_deps_inspects_checkouts_side_by_side_and_reports_the_first_failure(tmp_path: Path) -> None:
    """`assemble deps` runs each checkout's `git status` in parallel (git.condition.inspect_all);
    the rows keep manifest order, and when two checkouts are damaged the error names the first."""
    from tests.conftest import run_assemble

    workspace = tmp_path / "example"
    shutil.copytree(EXAMPLE, workspace, ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble"))
    make_upstreams(workspace / "upstreams")
    env = {"ASSEMBLE_CACHE": str(tmp_path / "cache")}
    assert run_assemble("-C", str(workspace), "checkout", env=env).returncode == 0
    listed = run_assemble("-C", str(workspace), "deps", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["deps"]
    names = [row["name"] for row in rows]
    assert len(names) >= 3 and all(row["checkout"] == "ready" for row in rows)
    (workspace / "forks" / names[-1] / "tracked.txt").write_text("an edit\n")
    edited = json.loads(run_assemble("-C", str(workspace), "deps", "--json", env=env).stdout)["deps"]
    assert ([(row["name"], row["checkout"]) for row in edited]
            == [*[(name, "ready") for name in names[:-1]], (names[-1], "dirty")])
    for name in names[1:]:
        (workspace / "forks" / name / ".git" / "index").write_bytes(b"not an index")
    failed = run_assemble("-C", str(workspace), "deps", env=env)
    assert failed.returncode == 2, failed.stderr
    assert str(workspace / "forks" / names[1]) in failed.stderr and f"forks/{names[2]}" not in failed.stderr
