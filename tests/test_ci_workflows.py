"""`assemble ci github|buildkite` (issue 22, item 24): the fan-out workflow files validate
against GitHub Actions' and Buildkite's own schemas (as vendored by check-jsonschema), and every
assemble command in them parses; the Buildkite steps are made from a `plan --matrix` document.
Every job installs assembler from something that exists: this repository, or what the user names
(issue 30, M4)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib import metadata
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from packaging.requirements import Requirement

from assembler.cli import COMMAND_MODULES, build_parser
from tests.conftest import ROOT, run_assemble

VENDOR = files("check_jsonschema") / "builtin_schemas" / "vendor"


def validate(text: str, schema_name: str) -> dict[str, Any]:
    document = yaml.safe_load(text)
    schema = json.loads((VENDOR / schema_name).read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(schema)(schema).validate(document)
    assert isinstance(document, dict)
    return document


def assemble_commands(text: str) -> list[list[str]]:
    """Every `assemble ...` in a shell line, up to the next pipe, redirection, `&&` or `)`."""
    text = text.replace("${{ matrix.dep }}", "vecadd").replace("${{ matrix.shard }}", "1/4")
    return [shlex.split(found) for found in re.findall(r"(?:^|[\s(])assemble ([^|&>)\"]+)", text)]


def parses(words: list[str]) -> None:
    build_parser(words[0] if words[0] in COMMAND_MODULES else None).parse_args(words)


def test_github_workflow_validates_and_its_commands_parse(tmp_path: Path) -> None:
    out = tmp_path / ".github" / "workflows" / "release.yml"
    result = run_assemble("ci", "github", "--cuda", "13.2", "-o", str(out))
    assert result.returncode == 0, result.stderr
    workflow = validate(out.read_text(), "github-workflows.json")
    assert list(workflow["jobs"]) == ["plan", "build", "merge"]
    assert workflow["jobs"]["build"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    runs = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    commands = [words for run in runs for words in assemble_commands(run)]
    assert [words[0] for words in commands] == ["plan", "build", "merge", "audit", "verify"]
    for words in commands:
        parses(words)


def test_buildkite_pipeline_and_the_steps_it_uploads_validate(tmp_path: Path) -> None:
    pipeline = run_assemble("ci", "buildkite", "--cuda", "13.2").stdout
    bootstrap = validate(pipeline, "buildkite.json")
    for words in assemble_commands(bootstrap["steps"][0]["command"]):
        parses(words)
    # the steps for a plan of the example's three dependencies, most expensive first (`include` as plan prints it)
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"include": [{"dep": name} for name in ("scalekit", "vecadd", "rowsum")]}))
    steps = run_assemble("ci", "buildkite", "--cuda", "13.2", "--from-matrix", str(matrix))
    assert steps.returncode == 0, steps.stderr
    uploaded = validate(steps.stdout, "buildkite.json")
    labels = [step if isinstance(step, str) else step["label"] for step in uploaded["steps"]]
    assert labels == ["build scalekit", "build vecadd", "build rowsum", "wait", "merge, audit, verify"]
    for step in uploaded["steps"]:
        for words in assemble_commands(step["command"]) if isinstance(step, dict) else []:
            parses(words)


@pytest.mark.parametrize("matrix", ['{"include": [{"dep": "x; rm -rf /"}]}', '{"nope": 1}', "not json"])
def test_buildkite_refuses_a_matrix_that_is_not_one(tmp_path: Path, matrix: str) -> None:
    path = tmp_path / "matrix.json"
    path.write_text(matrix)
    result = run_assemble("ci", "buildkite", "--from-matrix", str(path))
    assert result.returncode == 2 and "not a `plan --matrix --json` document" in result.stderr


def test_github_sharded_workflow_runs_the_shards_before_each_final_build(tmp_path: Path) -> None:
    """`ci github --shards N` (#22): plan -> shard -> final -> merge, the plan is `plan --matrix
    --shards N --json`, and every field the jobs read is one `plan --matrix --shards` writes."""
    from assembler.builder.matrix import MatrixEntry, ShardEntry, sharded_document

    out = tmp_path / "release.yml"
    result = run_assemble("ci", "github", "--cuda", "13.2", "--shards", "4", "-o", str(out))
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    workflow = validate(text, "github-workflows.json")
    jobs = workflow["jobs"]
    assert list(jobs) == ["plan", "shard", "final", "merge"]
    assert jobs["shard"]["needs"] == "plan" and "shard" in jobs["final"]["needs"] and jobs["merge"]["needs"] == "final"
    # no shard job: the finals still run
    assert "shard_count > 0" in jobs["shard"]["if"] and "!failure()" in jobs["final"]["if"]
    commands = {job: [words for step in body["steps"] if "run" in step for words in assemble_commands(step["run"])]
                for job, body in jobs.items()}
    assert commands["plan"] == [["plan", "--matrix", "--shards", "4", "--cuda", "13.2", "--json"]]
    [shard] = commands["shard"]
    assert shard == ["build", "--cuda", "13.2", "--only", "vecadd", "--shard", "1/4", "--json"]
    [final] = commands["final"]
    assert "--shard" not in final and "--artifacts" in final
    assert [words[0] for words in commands["merge"]] == ["merge", "audit", "verify"]
    for words in (command for job in commands.values() for command in job):
        parses(words)
    # what the jobs read of the plan's document and of each matrix entry is there
    entries = [MatrixEntry("scalekit", "k" * 32, "helper", ("9.0a",), 1, 1, False, False),
               MatrixEntry("vecadd", "v" * 32, "helper", (), 2, 0, False, False)]
    split = [ShardEntry("scalekit", "k" * 32, index, 2, (f"u{index}.cu",), 10.0, "d") for index in (1, 2)]
    document = sharded_document(entries, split)
    for field in re.findall(r"fromJSON\(needs\.plan\.outputs\.plan\)\.(\w+)", text):
        assert field in document, field
    for job, matrix in (("shard", "shards"), ("final", "final")):
        for field in re.findall(r"matrix\.(\w+)", yaml.safe_dump(jobs[job]["steps"])):
            assert all(field in entry for entry in document[matrix]["include"]), (job, field)


def test_buildkite_sharded_pipeline_uploads_the_plans_shard_steps(tmp_path: Path) -> None:
    pipeline = run_assemble("ci", "buildkite", "--cuda", "13.2", "--shards", "3")
    assert pipeline.returncode == 0, pipeline.stderr
    bootstrap = validate(pipeline.stdout, "buildkite.json")
    command, install = assemble_commands(bootstrap["steps"][0]["command"])
    assert command == ["plan", "--matrix", "--shards", "3", "--cuda", "13.2", "--buildkite"]
    assert install == ["ci", "buildkite", "--assembler-requirement", ".", "--from-pipeline", "pipeline.json"]
    parses(command)
    parses(install)
    from assembler.builder.matrix import MatrixEntry, ShardEntry, buildkite_pipeline

    entries = [MatrixEntry("scalekit", "k" * 32, "helper", ("9.0a",), 1, 1, False, False)]
    split = [ShardEntry("scalekit", "k" * 32, index, 2, (f"u{index}.cu",), 10.0, "d") for index in (1, 2)]
    uploaded = buildkite_pipeline(entries, split, "13.2")  # what that plan step prints and uploads
    validate(json.dumps(uploaded), "buildkite.json")
    keys = [step["key"] for step in uploaded["steps"]]
    assert keys == ["scalekit-shard-1-of-2", "scalekit-shard-2-of-2", "scalekit-final", "merge"]
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"include": [{"dep": "vecadd"}]}))
    refused = run_assemble("ci", "buildkite", "--shards", "3", "--from-matrix", str(matrix))
    assert refused.returncode == 2 and "--shards" in refused.stderr
    assert run_assemble("ci", "github", "--shards", "0").returncode == 2


# --- where the jobs install assembler from (issue 30, M4: `pip install assembler` named nothing that exists) ---

def installs(text: str) -> set[str]:
    """What each `pip install` of a workflow or pipeline installs."""
    return {words[2] for words in (shlex.split(found) for found in re.findall(r"pip install [^&\"|]+", text))}


def pip_installs(requirement: str, cwd: Path) -> dict[str, Any]:
    """What pip would install for ``requirement`` run in ``cwd`` (a runner's checkout), from pip's own report."""
    report = Path(os.environ.get("TMPDIR", "/tmp")) / f"pip-report-{os.getpid()}.json"
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--quiet",
                             "--report", str(report), requirement],
                            cwd=cwd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    [installed] = json.loads(report.read_text())["install"]
    report.unlink()
    return installed  # type: ignore[no-any-return]


def test_every_job_installs_this_assembler_from_the_repository(tmp_path: Path) -> None:
    """In a clone of assembler the jobs install the clone itself (`.`); pip's report says that is
    assembler, from this checkout (`pip install assembler` asked PyPI for a project we never published)."""
    github = run_assemble("ci", "github", "-o", str(tmp_path / "release.yml"))
    assert github.returncode == 0, github.stderr
    sharded = run_assemble("ci", "github", "--shards", "2").stdout
    buildkite = run_assemble("ci", "buildkite").stdout
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"include": [{"dep": "vecadd"}]}))
    steps = run_assemble("ci", "buildkite", "--assembler-requirement", ".", "--from-matrix", str(matrix)).stdout
    workflow = validate((tmp_path / "release.yml").read_text(), "github-workflows.json")
    for job in workflow["jobs"].values():  # every job, in a Python pip may install into
        uses = [step.get("uses", "") for step in job["steps"]]
        assert uses[:2] == ["actions/checkout@v4", "actions/setup-python@v5"]
        assert job["steps"][2]["run"] == "pip install ."
    texts = [(tmp_path / "release.yml").read_text(), sharded, buildkite, steps]
    assert [installs(text) for text in texts] == [{"."}] * 4
    assert all(step["command"].startswith("python3 -m venv .venv-ci && . .venv-ci/bin/activate && pip install . && ")
               for step in yaml.safe_load(steps)["steps"] if isinstance(step, dict))
    installed = pip_installs(".", ROOT)
    assert installed["metadata"]["name"] == "assembler"
    assert installed["download_info"]["url"] == ROOT.as_uri(), installed["download_info"]


def test_the_sharded_buildkite_pipeline_installs_assembler_in_every_step(tmp_path: Path) -> None:
    from assembler.builder.matrix import MatrixEntry, ShardEntry, buildkite_pipeline

    entries = [MatrixEntry("scalekit", "k" * 32, "helper", ("9.0a",), 1, 1, False, False)]
    split = [ShardEntry("scalekit", "k" * 32, index, 2, (f"u{index}.cu",), 10.0, "d") for index in (1, 2)]
    planned = tmp_path / "pipeline.json"
    planned.write_text(json.dumps(buildkite_pipeline(entries, split, "13.2")))  # what the plan step writes
    result = run_assemble("ci", "buildkite", "--assembler-requirement", ".", "--from-pipeline", str(planned))
    assert result.returncode == 0, result.stderr
    uploaded = validate(result.stdout, "buildkite.json")
    commands = [step["command"] for step in uploaded["steps"]]
    setup = "python3 -m venv .venv-ci && . .venv-ci/bin/activate && pip install . && "
    assert len(commands) == 4 and all(command.startswith(setup) for command in commands)
    planned_keys = [step["key"] for step in json.loads(planned.read_text())["steps"]]
    assert [step["key"] for step in uploaded["steps"]] == planned_keys
    for command in commands:
        for words in assemble_commands(command):
            parses(words)
    planned.write_text('{"include": []}')
    refused = run_assemble("ci", "buildkite", "--from-pipeline", str(planned))
    assert refused.returncode == 2 and "not a `plan --matrix --shards N --buildkite` document" in refused.stderr


def _repository(root: Path, manifest: str = '[bundle]\nname = "k"\nversion = "1.0"\n') -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "deps.toml").write_text(manifest)
    return root


def test_an_assembler_outside_the_repository_is_refused_with_the_option_to_use(tmp_path: Path) -> None:
    """This assembler (a clone elsewhere) is nothing a runner of another repository can install: exit 2, no file."""
    repository = _repository(tmp_path / "kernels")
    out = repository / ".github" / "workflows" / "release.yml"
    result = run_assemble("-C", str(repository), "ci", "github", "-o", str(out))
    assert result.returncode == 2 and f"outside the repository {repository}" in result.stderr
    assert "--assembler-requirement" in result.stderr and not out.exists()


def test_assembler_requirement_names_a_path_in_the_repository_or_a_requirement_of_assembler(tmp_path: Path) -> None:
    repository = _repository(tmp_path / "kernels")
    vendored = repository / "tools" / "assembler"
    vendored.mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", vendored / "pyproject.toml")
    (repository / "tools" / "other").mkdir()

    def ci(requirement: str) -> subprocess.CompletedProcess[str]:
        return run_assemble("-C", str(repository), "ci", "github", "--assembler-requirement", requirement)

    assert installs(ci("tools/assembler").stdout) == {"./tools/assembler"}
    assert installs(ci("./tools/assembler[s3]").stdout) == {"./tools/assembler[s3]"}
    url = f"assembler @ git+https://git.example/org/assembler@{'a' * 40}"
    assert installs(ci(url).stdout) == {url}
    for refused, message in (("tools/other", "neither assembler's project directory nor a wheel"),
                             (str(ROOT), "outside the repository"),
                             ("numpy>=2", "names numpy, not assembler"),
                             ("assembler @ @", "is no URL it fetches"),
                             ("assembler @ ssh://git.example/assembler", "is no URL it fetches"),
                             (f"assembler @ {(tmp_path / 'elsewhere').as_uri()}", "outside the repository"),
                             ("assembler\nrm -rf /", "is not a requirement")):
        result = ci(refused)
        assert result.returncode == 2 and message in result.stderr, (refused, result.stderr)


def test_an_s3_artifact_store_installs_the_s3_extra(tmp_path: Path) -> None:
    repository = _repository(tmp_path / "kernels", '[bundle]\nname = "k"\nversion = "1.0"\n'
                                                   '[cache]\nartifacts = "s3://release-cache/assembler"\n')
    url = f"assembler @ git+https://git.example/org/assembler@{'a' * 40}"
    result = run_assemble("-C", str(repository), "ci", "github", "--assembler-requirement", url)
    assert result.returncode == 0, result.stderr
    [requirement] = installs(result.stdout)
    assert requirement == f"assembler[s3]@ git+https://git.example/org/assembler@{'a' * 40}" or \
        Requirement(requirement).extras == {"s3"}


def _distribution(tmp_path: Path, direct_url: dict[str, Any] | None) -> metadata.PathDistribution:
    """A real installed distribution's record (dist-info), as pip writes it."""
    info = tmp_path / "site" / "assembler-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: assembler\nVersion: 0.1.0\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return metadata.PathDistribution(info)


def test_the_default_is_where_pip_recorded_assembler_came_from(tmp_path: Path) -> None:
    """PEP 610 direct_url.json: a VCS install is its URL at its commit, an archive its URL and hash, a
    directory in the repository its path; none recorded means an index, so the same version from it."""
    from assembler.builder.workflows import assembler_requirement
    from assembler.errors import InputError

    repository = _repository(tmp_path / "kernels")
    sha = "b" * 40
    cases = [({"url": "https://git.example/org/assembler.git", "vcs_info": {"vcs": "git", "commit_id": sha}},
              f"assembler @ git+https://git.example/org/assembler.git@{sha}"),
             ({"url": "https://files.example/assembler-0.1.0-py3-none-any.whl",
               "archive_info": {"hashes": {"sha256": "c" * 64}}},
              f"assembler @ https://files.example/assembler-0.1.0-py3-none-any.whl#sha256={'c' * 64}"),
             ({"url": (repository / "tools" / "assembler").as_uri(), "dir_info": {"editable": True}},
              "./tools/assembler"),
             (None, "assembler==0.1.0")]
    for index, (record, expected) in enumerate(cases):
        install = assembler_requirement(None, repository, repository, _distribution(tmp_path / str(index), record))
        assert install.requirement == expected
        Requirement(expected) if not expected.startswith(".") else None  # what pip parses
    outside = _distribution(tmp_path / "out", {"url": (tmp_path / "elsewhere").as_uri(), "dir_info": {}})
    with pytest.raises(InputError, match="outside the repository"):
        assembler_requirement(None, repository, repository, outside)
    local_vcs = _distribution(tmp_path / "vcs", {"url": (tmp_path / "clone").as_uri(),
                                                 "vcs_info": {"vcs": "git", "commit_id": sha}})
    with pytest.raises(InputError, match="outside the repository"):  # a git+file:// URL is this machine's path
        assembler_requirement(None, repository, repository, local_vcs)


def test_docs_ci_installs_assembler_from_the_repository() -> None:
    """docs/ci.md's workflows ran `pip install assembler`; each install there now names this repository."""
    text = (ROOT / "docs" / "ci.md").read_text()
    blocks = "\n".join(re.findall(r"```ya?ml\n(.*?)```", text, re.S))
    requirements = installs(blocks)
    assert requirements == {".", ".[s3]"}, requirements  # `pip install .` is checked by the test above
    installed = pip_installs(".[s3]", ROOT)
    assert installed["metadata"]["name"] == "assembler" and installed["download_info"]["url"] == ROOT.as_uri()
