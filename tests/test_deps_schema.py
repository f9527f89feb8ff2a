"""deps.toml's JSON Schema (issue 30, item 3): shipped in the package, made from the manifest's own
vocabulary, it accepts the real manifests and refuses what the loader refuses (unknown keys at
every level, wrong types and values); `init` and `add` name it on the first line, `#:schema`."""

from __future__ import annotations

import copy
import json
import shutil
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import jsonschema
import pytest
import tomlkit

from assembler.errors import ManifestError
from assembler.manifest.load import load_manifest
from assembler.manifest.model import MANIFEST_TABLE
from assembler.manifest.schema import directive, manifest_schema, render, schema_path
from tests.conftest import ROOT, GitWorkspace, run_assemble
from tests.example import EXAMPLE

MANIFESTS = [ROOT / "deps.toml", EXAMPLE / "deps.toml", EXAMPLE / "migrate" / "deps.toml"]


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(schema_path().read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)  # taplo reads drafts 4 to 7
    return jsonschema.Draft7Validator(schema)


def test_the_shipped_schema_is_the_one_the_manifest_model_makes() -> None:
    assert schema_path().read_text(encoding="utf-8") == render(manifest_schema()), \
        "stale: run `python -m assembler.cli.reference` and commit the result"
    assert schema_path().parent.name == "schemas" and not schema_path().name.endswith(".schema.json")


def test_every_key_of_the_model_is_in_the_schema_with_its_description() -> None:
    """The schema is generated from the loader's own model (model.MANIFEST_TABLE): each table's
    keys are exactly the ones the loader accepts there, each described."""
    schema = manifest_schema()
    tables = [(MANIFEST_TABLE, schema)]
    while tables:
        table, node = tables.pop()
        assert set(node["properties"]) == table.names, table.title
        for key in table.keys:
            if key.table is not None:
                tables.append((key.table, schema["definitions"][key.table.ref]))
            else:
                assert key.description and node["properties"][key.name]["description"] == key.description


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_repositorys_manifests_validate(manifest: Path, validator: jsonschema.Draft7Validator) -> None:
    data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    assert list(validator.iter_errors(data)) == []


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the example workspace (manifest and series), which the loader accepts."""
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE / "patches", root / "patches")
    shutil.copy(EXAMPLE / "deps.toml", root / "deps.toml")
    return root


def _both(workspace: Path, validator: jsonschema.Draft7Validator, data: dict[str, Any]) -> tuple[bool, bool]:
    """(whether the schema accepts ``data``, whether the loader does), as deps.toml in ``workspace``."""
    (workspace / "deps.toml").write_text(tomlkit.dumps(data), encoding="utf-8")
    try:
        load_manifest(workspace / "deps.toml")
        loaded = True
    except ManifestError:
        loaded = False
    return validator.is_valid(data), loaded


def _set(data: dict[str, Any], keys: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(data)
    node: Any = changed
    for key in keys[:-1]:
        node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return changed


class _Deleted:
    """The key is removed (a required key missing); its repr is stable for the test ids of xdist's workers."""

    def __repr__(self) -> str:
        return "<deleted>"


_DELETE = _Deleted()
VECADD = ("deps", "vecadd")
EXT = ("deps", "vecadd", "build", "extensions", 0)
SCALE_EXT = ("deps", "scalekit", "build", "extensions", 0)
ROWSUM = ("deps", "rowsum", "build")
TABLES = [(), ("bundle",), ("cache",), VECADD, (*VECADD, "build"), EXT, (*VECADD, "verify")]


@pytest.mark.parametrize("table", TABLES, ids=lambda keys: ".".join(map(str, keys)) or "top")
def test_an_unknown_key_is_refused_at_every_level(table: tuple[str | int, ...], workspace: Path,
                                                   validator: jsonschema.Draft7Validator) -> None:
    data = tomllib.loads((workspace / "deps.toml").read_text(encoding="utf-8"))
    data.setdefault("cache", {})
    assert _both(workspace, validator, data) == (True, True)
    assert _both(workspace, validator, _set(data, (*table, "sourcez"), "x")) == (False, False)


REFUSED = [
    ((*VECADD, "commit"), "main"),
    ((*VECADD, "commit"), _DELETE),
    (("deps", "Vec Add"), {"upstream": "https://example.invalid/x.git", "commit": "a" * 40}),
    (("deps", "solo"), {"commit": "a" * 40}),
    (("bundle", "version"), "1.0+local"),
    (("bundle", "version"), _DELETE),
    (("bundle", "python-abi"), "2.7"),
    (("bundle", "torch"), "2.13"),
    (("bundle", "torch-target"), "2"),
    (("bundle", "cuda-archs"), ["90"]),
    (("bundle", "verify-torch"), "2.13.0"),
    (("bundle", "max-wheel-size"), "lots"),
    (("bundle", "cuda-components"), ["nvcc"]),
    (("cache", "compiler"), "ccache"),
    (("cache", "remote"), "memcached://host"),
    (("cache", "artifacts"), "/mnt/store"),
    ((*VECADD, "torch-target"), 2.1),
    ((*VECADD, "submodules"), "third_party/cutlass"),
    ((*VECADD, "verify", "requires-cuda"), "yes"),
    ((*VECADD, "build", "backend"), "make"),
    ((*VECADD, "build", "ptx"), True),  # the helper's ptx is per extension
    ((*VECADD, "build", "project-dir"), "."),  # a setuptools key in a helper recipe
    ((*VECADD, "build", "cuda-archs"), ["sm_90"]),
    ((*VECADD, "build", "python-packages"), ["../vecadd"]),
    ((*VECADD, "build", "cmake-dir"), "/abs"),
    ((*EXT, "name"), "vec-add"),
    ((*EXT, "sources"), []),
    ((*EXT, "language"), "rust"),
    ((*EXT, "defines"), ["A;B"]),
    ((*EXT, "cxx-std"), 14),
    ((*EXT, "cuda-flags"), ["--use_fast_math"]),  # a C++ extension
    ((*EXT, "ptx"), True),
    ((*EXT, "libraries"), ["-lcuda"]),
    ((*EXT, "cxx-flags"), ["O3"]),
    ((*SCALE_EXT, "cuda-std"), 23),
    ((*ROWSUM, "backend"), "cmake"),  # cmake needs cmake-dir
    ((*ROWSUM, "extensions"), [{"name": "_x", "sources": ["x.cpp"]}]),
    ((*ROWSUM, "build-env"), {"PATH": "/tmp"}),
    ((*ROWSUM, "build-env"), {"PYTHONPATH": "/tmp"}),
    ((*ROWSUM, "build-env"), {"lower": "1"}),
    ((*ROWSUM, "sources"), ["csrc/../x.cpp"]),
]


