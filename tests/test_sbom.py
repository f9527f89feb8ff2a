"""The CycloneDX SBOM (PEP 770) in merged wheels: schema-valid, complete, reproducible, read back
and diffed by `assemble sbom`. Real gcc-built artifacts (the merge tests' fixtures), real patches."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from assembler.manifest import load_manifest
from assembler.wheel.merge import merge_wheel
from tests.conftest import run_assemble
from tests.test_wheel_merge import OPS_SHA, VECADD_SHA, built, workspace  # noqa: F401  (fixtures)

PATCH = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Sam Stable <sam@our-kernels.example>
Date: Mon, 5 May 2025 10:00:00 +0000
Subject: [PATCH] {subject}

Why it is carried.

{trailer}
---
 notes.txt | 1 +
 1 file changed, 1 insertion(+)

diff --git a/notes.txt b/notes.txt
new file mode 100644
index 0000000000000000000000000000000000000000..{blob}
--- /dev/null
+++ b/notes.txt
@@ -0,0 +1 @@
+{subject}
"""

PATCHES = {  # file -> (subject, DEP-3 trailer, the status it declares)
    "0001-Fix-the-stream.patch": ("Fix the stream", "Applied-Upstream: commit:" + "c" * 40, "upstream"),
    "0002-Port-to-the-stable-ABI.patch": ("Port to the stable ABI", "Forwarded: https://github.com/owner/vecadd/pull/7",
                                          "forwarded"),
    "0003-Bundle-only-tweak.patch": ("Bundle-only tweak", "Forwarded: not-needed", "not-needed"),
    "0004-Our-own-hack.patch": ("Our own hack", "Forwarded: no", "local"),
}
GITHUB_UPSTREAM = "https://github.com/Owner/VecAdd"
GITHUB_FORK = "https://github.com/our-org/vecadd.git"


def _write_patches(root: Path, patches: dict[str, tuple[str, str, str]]) -> None:
    directory = root / "patches" / "vecadd"
    directory.mkdir(parents=True, exist_ok=True)
    for name, (subject, trailer, _) in patches.items():
        (directory / name).write_text(PATCH.format(subject=subject, trailer=trailer, blob="1" * 40))
    (directory / "series").write_text("".join(f"{name}\n" for name in patches))


def _set_artifact(root: Path, dep: str, **fields: object) -> None:
    path = root / "artifacts" / dep / "artifact.json"
    record = json.loads(path.read_text())
    record.update(fields)
    path.write_text(json.dumps(record))


@pytest.fixture
def sbom_ws(workspace: Path) -> Path:  # noqa: F811
    """The merge tests' workspace with vecadd as a GitHub fork carrying a four-patch series."""
    manifest = workspace / "deps.toml"
    text = manifest.read_text().replace('upstream = "https://example.invalid/vecadd.git"',
                                        f'upstream = "{GITHUB_UPSTREAM}"\nsource = "{GITHUB_FORK}"\ntrack = "release"')
    manifest.write_text(text)
    _write_patches(workspace, PATCHES)
    _set_artifact(workspace, "vecadd", patches=list(PATCHES), source=GITHUB_FORK, head="d" * 40, series_head="d" * 40)
    return workspace


def _merge(root: Path, out: str = "dist") -> Path:
    return merge_wheel(load_manifest(root / "deps.toml"), [root / "artifacts"], root / out).wheel


def _sbom(wheel: Path) -> tuple[str, dict]:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if "/sboms/" in n]
        return name, json.loads(archive.read(name))


