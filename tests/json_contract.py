"""The JSON contract of the CLI, checked wherever a test asks a command for JSON: one document on
stdout, valid against assembler/data/schemas/<command>.schema.json (conftest.run_assemble calls
``check_json_output`` on every ``--json`` / ``--format json`` run, so the build, verify and merge
tests check their documents too)."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMAS = Path(__file__).resolve().parent.parent / "assembler" / "data" / "schemas"


@functools.cache
def schema_for(command: str) -> dict[str, Any]:
    path = SCHEMAS / f"{command}.schema.json"
    assert path.is_file(), f"no JSON Schema for command {command!r} ({path})"
    schema: dict[str, Any] = json.loads(path.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def wants_json(args: list[str] | tuple[str, ...]) -> bool:
    words = list(args)
    words = words[: words.index("--")] if "--" in words else words
    return "--json" in words or "--format=json" in words or any(
        word == "--format" and following == "json" for word, following in itertools.pairwise(words))


def validate_document(stdout: str, returncode: int) -> dict[str, Any]:
    """The one JSON document on stdout, checked against its command's schema and the exit code."""
    assert stdout.strip(), "a --json run printed nothing on stdout"
    document: dict[str, Any] = json.loads(stdout)
    assert isinstance(document, dict), f"the JSON document is a {type(document).__name__}, not an object"
    command = document.get("command",
                           "plan" if set(document) in ({"include"}, {"shard_count", "shards", "final"}) else None)
    assert isinstance(command, str), f"no command in {sorted(document)}"
    jsonschema.validate(document, schema_for(command))
    if "ok" in document:
        assert document["ok"] is (returncode == 0), (document["ok"], returncode)
        if not document["ok"]:
            assert document["error"]["exit_code"] == returncode
    return document


def check_json_output(args: list[str] | tuple[str, ...], stdout: str, returncode: int) -> None:
    if wants_json(args) and "--help" not in args and "-h" not in args and "--version" not in args:
        validate_document(stdout, returncode)
