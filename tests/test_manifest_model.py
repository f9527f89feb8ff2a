"""deps.toml's model (model.py's Keys and Tables) is what the loader's one converter reads: every
key of every table is typed, refused when unknown (with the closest name) and named at its own
line, with no per-key code in load.py (issue 31 item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from assembler.errors import ManifestError
from assembler.manifest.load import load_manifest
from assembler.manifest.model import (
    BOOL,
    BUILD_TABLE,
    BUNDLE_TABLE,
    CACHE_TABLE,
    DEPENDENCY_TABLE,
    EXTENSION_TABLE,
    MANIFEST_TABLE,
    PROFILE_TABLE,
    SIZE,
    STRING,
    STRINGS,
    VERIFY_TABLE,
    BuildRecipe,
    Bundle,
    CacheConfig,
    Dependency,
    Extension,
    Key,
    Profile,
    Table,
    VerifySpec,
)

# Each table of the model, its header in TEMPLATE (None: the top of the file), and its record.
TABLES: list[tuple[Table, str | None, type]] = [
    (MANIFEST_TABLE, None, object),
    (BUNDLE_TABLE, "[bundle]", Bundle),
    (CACHE_TABLE, "[cache]", CacheConfig),
    (DEPENDENCY_TABLE, "[deps.k]", Dependency),
    (BUILD_TABLE, "[deps.k.build]", BuildRecipe),
    (EXTENSION_TABLE, "[[deps.k.build.extensions]]", Extension),
    (VERIFY_TABLE, "[deps.k.verify]", VerifySpec),
    (PROFILE_TABLE, "[deps.k.profiles.smoke]", Profile),
]
TEMPLATE = f"""[bundle]
name = "b"
version = "1.0"

[cache]

[deps.k]
upstream = "https://git.invalid/k"
commit = "{"a" * 40}"

[deps.k.build]

[[deps.k.build.extensions]]
name = "_k"
sources = ["a.cpp"]

[deps.k.verify]

[deps.k.profiles.smoke]
defines = ["SMOKE"]
"""
WRONG = {STRING: "7", STRINGS: '"x"', BOOL: '"yes"', SIZE: '"a lot"'}  # a value of the wrong type, per kind


def _path(header: str | None) -> str:
    """The dotted path errors name for the table at ``header``."""
    return "" if header is None else header.strip("[]")


def _write(tmp_path: Path, header: str | None, line: str) -> tuple[Path, int]:
    """TEMPLATE with ``line`` first in the table at ``header``; (the file, that line's number)."""
    lines = TEMPLATE.splitlines()
    at = 0 if header is None else lines.index(header) + 1
    lines.insert(at, line)
    path = tmp_path / "deps.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, at + 1


def _refused(path: Path) -> ManifestError:
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    return caught.value


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))


def test_the_template_loads(tmp_path: Path) -> None:
    path = tmp_path / "deps.toml"
    path.write_text(TEMPLATE, encoding="utf-8")
    manifest = load_manifest(path)
    assert manifest.deps["k"].build.extensions[0].name == "_k" and manifest.deps["k"].profiles[0].name == "smoke"


@pytest.mark.parametrize(("table", "header", "record"), TABLES, ids=[t[0].title for t in TABLES])
def test_each_key_of_a_table_is_a_field_of_its_record(table: Table, header: str | None, record: type) -> None:
    fields = set(getattr(record, "_fields", ())) | {"patches"}  # deps.X.patches becomes patches_dir (a Path)
    if record is not object:
        assert {key.field for key in table.keys} <= fields, table.title
    assert all(key.description or key.table is not None for key in table.keys), table.title


@pytest.mark.parametrize(("table", "header", "record"), TABLES, ids=[t[0].title for t in TABLES])
def test_an_unknown_key_in_any_table_is_refused_with_the_closest_name(tmp_path: Path, table: Table, header: str | None,
                                                                      record: type) -> None:
    key = table.keys[0]
    path, line = _write(tmp_path, header, f"{key.name}s = 1")
    error = _refused(path)
    dotted = ".".join(part for part in (_path(header), f"{key.name}s") if part)
    assert error.message == f"{path}:{line}:1: {dotted}: unknown key", error.message
    assert error.hint == f"did you mean '{key.name}'?"


KEYS = [(table, header, key) for table, header, _ in TABLES for key in table.keys if key.kind in WRONG]