def test_sbom_is_valid_cyclonedx_listed_in_record_with_pins_patches_files_and_tools(sbom_ws: Path) -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    wheel = _merge(sbom_ws)
    name, data = _sbom(wheel)
    assert name == "merge_demo-1.2.0+cu132.dist-info/sboms/merge_demo.cdx.json"  # PEP 770's place
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(data))
    assert error is None, error
    assert data["specVersion"] == "1.6" and data["metadata"]["timestamp"] == "1980-01-01T00:00:00+00:00"
    assert data["metadata"]["component"]["purl"] == "pkg:pypi/merge-demo@1.2.0%2Bcu132"

    with zipfile.ZipFile(wheel) as archive:
        record = {row[0]: row for row in csv.reader(io.StringIO(archive.read(next(n for n in archive.namelist()
                                                                                  if n.endswith("RECORD"))).decode()))}
        raw = archive.read(name)
        assert (record[name][1] == "sha256="
                + base64.urlsafe_b64encode(hashlib.sha256(raw).digest()).rstrip(b"=").decode())
        contents = {n: archive.read(n) for n in archive.namelist()}

    deps = {c["name"]: c for c in data["components"]}
    assert set(deps) == {"vecadd", "ops"}
    vecadd = deps["vecadd"]
    assert vecadd["purl"] == f"pkg:github/our-org/vecadd@{VECADD_SHA}" and vecadd["version"] == VECADD_SHA
    assert {(r["url"], r["comment"]) for r in vecadd["externalReferences"]} == {
        (GITHUB_FORK, "built from (fork)"), (GITHUB_UPSTREAM, "upstream (tracks release)")}
    assert vecadd["pedigree"]["commits"] == [{"uid": VECADD_SHA, "url": GITHUB_FORK}]
    assert [p["type"] for p in vecadd["pedigree"]["patches"]] == ["backport", "unofficial", "unofficial", "unofficial"]
    props = {p["name"]: p["value"] for p in vecadd["properties"]}
    for number, (file, (subject, _trailer, status)) in enumerate(PATCHES.items(), 1):
        tag = f"assembler:patch:{number:04d}:"
        assert props[tag + "file"] == file and props[tag + "subject"] == subject and props[tag + "status"] == status
        assert props[tag + "sha256"] == hashlib.sha256((sbom_ws / "patches" / "vecadd" / file).read_bytes()).hexdigest()
    assert props["assembler:patch:0001:evidence"] == "Applied-Upstream: commit:" + "c" * 40
    assert props["assembler:patch:0002:evidence"] == "https://github.com/owner/vecadd/pull/7"
    assert "DEP-3" in props["assembler:patch-status-source"]  # the BOM says where the status came from
    # ops: a non-GitHub URL gets a generic purl with the clone URL as vcs_url
    assert deps["ops"]["purl"].startswith(f"pkg:generic/ops@{OPS_SHA}?vcs_url=git%2Bhttps://example.invalid/ops.git")
    # every shipped file of each dependency, with the sha256 of the bytes in the wheel
    for dep, prefix in (("vecadd", "merge_demo/vecadd/"), ("ops", "merge_demo/ops/")):
        files = {f["name"]: f["hashes"][0]["content"] for f in deps[dep]["components"]}
        assert set(files) == {n for n in contents if n.startswith(prefix)}
        assert all(hashlib.sha256(contents[n]).hexdigest() == digest for n, digest in files.items())
    tools = {(t["name"], t["version"]) for t in data["metadata"]["tools"]["components"]}
    assert {("nvcc", "13.2.51"), ("torch", "2.13.0"), ("cmake", "3.31.6"), ("scikit-build-core", "0.11.5")} <= tools
    assert {d["ref"]: d.get("dependsOn", []) for d in data["dependencies"]}["wheel"] == ["dep:ops", "dep:vecadd"]


