"""Every subcommand's --help says what it does and shows examples that parse; completion knows
the workspace's dependency names and the CUDA versions here; SHAs are one length in every
table (issue 22, item 16)."""

from __future__ import annotations

import io
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from assembler.cli import COMMAND_MODULES, build_parser
from tests.conftest import GitWorkspace, run_assemble


@pytest.mark.parametrize("command", list(COMMAND_MODULES))
def test_every_help_page_has_a_description_and_examples_that_parse(command: str) -> None:
    page = run_assemble(command, "--help", env={"COLUMNS": "80"}).stdout
    description = page.split("\n\n")[1]
    assert description and not description.startswith(("positional arguments", "options")), page
    examples = page.split("\nexamples:\n", 1)[1].split("\n\n")[0]
    commands = [line.strip() for line in examples.splitlines() if line.startswith("  assemble ")]
    assert commands, page
    for line in commands:
        words = shlex.split(line.split(" | ")[0])[1:]
        build_parser(words[0] if words[0] in COMMAND_MODULES else None).parse_args(words)
    assert all(len(line) <= 80 for line in examples.splitlines()), examples


def test_completion_offers_dependency_names_and_cuda_versions(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "assemble").write_text(f"#!/bin/sh\nexec {sys.executable} -m assembler \"$@\"\n")
    (bin_dir / "assemble").chmod(0o755)
    cache = tmp_path / "cache"
    (cache / "toolchains" / "cuda-13.2-00000000").mkdir(parents=True)
    (cache / "toolchains" / "cuda-12.9-00000000.lock").touch()  # a lock is no toolkit
    script = tmp_path / "assemble.bash"
    script.write_text(run_assemble("completion", "bash").stdout)

    def complete(*words: str) -> list[str]:
        quoted = " ".join(shlex.quote(w) for w in words)
        probe = (f'source {script}; COMP_WORDS=(assemble {quoted}); COMP_CWORD={len(words)}; _assemble; printf "%s\\n" '
                 f'"${{COMPREPLY[@]}}"')
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ASSEMBLE_CACHE": str(cache), "HOME": str(tmp_path)}
        done = subprocess.run(["bash", "-c", probe], cwd=git_workspace.root, env=env, capture_output=True, text=True,
                              check=True)
        return done.stdout.split()

    assert complete("checkout", "k") == ["kern"]
    assert complete("show", "") == ["kern"]
    assert complete("build", "--only", "") == ["kern"]
    assert "13.2" in complete("build", "--cuda", "") and "12.9" not in complete("build", "--cuda", "")
    assert complete("checkout", "--fo") == ["--format"]
    fish = run_assemble("completion", "fish").stdout
    assert ("(assemble completion --list deps 2>/dev/null)" in fish
            and "(assemble completion --list cuda 2>/dev/null)" in fish)


def test_the_build_summary_shows_12_character_shas_as_every_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from assembler.builder.outcome import BuildOutcome
    from assembler.builder.pipeline import BuildReport, DepReport
    from assembler.cli import build as build_cli
    from assembler.report import output

    sha = "0123456789abcdef" * 2 + "01234567"
    report = BuildReport(bundle="b", cuda="13.2", nvcc="13.2.51", cuda_origin="local", cuda_root=Path("/cuda"),
                         torch="2.13.0",
                         deps=[DepReport("vecadd", sha, sha, "k" * 32, 3, BuildOutcome.CACHED, 0.0, ["9.0a"], "2.10",
                                         None, None, verdict="STABLE")])
    from rich.console import Console

    buffer = io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=buffer, width=200, color_system=None))
    build_cli._emit(report, as_json=False)
    assert sha[:12] in buffer.getvalue() and sha[:13] not in buffer.getvalue()