@pytest.mark.parametrize(("table", "header", "key"), KEYS, ids=[f"{t.title}.{k.name}" for t, _, k in KEYS])
def test_a_value_of_the_wrong_type_is_refused_at_its_line(tmp_path: Path, table: Table, header: str, key: Key) -> None:
    lines = TEMPLATE.splitlines()
    start = lines.index(header) + 1
    for number in range(start, len(lines)):  # the template's own line for the key goes: the test writes it
        if lines[number].startswith(f"{key.name} ="):
            del lines[number]
            break
        if lines[number].startswith("["):
            break
    lines.insert(start, f"{key.name} = {WRONG[key.kind]}")
    path = tmp_path / "deps.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    error = _refused(path)
    dotted = f"{_path(header)}.{key.name}"
    assert error.message.startswith(f"{path}:{start + 1}:1: {dotted}: "), error.message
    assert error.hint and "Traceback" not in error.message


def test_a_required_key_missing_is_named_at_its_table(tmp_path: Path) -> None:
    path = tmp_path / "deps.toml"
    path.write_text(TEMPLATE.replace('name = "_k"\n', ""), encoding="utf-8")
    error = _refused(path)
    line = TEMPLATE.splitlines().index("[[deps.k.build.extensions]]") + 1
    assert error.message == f"{path}:{line}:1: deps.k.build.extensions.name: missing required key"
    assert error.hint == 'add name = "..."'


def test_a_choice_close_to_a_known_one_is_suggested(tmp_path: Path) -> None:
    path, line = _write(tmp_path, "[[deps.k.build.extensions]]", 'language = "cude"')
    error = _refused(path)
    assert error.message == f"{path}:{line}:1: deps.k.build.extensions.language: 'cude' is not a known language"
    assert error.hint == "did you mean 'cuda'? write language = \"cxx\" or \"cuda\""


def test_the_schema_has_no_key_the_model_lacks() -> None:
    """Every table's keys are the model's (the schema and the loader cannot differ by a key)."""
    from assembler.manifest.schema import manifest_schema

    schema = manifest_schema()
    for table, _, _ in TABLES:
        node = schema if not table.ref else schema["definitions"][table.ref]
        assert list(node["properties"]) == [key.name for key in table.keys]
        assert node["additionalProperties"] is False
        assert node.get("required", []) == [key.name for key in table.keys if key.required]


def test_every_backend_names_the_recipe_keys_it_reads() -> None:
    """A backend added to BackendName names its keys in BACKEND_KEYS, keys of [deps.X.build]."""
    from assembler.manifest.model import BACKEND_KEYS, BackendName

    assert set(BACKEND_KEYS) == set(BackendName)
    assert all(keys <= BUILD_TABLE.names and "backend" in keys for keys in BACKEND_KEYS.values())


def test_a_key_the_backend_does_not_read_names_the_backend_it_defaulted_to(tmp_path: Path) -> None:
    """cmake-dir makes the backend cmake: a helper key there is named as cmake's mistake."""
    path = tmp_path / "deps.toml"
    path.write_text(TEMPLATE.replace("[deps.k.build]\n", '[deps.k.build]\ncmake-dir = "."\n'), encoding="utf-8")
    error = _refused(path)
    line = TEMPLATE.splitlines().index("[[deps.k.build.extensions]]") + 2
    assert error.message == (f"{path}:{line}:1: deps.k.build.extensions: not used by the 'cmake' backend "
                             "(only by helper)"), error.message
    assert error.hint == "remove extensions, or set backend = 'helper'"


@pytest.mark.parametrize(("header", "key", "bad"), [
    ("[deps.k.build]", "cuda-archs", '"sm90"'), ("[[deps.k.build.extensions]]", "sources", '"../out.cpp"'),
    ("[[deps.k.build.extensions]]", "cxx-flags", '"-o/tmp/x"'), ("[[deps.k.build.extensions]]", "defines", '"A;B"'),
    ("[deps.k.profiles.smoke]", "sources", '"b.cpp"')])
def test_an_item_of_an_array_over_several_lines_is_named_at_its_own_line(tmp_path: Path, header: str, key: str,
                                                                         bad: str) -> None:
    """The generic rules (cuda-archs, defines) and the hand-written ones (paths, flags, a
    profile's sources) alike: the position is the item's, not its key's."""
    good = {"cuda-archs": '"9.0a"', "sources": '"a.cpp"', "cxx-flags": '"-O3"', "defines": '"A=1"'}[key]
    block = f"{key} = [\n  {good},\n  {good},\n  {bad},\n]"
    path, line = _write(tmp_path, header, block)
    if header == "[[deps.k.build.extensions]]" and key == "sources":
        path.write_text(path.read_text().replace('sources = ["a.cpp"]\n', ""), encoding="utf-8")
    text = path.read_text()
    if key == "defines" or header.startswith("[deps.k.profiles"):  # one defines key per table
        path.write_text(text.replace('defines = ["SMOKE"]\n', 'description = "d"\n'), encoding="utf-8")
    error = _refused(path)
    dotted = header.strip("[]")
    assert error.message.startswith(f"{path}:{line + 3}:3: {dotted}.{key}: {bad.replace(chr(34), chr(39))}"), \
        error.message