def test_sbom_is_reproducible_and_its_serial_follows_the_content(sbom_ws: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    first, again = _merge(sbom_ws, "a"), _merge(sbom_ws, "b")
    assert first.read_bytes() == again.read_bytes()
    _, data = _sbom(first)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    _, later = _sbom(_merge(sbom_ws, "c"))
    assert later["metadata"]["timestamp"] == "2023-11-14T22:13:20+00:00"
    assert later["serialNumber"] != data["serialNumber"]  # another document, another serial
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    patch = sbom_ws / "patches" / "vecadd" / "0004-Our-own-hack.patch"
    patch.write_text(patch.read_text().replace("Why it is carried.", "Why it is carried, reworded."))
    _, edited = _sbom(_merge(sbom_ws, "d"))
    assert (edited["serialNumber"] != data["serialNumber"]
            and edited["metadata"]["timestamp"] == data["metadata"]["timestamp"])


def test_cli_reads_the_sbom_back_and_diffs_two_releases(sbom_ws: Path) -> None:
    old = _merge(sbom_ws, "old")
    shown = run_assemble("sbom", str(old), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    deps = {d["name"]: d for d in json.loads(shown.stdout)["deps"]}
    assert (deps["vecadd"]["commit"] == VECADD_SHA
            and [p["status"] for p in deps["vecadd"]["patches"]] == ["upstream", "forwarded", "not-needed", "local"])
    table = run_assemble("sbom", str(old))
    assert (table.returncode == 0 and "0002-Port-to-the-stable-ABI.patch" in table.stdout
            and "not-needed" in table.stdout)

    # the next release: vecadd re-pinned, 0001 dropped (upstream), 0004 forwarded, a new 0005
    new_sha = "e" * 40
    manifest = sbom_ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace(VECADD_SHA, new_sha))
    patches = {k: v for k, v in PATCHES.items() if not k.startswith("0001")}
    patches["0004-Our-own-hack.patch"] = ("Our own hack", "Forwarded: https://github.com/owner/vecadd/pull/9",
                                          "forwarded")
    patches["0005-New-fix.patch"] = ("New fix", "Forwarded: no", "local")
    for stale in (sbom_ws / "patches" / "vecadd").glob("*.patch"):
        stale.unlink()
    _write_patches(sbom_ws, patches)
    _set_artifact(sbom_ws, "vecadd", commit=new_sha, patches=list(patches))
    new = _merge(sbom_ws, "new")
    diffed = run_assemble("sbom", str(old), str(new), "--json")
    assert diffed.returncode == 0, diffed.stderr
    [change] = json.loads(diffed.stdout)["changes"]  # ops did not change
    assert change["dep"] == "vecadd" and change["commit"] == {"old": VECADD_SHA, "new": new_sha}
    assert {p["file"]: p["change"] for p in change["patches"]} == {
        "0001-Fix-the-stream.patch": "removed", "0004-Our-own-hack.patch": "changed", "0005-New-fix.patch": "added"}
    assert (next(p for p in change["patches"] if p["file"].startswith("0004"))["status"]
            == {"old": "local", "new": "forwarded"})
    text = run_assemble("sbom", str(old), str(new))
    assert "commit aaaaaaaaaaaa -> eeeeeeeeeeee" in text.stdout and "patch added: 0005-New-fix.patch" in text.stdout


def test_a_wheel_without_sbom_or_not_a_wheel_is_exit_2(tmp_path: Path) -> None:
    plain = tmp_path / "plain-1.0-py3-none-any.whl"
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("plain-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    result = run_assemble("sbom", str(plain))
    assert result.returncode == 2 and "no CycloneDX SBOM" in result.stderr and "Traceback" not in result.stderr
    missing = run_assemble("sbom", str(tmp_path / "nope.whl"))
    assert missing.returncode == 2 and "no such wheel" in missing.stderr
    huge = tmp_path / "huge-1.0-py3-none-any.whl"  # 100 MiB of spaces: 100 KB of deflate, refused before it is inflated
    with zipfile.ZipFile(huge, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("huge-1.0.dist-info/sboms/huge.cdx.json", b" " * (100 << 20))
    refused = run_assemble("sbom", str(huge))
    assert refused.returncode == 2 and "declares 104857600 bytes, over the 67108864-byte limit" in refused.stderr


def test_cyclonedx_is_imported_only_when_a_merge_writes_a_bom() -> None:
    probe = ("import sys, assembler.cli, assembler.wheel.merge, assembler.cli.sbom; "
             "print(any(m.startswith('cyclonedx') for m in sys.modules))")
    assert (subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
            == "False")
