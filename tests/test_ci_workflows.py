"""`assemble ci github|buildkite` (issue 22, item 24): the fan-out workflow files validate
against GitHub Actions' and Buildkite's own schemas (as vendored by check-jsonschema), and every
assemble command in them parses; the Buildkite steps are made from a `plan --matrix` document."""

from __future__ import annotations

import json
import re
import shlex
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from assembler.cli import COMMAND_MODULES, build_parser
from tests.conftest import run_assemble

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
    assert "shard_count > 0" in jobs["shard"]["if"] and "!failure()" in jobs["final"]["if"]  # no shard job: the finals still run
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
    [command] = assemble_commands(bootstrap["steps"][0]["command"])
    assert command == ["plan", "--matrix", "--shards", "3", "--cuda", "13.2", "--buildkite"]
    parses(command)
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