@pytest.mark.parametrize(("keys", "value"), REFUSED, ids=[f"{'.'.join(map(str, k))}={v!r}"[:60] for k, v in REFUSED])
def test_what_the_loader_refuses_the_schema_refuses(keys: tuple[str | int, ...], value: Any, workspace: Path,
                                                     validator: jsonschema.Draft7Validator) -> None:
    data = tomllib.loads((workspace / "deps.toml").read_text(encoding="utf-8"))
    assert _both(workspace, validator, _set(data, keys, value)) == (False, False)


ACCEPTED = [
    ((*EXT, "cxx-std"), "c++20"),
    ((*EXT, "cxx-std"), 20),
    ((*SCALE_EXT, "cuda-std"), "20"),
    ((*SCALE_EXT, "ptx"), True),
    ((*SCALE_EXT, "cuda-flags"), ["--expt-relaxed-constexpr", "-Xptxas=-v"]),
    ((*EXT, "cuda-flags"), []),
    (("bundle", "max-wheel-size"), 400_000_000),
    (("bundle", "max-wheel-size"), "321 MiB"),
    (("bundle", "cuda-components"), ["curand", "nvrtc"]),
    ((*VECADD, "max-size"), "20MB"),
    ((*VECADD, "source"), "https://example.invalid/stable-abi/vecadd-fork.git"),
    (("cache",), {"compiler": "none", "remote": "redis://10.0.0.5:6379/0", "artifacts": "s3://release-cache/assembler",
                  "s3-endpoint": "http://127.0.0.1:9000"}),
    ((*ROWSUM, "build-env"), {"ROWSUM_FAST": "1"}),
    ((*ROWSUM, "ptx"), True),
    ((*ROWSUM, "defines"), ["FAST=1", "NO_VALUE"]),
    ((*VECADD, "build"), {"cmake-dir": ".", "cmake-args": ["-DFOO=1"], "sources": ["csrc/*.cpp"]}),  # cmake-dir: cmake
]


@pytest.mark.parametrize(("keys", "value"), ACCEPTED, ids=[f"{'.'.join(map(str, k))}={v!r}"[:60] for k, v in ACCEPTED])
def test_what_the_loader_accepts_the_schema_accepts(keys: tuple[str | int, ...], value: Any, workspace: Path,
                                                     validator: jsonschema.Draft7Validator) -> None:
    data = tomllib.loads((workspace / "deps.toml").read_text(encoding="utf-8"))
    assert _both(workspace, validator, _set(data, keys, value)) == (True, True)


def _named_schema(manifest: Path) -> Path:
    first = manifest.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("#:schema ./") or first.startswith("#:schema ../"), first
    return (manifest.parent / unquote(first.removeprefix("#:schema "))).resolve()


def test_init_names_the_schema_on_the_first_line(tmp_path: Path, validator: jsonschema.Draft7Validator) -> None:
    workspace = tmp_path / "my kernels"
    workspace.mkdir()
    result = run_assemble("init", cwd=workspace)
    assert result.returncode == 0, result.stderr
    manifest = workspace / "deps.toml"
    assert _named_schema(manifest) == schema_path()
    assert validator.is_valid(tomllib.loads(manifest.read_text(encoding="utf-8")))


def test_add_names_the_schema_once_and_keeps_one_already_there(git_workspace: GitWorkspace) -> None:
    manifest = git_workspace.manifest
    assert "#:schema" not in manifest.read_text()
    upstream = str(git_workspace.upstream.path)
    assert git_workspace.assemble("add", "other", upstream, "--commit", git_workspace.base).returncode == 0
    assert _named_schema(manifest) == schema_path() and manifest.read_text().count("#:schema") == 1
    assert git_workspace.assemble("add", "third", upstream, "--commit", git_workspace.base).returncode == 0
    assert manifest.read_text().count("#:schema") == 1

    own = "#:schema https://example.invalid/deps-toml.json\n"
    manifest.write_text(own + manifest.read_text().split("\n", 1)[1])
    assert git_workspace.assemble("add", "fourth", upstream, "--commit", git_workspace.base).returncode == 0
    assert manifest.read_text().startswith(own) and manifest.read_text().count("#:schema") == 1


def test_the_directive_is_relative_to_the_manifest(tmp_path: Path) -> None:
    line = directive(tmp_path / "a" / "deps.toml")
    assert (tmp_path / "a" / unquote(line.removeprefix("#:schema "))).resolve() == schema_path()
