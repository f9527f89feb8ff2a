"""`assemble migrate` end to end on the example's own libraries, with real git, g++, nvcc and
torch. vecadd's upstream (unmigrated: ATen, TORCH_LIBRARY, at:: calls) becomes three generated
commits that `check` proves CLEAN (UNSTABLE -> CLEAN) and `review` passes hunk by hunk.
normkit (a pybind11 module, TensorOptions, a device guard, a stream behind a define): a dry run
writes nothing and leaves nothing the build compiles; the real run's three commits, each file
proven to compile, are CLEAN, and with the committed manual patch (examples/stable-abi/migrate/
manual/: what the build does not compile, the import, abi3) pass review, build, audit STABLE and
pass `verify` on torch 2.13.0 and 2.14.1, the operators' schemas made from the C++ signatures."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import tomlkit

from tests.build_support import EXAMPLE, HERMETIC_CUDA, assemble, example_copy
from tests.build_support import uncompiled_uses as _uncompiled

pytestmark = pytest.mark.integration

MANUAL = next((EXAMPLE / "migrate" / "manual").glob("0006-*.patch"))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def _commit_all(repo: Path, message: str) -> None:
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)


def _vecadd_only_unmigrated(ws: Path) -> None:
    """The example with vecadd alone and no series: upstream as it is."""
    manifest = tomlkit.parse((ws / "deps.toml").read_text())
    for name in ("scalekit", "rowsum"):
        del manifest["deps"][name]  # type: ignore[union-attr]
    (ws / "deps.toml").write_text(tomlkit.dumps(manifest))
    shutil.move(ws / "patches" / "vecadd", ws / "vecadd-manual")


def test_migrate_turns_vecadd_upstream_into_a_stable_series(tmp_path: Path, private_cache: Path) -> None:
    ws = example_copy(tmp_path / "ws")
    _vecadd_only_unmigrated(ws)
    result = assemble("-C", str(ws), "migrate", "vecadd", "--json", cache=private_cache)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert [step["step"] for step in report["steps"]] == ["registration", "headers-and-types", "call-forms"]
    assert report["steps"][0]["subject"] == ("Register operators with STABLE_TORCH_LIBRARY and TORCH_BOX "
                                             "(2 torch-library, 1 impl-box)")
    assert report["steps"][2]["made"] == {"data-ptr": 3, "view": 3, "contiguous": 2, "empty-like": 1}
    assert report["declined"] == [] and report["remaining"] == []
    assert report["check"] == {"before": {"verdict": "UNSTABLE", "clean": 0, "total": 1},
                               "after": {"verdict": "CLEAN", "clean": 1, "total": 1}, "went_clean": 1}
    fork = ws / "forks" / "vecadd"
    subjects = _git(fork, "log", "--format=%s", "-3").splitlines()
    assert subjects == [step["subject"] for step in reversed(report["steps"])]
    assert _git(fork, "status", "--porcelain") == ""
    # Only touched lines change: the registration commit changes exactly the three lines it rewrote.
    numstat = _git(fork, "show", "--numstat", "--format=", report["steps"][0]["commit"]).split()
    assert numstat[:2] == ["3", "3"]

    assert assemble("-C", str(ws), "export", "vecadd", cache=private_cache).returncode == 0
    reviewed = assemble("-C", str(ws), "review", "vecadd", "--json", cache=private_cache)
    assert reviewed.returncode == 0, reviewed.stdout
    verdicts = {h["verdict"] for p in json.loads(reviewed.stdout)["patches"] for h in p["hunks"]}
    assert verdicts == {"api-only"}



def test_migrate_dry_run_on_normkit_writes_nothing_and_reports_what_is_left(tmp_path: Path,
                                                                             private_cache: Path) -> None:
    """Everything the build compiles is mechanical now (the device guard through the helper
    header); with NORMKIT_WITH_CUDA set, the stream is too, and what is left is reported: the
    uses on lines this build does not compile (the CUDA branch, the legacy op), at their lines."""
    ws = example_copy(tmp_path / "ws") / "migrate"
    result = assemble("-C", str(ws), "migrate", "normkit", "--dry-run", "--json", cache=private_cache)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["dry_run"] and all(step["commit"] is None for step in report["steps"])
    assert _git(ws / "forks" / "normkit", "status", "--porcelain") == ""
    assert not (ws / "forks" / "normkit" / "csrc" / "assemble_stable_helpers.h").exists()
    assert [step["step"] for step in report["steps"]] == ["registration", "headers-and-types", "call-forms",
                                                          "limited-api", "package-imports"]
    assert report["declined"] == [] and _uncompiled(report) == [
        "csrc/normkit.cpp:15 include-aten-cuda", "csrc/normkit.cpp:47 cuda-stream",  # #ifdef NORMKIT_WITH_CUDA
        "csrc/normkit.cpp:137 tensor-type", "csrc/normkit.cpp:137 tensor-type",  # #ifndef NORMKIT_NO_LEGACY
        "csrc/normkit.cpp:138 aten-function", "csrc/normkit.cpp:138 tensor-options"]
    assert report["helpers"] == {"path": "csrc/assemble_stable_helpers.h", "existing": False,
                                 "pieces": ["device-guard"],
                                 "added": ["device-guard"]}
    assert report["steps"][1]["files"] == ["csrc/normkit.cpp", "csrc/normkit.h", "csrc/assemble_stable_helpers.h"]
    assert report["steps"][2]["made"]["device-guard"] == 1
    assert report["check"] == {"before": None, "after": None, "went_clean": None}

    manifest = ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace('defines = ["NORMKIT_NO_LEGACY"]',
                                                     'defines = ["NORMKIT_NO_LEGACY", "NORMKIT_WITH_CUDA"]'))
    cuda = assemble("-C", str(ws), "migrate", "normkit", "--dry-run", cache=private_cache)
    assert cuda.returncode == 0, cuda.stderr[-3000:]
    assert "+  cudaStream_t stream = assemble_stable::current_cuda_stream();" in cuda.stdout
    assert "+// assemble-helper: cuda-stream" in cuda.stdout and "+// assemble-helper: device-guard" in cuda.stdout
    # the CUDA context header gives its line, inside the #ifdef, to the CUDA runtime's (cudaStream_t); the stable
    # headers every build of the file needs go after its last unconditional include
    assert ("#include <cmath>\n+#include <Python.h>\n" in cuda.stdout
            and "#ifdef NORMKIT_WITH_CUDA\n-#include <ATen/cuda/CUDAContext.h>\n+#include <cuda_runtime.h>\n #endif"
            in cuda.stdout), cuda.stdout[:3000]
    left = json.loads(assemble("-C", str(ws), "migrate", "normkit", "--dry-run", "--json", cache=private_cache).stdout)
    assert left["helpers"]["pieces"] == ["cuda-stream", "device-guard"]
    assert _uncompiled(left) == ["csrc/normkit.cpp:137 tensor-type", "csrc/normkit.cpp:137 tensor-type",
                                 "csrc/normkit.cpp:138 aten-function", "csrc/normkit.cpp:138 tensor-options"]
    # a build of the legacy op too compiles uses migrate leaves: setup.py's abi3 request waits for them
    manifest.write_text(manifest.read_text().replace('defines = ["NORMKIT_NO_LEGACY", "NORMKIT_WITH_CUDA"]',
                                                     'defines = ["NORMKIT_WITH_CUDA"]'))
    legacy = json.loads(assemble("-C", str(ws), "migrate", "normkit", "--dry-run", "--json",
                                 cache=private_cache).stdout)
    assert "limited-api" not in [step["step"] for step in legacy["steps"]]
    waiting = [d for d in legacy["declined"] if d["rewrite"] == "limited-api"]
    assert len(waiting) == 1 and waiting[0]["at"] == "setup.py:1", legacy["declined"]
    assert "uses of LibTorch are left on lines the build compiles" in waiting[0]["reason"]


def test_migrate_normkit_then_the_manual_patch_builds_and_verifies(tmp_path: Path, private_cache: Path) -> None:
    ws = example_copy(tmp_path / "ws") / "migrate"
    _only(ws, "normkit")  # the other libraries of the migration example have tests of their own
    result = assemble("-C", str(ws), "migrate", "normkit", "--json", cache=private_cache)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert [step["step"] for step in report["steps"]] == ["registration", "headers-and-types", "call-forms",
                                                          "limited-api", "package-imports"]
    fork_files = {step["step"]: step["files"] for step in report["steps"]}
    assert fork_files["limited-api"] == ["setup.py"] and fork_files["package-imports"] == ["normkit/__init__.py"]
    assert report["schemas"] == [
        "rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> Tensor",
        "rms_norm_stats(Tensor x, float eps=1e-6) -> (Tensor, Tensor)",
        "group_sum(Tensor x, int groups) -> Tensor",  # const int& -> int, through a wrapper
        "scale_shift(Tensor x, Tensor affine_0, Tensor? affine_1) -> Tensor",  # the tuple, split
        "rms_norm_unit(Tensor x) -> Tensor",  # behind #ifndef NORMKIT_NO_LEGACY, carried over with its guard
    ]
    # every file proven to compile and committed: what the build compiles is CLEAN before the manual patch
    assert report["proof"]["proven_files"] == ["csrc/normkit.cpp", "csrc/normkit.h"]
    assert report["proof"]["not_committed"] == [] and len(_uncompiled(report)) == 6  # the manual patch's lines
    assert report["check"]["before"]["verdict"] == "UNSTABLE" and report["check"]["after"]["verdict"] == "CLEAN"
    fork = ws / "forks" / "normkit"
    guarded = "  const assemble_stable::TensorDeviceGuard device_guard(x);\n"
    assert guarded in (fork / "csrc" / "normkit.cpp").read_text()
    assert "#include <torch/extension.h>" not in (fork / "csrc" / "normkit.h").read_text()
    # upstream's setup.py compiles at the same torch floor as assemble's build, which then builds from it
    assert ('define_macros=[("NORMKIT_NO_LEGACY", None), ("TORCH_TARGET_VERSION", "0x020A000000000000")], '
            "py_limited_api=True)") in (fork / "setup.py").read_text()
    helpers = _git(fork, "log", "-1", "--format=%B", report["steps"][1]["commit"])
    assert ("Migration-Review: csrc/assemble_stable_helpers.h#1 the helper header, generated by assemble migrate"
            in helpers)
    source = (fork / "csrc" / "normkit.cpp").read_text()
    assert "PYBIND11_MODULE" not in source and "TORCH_BOX(&group_sum_boxed)" in source
    assert "#ifndef NORMKIT_NO_LEGACY\n  m.def(\"rms_norm_unit(Tensor x) -> Tensor\");\n#endif" in source
    assert "Migration-Review: csrc/normkit.cpp#1 the pybind11 module" in _git(fork, "log", "-1", "--format=%B",
                                                                              report["steps"][0]["commit"])

    assert assemble("-C", str(ws), "export", "normkit", cache=private_cache).returncode == 0
    shutil.copy(MANUAL, ws / "patches" / "normkit" / MANUAL.name)
    with (ws / "patches" / "normkit" / "series").open("a") as series:
        series.write(f"{MANUAL.name}\n")
    reviewed = assemble("-C", str(ws), "review", "normkit", "--json", cache=private_cache)
    assert reviewed.returncode == 0, reviewed.stdout[-3000:]
    # migrate's own trailers: the generated registration, the helper header, the argument order of new_empty and
    # new_zeros (the tensor moves first) and contiguous(*shift); the manual patch's one, the legacy entry point
    acknowledged = {(p["patch"][:4], h["id"]) for p in json.loads(reviewed.stdout)["patches"] for h in p["hunks"]
                    if h["acknowledged"]}
    assert acknowledged == {("0001", "csrc/normkit.cpp#1"), ("0002", "csrc/assemble_stable_helpers.h#1"),
                            ("0003", "csrc/normkit.cpp#2"), ("0003", "csrc/normkit.cpp#3"),
                            ("0003", "csrc/normkit.cpp#5"),
                            ("0006", "csrc/normkit.cpp#1")}
    checked = assemble("-C", str(ws), "check", "normkit", "--json", cache=private_cache)
    assert checked.returncode == 0 and {d["name"]: d
                                        for d in json.loads(checked.stdout)["deps"]}["normkit"]["verdict"] == "CLEAN"
    built = assemble("-C", str(ws), "build", "--cuda", HERMETIC_CUDA, "--verify", "--json", cache=private_cache)
    assert built.returncode == 0, built.stderr[-3000:]
    document = json.loads(built.stdout)
    assert [dep["verdict"] for dep in document["deps"]] == ["STABLE"]
    results = document["verify"]["results"]
    assert {r["status"] for r in results} == {"PASS"} and {r["torch"].split("+")[0] for r in results} == {"2.13.0",
                                                                                                          "2.14.1"}


def test_a_submodules_files_are_neither_uses_nor_rewritten(tmp_path: Path, private_cache: Path) -> None:
    """A vendored library (a git submodule, as CUTLASS is in FlashMLA and QuTLASS) is another
    project: its ``.contiguous()`` and ``at::Tensor`` are not normkit's uses, and migrate does
    not rewrite it (on the real trees it tried, and `git add` of the submodule's file failed)."""
    ws = example_copy(tmp_path / "ws") / "migrate"
    vendored = tmp_path / "vend"
    (vendored / "include").mkdir(parents=True)
    header = ("#pragma once\nstruct Layout { int contiguous() const { return 1; } };\n"
              "inline int stride(Layout l) { return l.contiguous(); }\n")
    (vendored / "include" / "vend.h").write_text(header)
    for args in (("init", "-q", "-b", "main"), ("add", "-A"),
                 ("-c", "user.name=v", "-c", "user.email=v@v", "commit", "-q", "-m", "vend")):
        _git(vendored, *args)
    assert assemble("-C", str(ws), "checkout", "normkit", cache=private_cache).returncode == 0
    fork = ws / "forks" / "normkit"
    _git(fork, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(vendored), "third_party/vend")
    source = fork / "csrc" / "normkit.cpp"
    source.write_text('#include "vend.h"\n' + source.read_text())
    _commit_all(fork, "Vendor a library")
    manifest = ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace('include-dirs = ["csrc"]',
                                                     'include-dirs = ["csrc", "third_party/vend/include"]'))

    assessed = assemble("-C", str(ws), "assess", "normkit", "--json", cache=private_cache)
    assert assessed.returncode == 0, assessed.stderr[-3000:]
    dep = json.loads(assessed.stdout)["deps"][0]
    files = {use["at"].rsplit(":", 1)[0] for family in dep["families"] for api in family["apis"] for use in api["uses"]}
    # shift->contiguous() counts
    assert files == {"csrc/normkit.h", "csrc/normkit.cpp"} and dep["summary"]["uses"] == 90
    migrated = assemble("-C", str(ws), "migrate", "normkit", "--no-check", "--json", cache=private_cache)
    assert migrated.returncode == 0, migrated.stdout[-3000:]
    assert all(not f.startswith("third_party/") for step in json.loads(migrated.stdout)["steps"] for f in step["files"])
    assert (fork / "third_party" / "vend" / "include" / "vend.h").read_text() == header
    assert _git(fork, "status", "--porcelain") == ""


