"""Build profiles (#28 item 3): [deps.X.profiles.NAME] in deps.toml, `build --profile NAME`, its
own artifact key, and a wheel that says it is no release (assembler.json, METADATA, SBOM,
audit); `plan --matrix`/`ci` on a profile. Also #30 M2: a dependency without a recipe is an
error that names deps.toml, not a missing file while packing."""

from __future__ import annotations

import json
import re
import subprocess
import zipfile
from dataclasses import asdict
from pathlib import Path

import jsonschema
import pytest

from assembler.builder.artifact_keys import KEY_SCHEMA, KeyParts
from assembler.builder.workflows import Install, buildkite, github
from assembler.errors import ManifestError
from assembler.manifest import load_manifest
from assembler.manifest.schema import manifest_schema
from assembler.wheel.metadata import wheel_version
from tests.build_support import EXAMPLE, assemble, example_copy
from tests.conftest import ROOT, run_assemble

SMOKE = """
[deps.vecadd.profiles.smoke]
description = "one define more, for the profile test"
defines = ["VECADD_PROFILE_SMOKE=1"]
"""


def _manifest(tmp_path: Path, extra: str, base: Path = EXAMPLE / "deps.toml") -> Path:
    """The example's deps.toml with ``extra`` appended, next to a copy of its patches."""
    ws = tmp_path / "ws"
    if not ws.exists():
        import shutil

        shutil.copytree(EXAMPLE / "patches", ws / "patches")
    (ws / "deps.toml").write_text(base.read_text() + extra)
    return ws / "deps.toml"


def test_a_profile_reduces_the_recipe_and_only_its_dependency(tmp_path: Path) -> None:
    manifest = load_manifest(_manifest(tmp_path, SMOKE))
    vecadd = manifest.deps["vecadd"]
    assert [p.name for p in vecadd.profiles] == ["smoke"] and vecadd.profile is None
    smoke = manifest.with_profile("smoke")
    assert smoke.deps["vecadd"].profile == "smoke"
    assert smoke.deps["vecadd"].build.extensions[0].defines == ("VECADD_PROFILE_SMOKE=1",)
    assert smoke.deps["scalekit"] == manifest.deps["scalekit"]  # without that profile: the full build
    assert manifest.with_profile(None) is manifest


def test_a_profile_no_dependency_defines_is_an_error_naming_the_fix(tmp_path: Path) -> None:
    manifest = load_manifest(_manifest(tmp_path, SMOKE))
    with pytest.raises(ManifestError) as caught:
        manifest.with_profile("smok")
    assert "no dependency defines a build profile named 'smok'" in caught.value.message
    assert "did you mean 'smoke'" in (caught.value.hint or "")
    bare = load_manifest(_manifest(tmp_path, ""))
    with pytest.raises(ManifestError) as caught:
        bare.with_profile("smoke")
    assert "[deps.NAME.profiles.smoke]" in (caught.value.hint or "")


@pytest.mark.parametrize(("extra", "where", "says"), [
    ('[deps.vecadd.profiles.smoke]\ndefiens = ["A"]\n', "deps.vecadd.profiles.smoke.defiens", "did you mean 'defines'"),
    ('[deps.vecadd.profiles.smoke]\nsources = ["csrc/nope.cpp"]\n', "deps.vecadd.profiles.smoke.sources",
     "is not one of the recipe's sources"),
    ('[deps.vecadd.profiles.smoke]\nbuild-env = { A = "1" }\n', "deps.vecadd.profiles.smoke.build-env",
     "helper backend"),
    ('[deps.vecadd.profiles.smoke]\ndescription = "nothing"\n', "deps.vecadd.profiles.smoke", "changes nothing"),
    ('[deps.vecadd.profiles.Smoke]\ndefines = ["A"]\n', "deps.vecadd.profiles.Smoke", "not a profile name"),
    ('[deps.vecadd.profiles.smoke]\ncuda-archs = ["sm90"]\n', "deps.vecadd.profiles.smoke.cuda-archs",
     "not a CUDA architecture"),
])
def test_a_bad_profile_names_its_line(tmp_path: Path, extra: str, where: str, says: str) -> None:
    path = _manifest(tmp_path, "\n" + extra)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert re.match(rf"{re.escape(str(path))}:\d+:\d+: {re.escape(where)}: ",
                    caught.value.message), caught.value.message
    assert says in caught.value.message + (caught.value.hint or "")


