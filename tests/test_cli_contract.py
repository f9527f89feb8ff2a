"""The CLI's conventions, for every command at once: one JSON document (the envelope) on success
and on failure, valid against the command's JSON Schema; --format/--json everywhere; global
options before or after the command; --cuda/--torch checked before anything is fetched; "did you
mean"; help text for every argument; exit codes and variables in `assemble --help`; shell
completion; the package installed by uv into a venv without pip.

Successful documents of the commands that compile or install torch (build, verify, merge, check,
plan) are checked in their own tests: conftest.run_assemble and build_support.assemble validate
every --json run against the schema (tests/json_contract.py)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from assembler.cli import COMMAND_MODULES, ENVIRONMENT_VARIABLES, EXIT_CODES, INTERNAL_VARIABLES, build_parser
from assembler.errors import ExitCode
from tests.audit_fixtures.build import make_wheel
from tests.conftest import ROOT, GitWorkspace, run_assemble
from tests.example import EXAMPLE, make_upstreams
from tests.hostile_wheels import compile_seed
from tests.json_contract import SCHEMAS, schema_for, validate_document

JSON_COMMANDS = [name for name in COMMAND_MODULES if name != "completion"]  # it prints a script

# Per command: arguments that fail (exit 2) outside any workspace, before touching the network.
FAILING = {
    "deps": ["deps"],
    "checkout": ["checkout"],
    "export": ["export", "kern"],
    "patches": ["patches", "--offline"],
    "rebase": ["rebase", "kern", "--dry-run"],
    "check": ["check"],
    "assess": ["assess"],
    "migrate": ["migrate", "kern"],
    "review": ["review", "kern"],
    "build": ["build", "--cuda", "13.2"],
    "plan": ["plan", "--matrix", "--cuda", "13.2"],
    "verify": ["verify", "missing.whl", "--python", sys.executable],
    "merge": ["merge", "missing-dir"],
    "audit": ["audit", "missing.whl"],
    "sbom": ["sbom", "missing.whl"],
    "size": ["size", "missing.whl"],
    "cache": ["cache", "prune", "--keep", "--dry-run"],
    "status": ["status"],
    "init": ["init", "--name=bad name"],
    "add": ["add", "kern", "https://git.invalid/kern", "--commit", "a" * 40],
    "show": ["show", "kern"],
    "ci": ["ci", "github", "--assembler-requirement", "numpy"],  # not a requirement of assembler
}


def test_every_command_has_a_schema_and_a_failing_case() -> None:
    assert set(FAILING) == set(JSON_COMMANDS)
    names = {path.name.removesuffix(".schema.json") for path in SCHEMAS.glob("*.schema.json")}
    assert names == {*JSON_COMMANDS, "build-plan", "assemble"}
    for name in names:
        schema_for(name)  # a valid Draft 2020-12 schema


@pytest.mark.parametrize("command", JSON_COMMANDS)
@pytest.mark.parametrize("spelling", ["--json", "--format=json"])
def test_failure_is_one_json_document_on_stdout(command: str, spelling: str, tmp_path: Path) -> None:
    words = FAILING[command]
    result = run_assemble(*words, spelling, cwd=tmp_path, env={"ASSEMBLE_CACHE": str(tmp_path / "cache")})
    assert result.returncode == ExitCode.BAD_INPUT, (result.stdout, result.stderr)
    document = validate_document(result.stdout, result.returncode)
    assert document["command"] == command and document["ok"] is False and document["schema"] == 1
    assert document["error"]["message"] and document["error"]["exit_code"] == 2
    assert "error:" in result.stderr  # people still read the error on stderr
    assert not (tmp_path / "cache" / "git").exists(), "nothing may be fetched before the arguments are refused"


def test_table_output_prints_no_json_on_failure(tmp_path: Path) -> None:
    result = run_assemble("deps", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == "" and result.stderr.startswith("error: ")


def test_argument_errors_are_json_too(tmp_path: Path) -> None:
    result = run_assemble("deps", "--json", "--no-such-option", cwd=tmp_path)
    assert result.returncode == 2
    document = validate_document(result.stdout, 2)
    assert "--no-such-option" in document["error"]["message"]


def test_success_documents_of_the_workspace_commands(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    ws = git_workspace
    for words in (["checkout"], ["deps"], ["export", "kern"], ["patches"], ["patches", "--offline"],
                  ["rebase", "kern", "--dry-run"], ["cache", "dir"], ["cache", "info"],
                  ["cache", "prune", "--dry-run"]):
        for spelling in (["--json"], ["--format", "json"]):
            result = ws.assemble(*words, *spelling)
            assert result.returncode == 0, (words, result.stderr)
            document = validate_document(result.stdout, 0)
            assert document["command"] == words[0] and document["ok"] is True and "error" not in document
    deps = json.loads(ws.assemble("deps", "--json").stdout)
    assert deps["deps"][0]["name"] == "kern" and deps["deps"][0]["checkout"] == "ready"


def test_success_documents_of_audit_and_size(tmp_path: Path) -> None:
    so = compile_seed(tmp_path)
    wheel = make_wheel(tmp_path / "seed-1.0-cp39-abi3-linux_x86_64.whl",
                       {"seed/_seed.abi3.so": so, "seed/__init__.py": b""})
    one = validate_document(run_assemble("audit", str(wheel), "--json").stdout, 0)
    assert one["command"] == "audit" and one["path"] == str(wheel) and one["ok"]
    two = validate_document(run_assemble("audit", str(wheel), str(so), "--format", "json").stdout, 0)
    assert [report["path"] for report in two["reports"]] == [str(wheel), str(so)]
    size = run_assemble("size", str(wheel), "--json")
    assert validate_document(size.stdout, size.returncode)["size"] == wheel.stat().st_size
    over = run_assemble("size", str(wheel), "--budget", "1kB", "--json")  # a gate that says no: exit 1
    document = validate_document(over.stdout, over.returncode)
    assert over.returncode == 1 and document["ok"] is False and document["size"] == wheel.stat().st_size
    assert "budget" in document["error"]["message"]
    sbom = run_assemble("sbom", str(wheel), "--json")  # a wheel without an SBOM
    assert sbom.returncode == 2 and validate_document(sbom.stdout, 2)["error"]["message"]


def test_global_options_before_or_after_the_command(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    env = {"ASSEMBLE_CACHE": str(git_workspace.cache)}
    assert git_workspace.assemble("checkout").returncode == 0
    before = run_assemble("-C", str(git_workspace.root), "-q", "--color", "never", "deps", "--json", cwd=tmp_path,
                          env=env)
    after = run_assemble("deps", "--json", "-C", str(git_workspace.root), "-v", "--color=always", cwd=tmp_path, env=env)
    assert before.returncode == after.returncode == 0, (before.stderr, after.stderr)
    assert json.loads(before.stdout)["deps"] == json.loads(after.stdout)["deps"]
    nested = run_assemble("cache", "dir", "-C", str(git_workspace.root), "--json", cwd=tmp_path, env=env)
    assert json.loads(nested.stdout)["root"] == str(git_workspace.cache)


def test_color_follows_the_flag_and_no_color(git_workspace: GitWorkspace) -> None:
    assert git_workspace.assemble("checkout").returncode == 0
    always = git_workspace.assemble("deps", "--color", "always")
    assert "\x1b[" in always.stdout
    plain = git_workspace.assemble("deps")  # not a terminal: no colour
    assert "\x1b[" not in plain.stdout
    env = {"ASSEMBLE_CACHE": str(git_workspace.cache), "NO_COLOR": "1"}
    failed = run_assemble("--color", "auto", "-C", str(git_workspace.root), "export", "nope", env=env)
    assert failed.returncode == 2 and "\x1b[" not in failed.stderr


def test_piped_output_is_never_wrapped_nor_cut(git_workspace: GitWorkspace) -> None:
    """Without a terminal (and without COLUMNS) tables are as wide as their content: full SHAs,
    paths and URLs; notes stay on one line."""
    assert git_workspace.assemble("checkout").returncode == 0
    env = {**os.environ, "ASSEMBLE_CACHE": str(git_workspace.cache)}
    env.pop("COLUMNS", None)
    deep = git_workspace.root.parent / ("a-rather-long-directory-name-" * 4).rstrip("-")
    shutil.copytree(git_workspace.root, deep)
    result = subprocess.run([sys.executable, "-m", "assembler", "-C", str(deep), "deps"], env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert str(deep / "deps.toml") in result.stdout  # the title: one line, not folded at 80 columns
    assert git_workspace.upstream.path.name in result.stdout
    missing = subprocess.run([sys.executable, "-m", "assembler", "-C", str(deep / ("x" * 120)), "deps"], env=env,
                             capture_output=True, text=True)
    assert missing.returncode == 2
    assert len(missing.stderr.splitlines()) == 2, missing.stderr  # error and hint, each on one line


@pytest.mark.parametrize("words", [["deps"], ["patches", "--offline", "--format", "markdown"]])
def test_a_reader_that_went_away_is_not_an_error(git_workspace: GitWorkspace, words: list[str]) -> None:
    """`assemble ... | head`: stdout's reader is gone. Exit 1 quietly, as git does; not "error:
    Broken pipe, check the network" (BrokenPipeError is a ConnectionError)."""
    assert git_workspace.assemble("patches").returncode == 0  # fetched: --offline has a mirror
    env = {**os.environ, "ASSEMBLE_CACHE": str(git_workspace.cache)}
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to stdout fails with EPIPE
    try:
        result = subprocess.run([sys.executable, "-m", "assembler", "-C", str(git_workspace.root), *words], env=env,
                                stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert result.returncode == 1 and result.stderr == "", result.stderr


def test_cuda_and_torch_versions_are_checked_before_any_fetch(tmp_path: Path) -> None:
    workspace = tmp_path / "example"
    shutil.copytree(EXAMPLE, workspace, ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble"))
    make_upstreams(workspace / "upstreams")
    cache = tmp_path / "cache"
    for words, expected in ((["build", "--cuda", "13"], "X.Y"),
                            (["build", "--cuda", "13.2", "--torch", "2.13.0x"], "X.Y.Z"),
                            (["check", "--cuda", "thirteen"], "X.Y"), (["plan", "--matrix", "--cuda", "13.2.1"], "X.Y"),
                            (["verify", "w.whl", "--torch", "latest"], "X.Y.Z"),
                            (["merge", "d", "--cuda", "13"], "X.Y")):
        result = run_assemble("-C", str(workspace), *words, "--json", env={"ASSEMBLE_CACHE": str(cache)})
        assert result.returncode == 2, (words, result.stderr)
        message = validate_document(result.stdout, 2)["error"]["message"]
        assert expected in message and words[-1] in message, message
    assert not cache.exists() and not (workspace / "forks").exists(), ("a bad version must be refused before anything "
                                                                       "else")
    accepted = run_assemble("-C", str(workspace), "build", "--plan", "--cuda", "13.2", "--torch", "2.11.0+cu130",
                            "--only", "nope")
    assert "not a torch version" not in accepted.stderr and "not a CUDA version" not in accepted.stderr


def test_did_you_mean(tmp_path: Path) -> None:
    result = run_assemble("chekout", cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown command 'chekout'" in result.stderr and "did you mean `assemble checkout`?" in result.stderr
    far = run_assemble("frobnicate", "--json", cwd=tmp_path)
    document = validate_document(far.stdout, 2)
    assert document["command"] == "assemble" and "assemble --help" in document["error"]["hint"]


def test_merge_output_spellings() -> None:
    parser = build_parser("merge")
    for spelling in ("--output", "-o", "--out"):
        assert parser.parse_args(["merge", "d", spelling, "dist"]).output == Path("dist")


def _parsers(parser: argparse.ArgumentParser, prog: str = "assemble") -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(prog, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _parsers(sub, f"{prog} {name}")
    return found


def test_every_argument_has_help_and_a_metavar() -> None:
    problems = []
    for prog, parser in _parsers(build_parser()):
        for action in parser._actions:
            if (isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
                or action.help == argparse.SUPPRESS):
                continue
            name = "/".join(action.option_strings) or action.dest
            if not action.help:
                problems.append(f"{prog} {name}: no help")
            if action.nargs != 0 and action.option_strings and not (action.metavar or action.choices):
                problems.append(f"{prog} {name}: no metavar")
            if not action.option_strings and not action.metavar:
                problems.append(f"{prog} {name}: positional without metavar")
    assert not problems, problems
    for name in JSON_COMMANDS:
        text = run_assemble(*(["cache", "info"] if name == "cache" else [name]), "--help").stdout
        assert "--format" in text and "--json" in text and "-C DIR" in text, name


def test_help_lists_exit_codes_and_environment_variables() -> None:
    text = run_assemble("--help").stdout
    for code in ExitCode:
        assert code in EXIT_CODES
        assert re.search(rf"^\s+{int(code)}\s+\S", text, re.MULTILINE), code
    names = {name for spelled in ENVIRONMENT_VARIABLES for name in spelled.split(", ")}
    for name in names:
        assert name in text
    # every ASSEMBLE_* variable the code reads is documented there (or internal)
    source = "\n".join(path.read_text() for path in (ROOT / "assembler").rglob("*.py"))
    used = set(re.findall(r"[\"'](ASSEMBLE_[A-Z_]+)[\"']", source))
    assert used, "the search must find the variables"
    assert used <= names | set(INTERNAL_VARIABLES), used - names - set(INTERNAL_VARIABLES)


def test_bash_completion_completes_commands_options_and_values(tmp_path: Path) -> None:
    script = tmp_path / "assemble.bash"
    result = run_assemble("completion", "bash")
    assert result.returncode == 0
    script.write_text(result.stdout)

    def complete(*words: str) -> list[str]:
        quoted = " ".join(f"'{w}'" for w in words)
        probe = (f'source {script}; COMP_WORDS=(assemble {quoted}); COMP_CWORD={len(words)}; _assemble; printf "%s\\n" '
                 f'"${{COMPREPLY[@]}}"')
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
        return done.stdout.split()

    assert complete("che") == ["checkout", "check"]
    assert complete("-C", "x", "ca") == ["cache"]
    assert complete("cache", "p") == ["prune"]
    assert set(complete("patches", "--format", "")) == {"table", "markdown", "json"}
    assert "--offline" in complete("patches", "--")
    assert complete("build", "--co") == ["--color"]
    assert "completion" in complete("")


def test_zsh_and_fish_scripts(tmp_path: Path) -> None:
    zsh = run_assemble("completion", "zsh").stdout
    assert zsh.startswith("#compdef assemble") and "complete -o default -F _assemble assemble" in zsh
    fish = run_assemble("completion", "fish").stdout
    assert "complete -c assemble -n 'not __fish_seen_subcommand_from" in fish
    assert re.search(r"__fish_seen_subcommand_from patches' -l format -xa 'table markdown json'", fish)
    for shell, text in (("bash", run_assemble("completion", "bash").stdout), ("zsh", zsh)):
        if shutil.which(shell):
            path = tmp_path / f"c.{shell}"
            path.write_text(text)
            assert subprocess.run([shell, "-n", str(path)], capture_output=True).returncode == 0, shell


def test_package_metadata_and_typing_marker() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    classifiers = project["project"]["classifiers"]
    assert ("Typing :: Typed" in classifiers
            and any(c.startswith("Programming Language :: Python :: 3.11") for c in classifiers))
    assert (ROOT / "assembler" / "py.typed").is_file()
    data = project["tool"]["setuptools"]["package-data"]["assembler"]
    assert "py.typed" in data and "data/schemas/*.json" in data


@pytest.mark.skipif(shutil.which("uv") is None and not (Path(sys.executable).parent / "uv").exists(),
                    reason="uv not installed")
@pytest.mark.integration
def test_uv_installs_a_working_assemble_without_pip(tmp_path: Path) -> None:
    """What `uv tool install` or `pipx` give: a venv without pip. Dependencies come from uv's cache
    (or PyPI); the package from this checkout, not editable."""
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    venv = tmp_path / "venv"
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, env=env, capture_output=True)
    install = subprocess.run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(ROOT)],
                             env=env, capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-3000:]
    assert not (venv / "bin" / "pip").exists()
    assemble = venv / "bin" / "assemble"
    version = subprocess.run([str(assemble), "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("assemble "), version.stderr
    workspace = tmp_path / "example"
    shutil.copytree(EXAMPLE, workspace, ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble"))
    deps = subprocess.run([str(assemble), "-C", str(workspace), "deps", "--json"], capture_output=True, text=True,
                          cwd=tmp_path, env={**env, "ASSEMBLE_CACHE": str(tmp_path / "cache")})
    assert deps.returncode == 0, deps.stderr
    assert [dep["name"] for dep in validate_document(deps.stdout, 0)["deps"]] == ["vecadd", "scalekit", "rowsum"]
    schemas = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import importlib.resources as r; print(sorted(p.name for p in "
                              "r.files('assembler').joinpath('data/schemas').iterdir()))"],
                             capture_output=True, text=True, cwd=tmp_path)
    assert "deps.schema.json" in schemas.stdout, schemas.stderr
    typed = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.resources as r; "
                                                                "print(r.files('assembler').joinpath('py.typed').is_file())"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert typed.stdout.strip() == "True"


def test_build_progress_in_a_ci_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Without a terminal: one line per phase change and per unit finished as it happens
    (elapsed time, no redraw); under CI each finished dependency's log in a ::group::, its
    workflow commands switched off; silent only under -q."""
    from assembler.builder.builder import build_log
    from assembler.cli.build import _Progress
    from assembler.report import output

    log = build_log(tmp_path, "kern")
    log.parent.mkdir(parents=True)
    log.write_text("-- Configuring done\n::error file=x::injected by the build output\n[2/2] Linking kern.so\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    output.configure()
    with _Progress(logs=tmp_path) as progress:
        progress.event("kern", "checking", None, None)
        progress.event("kern", "compiling", 1, 2, "a.cu")
        progress.event("kern", "compiling", 1, 2, "a.cu")  # the same step again: no second line
        progress.event("kern", "compiling", 2, 2, "link kern.so")  # one line per unit finished
        assert re.fullmatch(r"kern: checking \(\d+\.\d s\)\nkern: compiling 1/2 a\.cu \(\d+\.\d s\)\n"
                            r"kern: compiling 2/2 link kern\.so \(\d+\.\d s\)\n", capsys.readouterr().err)
        assert [line.split(": still")[0] for line in progress.still_running()] == ["kern: compiling (2/2 done)"]
        progress.event("kern", "built", None, None)
        built = capsys.readouterr().err  # printed when it finished, not at the end
        progress.event("other", "cached", None, None)
    lines = built.splitlines()
    assert re.fullmatch(r"kern: built \(\d+\.\d s\)", lines[0])
    assert lines[1] == f"::group::kern build log ({log})"
    token = lines[2].removeprefix("::stop-commands::")
    assert len(token) == 32 and lines[3:6] == log.read_text().splitlines()
    assert lines[6:] == [f"::{token}::", "::endgroup::"]
    assert re.fullmatch(r"other: cached \(\d+\.\d s\)\n", capsys.readouterr().err)  # nothing built: no group
    monkeypatch.delenv("GITHUB_ACTIONS")
    monkeypatch.delenv("CI", raising=False)
    with _Progress(logs=tmp_path) as progress:
        progress.event("kern", "built", None, None)
    assert "::group::" not in capsys.readouterr().err
    output.configure(verbosity=-1)  # -q
    with _Progress(logs=tmp_path) as progress:
        progress.event("kern", "built", None, None)
    assert capsys.readouterr().err == ""
    output.configure()