def test_a_step_that_cannot_be_committed_leaves_the_files_as_they_were(tmp_path: Path, private_cache: Path) -> None:
    """Another git holding the index lock: migrate fails (exit 2, git's reason) and the checkout
    is as it was, not half rewritten."""
    ws = example_copy(tmp_path / "ws")
    _vecadd_only_unmigrated(ws)
    assert assemble("-C", str(ws), "checkout", "vecadd", cache=private_cache).returncode == 0
    fork = ws / "forks" / "vecadd"
    source = fork / "csrc" / "add_scaled.cpp"
    original = source.read_text()
    (fork / ".git" / "index.lock").write_text("")
    result = assemble("-C", str(ws), "migrate", "vecadd", "--no-check", cache=private_cache)
    assert result.returncode == 2 and "index.lock" in result.stderr, result.stderr[-2000:]
    (fork / ".git" / "index.lock").unlink()
    assert source.read_text() == original
    assert _git(fork, "status", "--porcelain") == ""


def test_the_dispatch_key_follows_the_build_unless_the_style_says(tmp_path: Path, private_cache: Path) -> None:
    """A pybind11 function takes tensors of any device; its operator registers for CUDA when the
    dependency builds a CUDA unit (FlashMLA's module is in a .cpp, its kernels in .cu files),
    else CPU, or for the key `--style` names."""
    ws = example_copy(tmp_path / "ws") / "migrate"
    style = tmp_path / "style.toml"
    style.write_text('dispatch-key = "CompositeExplicitAutograd"\n')
    result = assemble("-C", str(ws), "migrate", "normkit", "--dry-run", "--style", str(style), cache=private_cache)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "+STABLE_TORCH_LIBRARY_IMPL(normkit, CompositeExplicitAutograd, m) {" in result.stdout
    style.write_text('dispatch-key = "XLA"\n')
    refused = assemble("-C", str(ws), "migrate", "normkit", "--dry-run", "--style", str(style), cache=private_cache)
    assert refused.returncode == 2 and "dispatch-key = 'XLA' is not a style setting" in refused.stderr

    default = assemble("-C", str(ws), "migrate", "normkit", "--dry-run", cache=private_cache)
    assert "+STABLE_TORCH_LIBRARY_IMPL(normkit, CPU, m) {" in default.stdout, default.stderr[-3000:]

    fork = ws / "forks" / "normkit"
    (fork / "csrc" / "noop.cu").write_text("__global__ void noop() {}\n")
    _commit_all(fork, "A CUDA unit")
    manifest = ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace('sources = ["csrc/normkit.cpp"]',
                                                     'sources = ["csrc/normkit.cpp", "csrc/noop.cu"]'))
    result = assemble("-C", str(ws), "migrate", "normkit", "--dry-run", cache=private_cache)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "+STABLE_TORCH_LIBRARY_IMPL(normkit, CUDA, m) {" in result.stdout


def _only(ws: Path, name: str) -> None:
    """The workspace's deps.toml with dependency ``name`` alone (comments kept)."""
    import tomlkit

    manifest = ws / "deps.toml"
    document = tomlkit.parse(manifest.read_text())
    deps = document["deps"]
    for other in [key for key in deps if key != name]:  # type: ignore[union-attr]
        del deps[other]  # type: ignore[union-attr]
    manifest.write_text(tomlkit.dumps(document))