def test_the_schema_knows_profiles() -> None:
    schema = manifest_schema()
    shipped = json.loads((ROOT / "assembler" / "data" / "schemas" / "deps-toml.json").read_text())
    assert shipped == schema, "regenerate the shipped schema (python -m assembler.cli.reference)"
    import tomllib

    root = tomllib.loads((ROOT / "deps.toml").read_text())
    jsonschema.validate(root, schema)
    assert ({"flash-attn-3", "flashmla"}
            <= {name for name, dep in root["deps"].items() if "smoke" in dep.get("profiles", {})})
    bad = {**root, "deps": {"x": {**root["deps"]["flashmla"], "profiles": {"smoke": {"defnes": ["A"]}}}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_the_root_manifest_smoke_profiles_load() -> None:
    manifest = load_manifest(ROOT / "deps.toml").with_profile("smoke")
    fa3, mla = manifest.deps["flash-attn-3"], manifest.deps["flashmla"]
    assert fa3.profile == mla.profile == "smoke"
    assert "FLASHATTENTION_DISABLE_HDIM256" in fa3.build.defines
    assert all("hdim128" in s or "instantiations" not in s for s in fa3.build.sources)
    assert mla.build.cuda_archs == ("9.0a",)
    assert not any("sm100" in s for ext in mla.build.extensions for s in ext.sources)
    assert all("FLASH_MLA_DISABLE_SM100" in ext.defines for ext in mla.build.extensions)
    assert manifest.deps["qutlass"].profile is None  # no smoke profile: built in full
    assert (ROOT / "deps.toml").read_text().startswith("#:schema ")


def test_a_profile_has_its_own_key_and_a_full_build_keeps_its_old_one() -> None:
    parts = KeyParts(dep="d", source="s", series="x", recipe="r", toolchain=(("c++", "g++ 13"),), torch="2.13.0",
                     torch_target="2.10", archs=(), flags=("Release",), python_abi="3.9")
    import hashlib

    legacy = {key: value for key, value in asdict(parts).items() if key != "profile"}
    before = hashlib.sha256(json.dumps({"schema": KEY_SCHEMA, **legacy}, sort_keys=True).encode()).hexdigest()[:32]
    assert parts.digest() == before
    assert KeyParts(**{**asdict(parts), "profile": "smoke"}).digest() != before


def test_the_version_label_marks_a_profile() -> None:
    bundle = load_manifest(EXAMPLE / "deps.toml").bundle
    assert wheel_version(bundle, "13.2", profiles=["smoke", "smoke"]).endswith("+cu132.smoke")
    assert wheel_version(bundle, "13.2", ["vecadd"], ["smoke"]).endswith("+cu132.smoke.partial.vecadd")
    assert wheel_version(bundle, "13.2").endswith("+cu132")


def test_a_pull_request_workflow_on_a_profile_and_a_release_on_the_full_build() -> None:
    import yaml

    install = Install(".", "this repository")
    release, pr = yaml.safe_load(github("13.2", install)), yaml.safe_load(github("13.2", install, "smoke"))
    assert "push" in release["on"] and "pull_request" not in release["on"]
    assert "pull_request" in pr["on"] and pr["name"] == "pr-smoke"
    text = github("13.2", install, "smoke")
    assert "plan --matrix --cuda 13.2 --profile smoke" in text and "build --cuda 13.2 --profile smoke --only" in text
    assert "--profile" not in github("13.2", install)
    assert "plan --matrix --cuda 13.2 --profile smoke" in buildkite("13.2", install, profile="smoke")


def test_ci_json_and_the_same_cuda_default_as_plan(tmp_path: Path) -> None:
    result = run_assemble("ci", "github", "--profile", "smoke", "--assembler-requirement",
                          "assembler @ git+https://example.invalid/assembler@" + "a" * 40, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["command"] == "ci" and document["ok"] and document["profile"] == "smoke"
    assert document["cuda"] == "13.2" and "pull_request" in document["workflow"]
    plan_help = run_assemble("plan", "--help", cwd=tmp_path).stdout
    assert "default 13.2" in " ".join(plan_help.split())


def _add_recipeless(ws: Path, cache: Path) -> None:
    head = subprocess.run(["git", "-C", str(ws / "upstreams" / "vecadd.git"), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    added = assemble("-C", str(ws), "add", "normkit", "https://example.invalid/stable-abi/vecadd.git", "--commit", head,
                     "--checkout", cache=cache)
    assert added.returncode == 0, added.stderr


def test_a_dependency_without_a_recipe_is_refused_where_the_build_is_planned(tmp_path: Path) -> None:
    ws, cache = example_copy(tmp_path / "ws"), tmp_path / "cache"
    _add_recipeless(ws, cache)
    for words in (["build", "--cuda", "13.2", "--only", "normkit"], ["build", "--plan", "--only", "normkit"]):
        result = assemble("-C", str(ws), *words, "--json", cache=cache)
        assert result.returncode == 2, result.stderr
        error = (json.loads(result.stdout)["error"] if words[1] == "--cuda"
                 else json.loads(result.stdout)["deps"][0]["error"])
        assert (error["message"]
                == f"{ws / 'deps.toml'}: [deps.normkit] has no build recipe, so there is nothing to build")
        assert "[deps.normkit.build]" in error["hint"] and "docs/reference/recipes.md" in error["hint"]
        assert "No such file" not in result.stderr
    assert not (cache / "artifacts" / "normkit").exists()  # refused before anything was built or packed


@pytest.mark.integration
def test_a_real_build_on_a_profile(example_ws: Path, private_cache: Path) -> None:
    """vecadd built in full, then on a profile with one define more: another key, the define in
    the compile, and a wheel whose assembler.json, METADATA, SBOM and audit say smoke."""
    with (example_ws / "deps.toml").open("a") as manifest:
        manifest.write(SMOKE)
    full = assemble("-C", str(example_ws), "build", "--cuda", "13.2", "--only", "vecadd", "--json", cache=private_cache)
    assert full.returncode == 0, full.stderr
    smoke = assemble("-C", str(example_ws), "build", "--cuda", "13.2", "--only", "vecadd", "--partial",
                     "--profile", "smoke", "--json", cache=private_cache)
    assert smoke.returncode == 0, smoke.stderr
    full_dep, smoke_doc = json.loads(full.stdout)["deps"][0], json.loads(smoke.stdout)
    smoke_dep = smoke_doc["deps"][0]
    assert full_dep["key"] != smoke_dep["key"] and full_dep.get("profile") is None and smoke_dep["profile"] == "smoke"
    assert smoke_doc["profile"] == "smoke" and re.search(r"^jobs: \d+ \(", smoke.stderr, re.M)
    from assembler.builder.evidence import workspace_records

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ASSEMBLE_CACHE", str(private_cache))
        compdb = json.loads((workspace_records(example_ws) / "compdb" / "vecadd.json").read_text())
    assert any("-DVECADD_PROFILE_SMOKE=1" in entry.get("command", " ".join(entry.get("arguments", [])))
               for entry in compdb)
    wheel = Path(smoke_doc["wheel"])
    assert "+cu132.smoke.partial.vecadd" in wheel.name.replace("%2B", "+")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        record = json.loads(archive.read(next(n for n in names if n.endswith(".dist-info/assembler.json"))))
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        sbom = json.loads(archive.read(next(n for n in names if n.endswith(".cdx.json"))))
    assert record["deps"]["vecadd"]["profile"] == "smoke"
    assert re.search(r"^Version: \S+\+cu132\.smoke\.partial\.vecadd$", metadata, re.M) and "not a release" in metadata
    component = next(c for c in sbom["components"] if c["bom-ref"] == "dep:vecadd")
    assert {"name": "assembler:profile", "value": "smoke"} in component["properties"]
    audited = assemble("audit", str(wheel), cache=private_cache)
    assert "build profile: vecadd smoke" in audited.stdout
