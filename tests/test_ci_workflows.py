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
    text = text.replace("${{ matrix.dep }}", "vecadd")
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
