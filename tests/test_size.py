"""`assemble size` and the build's size budgets, on real nvcc output: the per-architecture split
of ``.nv_fatbin`` is checked against what was compiled (the cubins' own ELF headers), read in
place from wheels, and the per-dependency sums against the zip's own member sizes."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from assembler.audit.member import FileSource
from assembler.manifest import load_manifest
from assembler.wheel.merge import merge_wheel
from assembler.wheel.size import measure, object_fatbin, split_fatbin
from tests.build_support import HERMETIC_CUDA, assemble
from tests.conftest import run_assemble
from tests.test_wheel_merge import built, workspace  # noqa: F401  (fixtures)

KERNEL = r"""
__global__ void scale(float* x, float s, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= s; }
__global__ void shift(float* x, float s, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += s; }
extern "C" void launch(float* x, float s, int n) { scale<<<(n + 255) / 256, 256>>>(x, s, n); shift<<<1, 1>>>(x, s, n); }
"""
# cubins for sm_80 and sm_90a, PTX for compute_90: the split must find exactly these
GENCODE = ("-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90a,code=sm_90a",
           "-gencode", "arch=compute_90,code=compute_90")


@pytest.fixture(scope="module")
def cuda_object(tmp_path_factory: pytest.TempPathFactory, toolchains: Path) -> Path:
    """A shared object nvcc 13.2 (hermetic, from PyPI) built for two GPU architectures plus PTX."""
    from assembler.toolchain.cuda import select_cuda

    out = tmp_path_factory.mktemp("cuda-object")
    (out / "k.cu").write_text(KERNEL)
    nvcc = select_cuda(HERMETIC_CUDA).nvcc
    subprocess.run([str(nvcc), "-shared", "-Xcompiler", "-fPIC", *GENCODE, "-o", str(out / "_k_C.abi3.so"),
                    str(out / "k.cu")],
                   check=True, capture_output=True)
    return out / "_k_C.abi3.so"


def _fatbin_truth(path: Path) -> tuple[int, list[tuple[int, int, bytes]]]:
    """The section size (pyelftools) and, for every fatbin entry, (kind, payload size, payload)."""
    with path.open("rb") as handle:
        section = ELFFile(handle).get_section_by_name(".nv_fatbin")
        data = section.data()
    entries, pos = [], 0
    while pos < len(data):
        if data[pos:pos + 4] == b"\0\0\0\0":
            pos += 8 - pos % 8 if pos % 8 else 8
            continue
        _, _, header, payload = struct.unpack_from("<IHHQ", data, pos)
        entry, end = pos + header, pos + header + payload
        while entry < end:
            kind, _, entry_header, size = struct.unpack_from("<HHIQ", data, entry)
            entries.append((kind, size, data[entry + entry_header:entry + entry_header + size]))
            entry += entry_header + size
        pos = end
    return len(data), entries


def test_fatbin_split_is_the_architectures_compiled(cuda_object: Path) -> None:
    source = FileSource(str(cuda_object), cuda_object.name)
    try:
        fatbin = object_fatbin(source)
    finally:
        source.close()
    assert fatbin is not None
    split = {(a.arch, a.kind): a for a in fatbin.archs}
    assert set(split) == {("sm_80", "cubin"), ("sm_90a", "cubin"), ("compute_90", "ptx")}
    size, entries = _fatbin_truth(cuda_object)
    assert fatbin.size == size and fatbin.headers + sum(a.size for a in fatbin.archs) == size  # every byte, once
    cubins = [payload for kind, _, payload in entries if kind == 2]
    # each cubin says which SM it is for in its own ELF header (e_flags bits 8..15)
    sms = sorted(struct.unpack_from("<I", payload, 48)[0] >> 8 & 0xFF for payload in cubins)
    assert sms == sorted([80] * split["sm_80", "cubin"].entries + [90] * split["sm_90a", "cubin"].entries)
    by_sm: dict[int, int] = {}
    for payload in cubins:
        sm = struct.unpack_from("<I", payload, 48)[0] >> 8 & 0xFF
        by_sm[sm] = by_sm.get(sm, 0) + len(payload)
    assert split["sm_80", "cubin"].uncompressed == by_sm[80] and split["sm_90a", "cubin"].uncompressed == by_sm[90]
    ptx = [payload for kind, _, payload in entries if kind == 1]
    assert split["compute_90", "ptx"].entries == len(ptx) >= 1


def test_a_corrupt_fatbin_is_a_clear_error() -> None:
    from assembler.errors import InputError

    blob = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 4096) + bytes(32)
    with pytest.raises(InputError, match=r"corrupt \.nv_fatbin"):
        split_fatbin(lambda offset, length: blob[offset:offset + length], 0, len(blob), "x.so")


def test_a_hostile_section_table_is_refused_not_inflated(tmp_path: Path) -> None:
    """A deflated member whose .shstrtab claims 40 MiB (of zeros: 40 KB of deflate) is refused
    at the audit's table limit, in one line, before any of it is inflated."""
    claimed = 40 << 20
    header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), 3, 62, 1, 0, 0, 64, 0, 64, 0, 0, 64, 2,
                         1)
    names = struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, 192, claimed, 0, 0, 1, 0)
    wheel = tmp_path / "x-1.0-cp39-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x/_C.so", header + bytes(64) + names + bytes(claimed))
    result = run_assemble("size", str(wheel))
    assert result.returncode == 2, result.stderr
    assert "section name table of 41943040 bytes is over the 16777216-byte limit" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture
def cuda_ws(workspace: Path, cuda_object: Path) -> Path:  # noqa: F811
    """The merge tests' workspace with the CUDA object shipped by ops (deflated in the wheel)."""
    target = workspace / "artifacts" / "ops" / "files" / "ops" / "_k_C.abi3.so"
    shutil.copyfile(cuda_object, target)
    return workspace


def _merged(root: Path) -> Path:
    return merge_wheel(load_manifest(root / "deps.toml"), [root / "artifacts"], root / "dist").wheel


def test_wheel_sizes_per_dependency_add_up_to_the_members_and_the_file(cuda_ws: Path, cuda_object: Path) -> None:
    wheel = _merged(cuda_ws)
    report = measure(wheel)
    assert report.attribution == "assembler.json"
    groups = {g.name: g for g in report.deps}
    with zipfile.ZipFile(wheel) as archive:
        infos = {i.filename: i for i in archive.infolist()}
        recorded = json.loads(next(archive.read(n) for n in infos if n.endswith("assembler.json")))
    for dep, entry in recorded["deps"].items():
        assert groups[dep].compressed == sum(infos[p].compress_size for p in entry["files"])
        assert groups[dep].uncompressed == sum(infos[p].file_size for p in entry["files"])
        assert groups[dep].files == len(entry["files"])
    assert groups["(wheel metadata)"].compressed == sum(i.compress_size for n, i in infos.items() if ".dist-info/" in n)
    assert sum(g.compressed for g in report.deps) == wheel.stat().st_size  # zip headers included: every byte once
    # read in place from the deflated member = read from the file itself
    [obj] = [o for o in report.objects if o.fatbin is not None]
    assert obj.path == "merge_demo/ops/_k_C.abi3.so" and obj.dep == "ops"
    source = FileSource(str(cuda_object), "k")
    try:
        assert obj.fatbin == object_fatbin(source)
    finally:
        source.close()
    # an unpacked wheel gives the same per-dependency uncompressed sums
    unpacked = cuda_ws / "unpacked"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    tree = {g.name: g.uncompressed for g in measure(unpacked).deps}
    assert tree == {name: g.uncompressed for name, g in groups.items() if name != "(zip structure)"}


def test_cli_json_budget_and_attribution_by_install_glob(cuda_ws: Path) -> None:
    wheel = _merged(cuda_ws)
    shown = run_assemble("size", str(wheel), "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert {a["arch"] for a in data["archs"]} == {"sm_80", "sm_90a", "compute_90"} and data["over_budget"] == []
    over = run_assemble("size", str(wheel), "--budget", "1kB")
    assert over.returncode == 1 and "over the wheel budget of 1.0 kB" in over.stderr and "sm_90a" in over.stdout
    bad = run_assemble("size", str(wheel), "--budget", "lots")
    assert bad.returncode == 2 and "--budget" in bad.stderr and "Traceback" not in bad.stderr
    # a wheel without assembler.json: deps.toml's install globs say who shipped what
    stripped = cuda_ws / "stripped.whl"
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(stripped, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            if not info.filename.endswith("assembler.json"):
                target.writestr(info, source.read(info))
    globbed = run_assemble("-C", str(cuda_ws), "size", str(stripped), "--json")
    assert globbed.returncode == 0, globbed.stderr
    data = json.loads(globbed.stdout)
    assert data["attribution"] == "deps.toml install globs"
    assert ({g["name"]: g["files"] for g in data["deps"]}
            == {"ops": 4, "vecadd": 2, "(wheel metadata)": 4, "(zip structure)": 0})


def test_deps_toml_budgets_are_validated_and_enforced(cuda_ws: Path) -> None:
    wheel = _merged(cuda_ws)
    manifest = cuda_ws / "deps.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace('torch-target = "2.10"\n', 'torch-target = "2.10"\nmax-wheel-size = "10 MiB"\n', 1)
                        .replace('torch-target = "2.11"\n', 'torch-target = "2.11"\nmax-size = "2kB"\n'))
    result = run_assemble("-C", str(cuda_ws), "size", str(wheel), "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert (data["budget"] == 10 << 20
            and data["over_budget"] == [next(line for line in data["over_budget"] if line.startswith("ops ships"))])
    assert next(g for g in data["deps"] if g["name"] == "ops")["over"] is True
    manifest.write_text(text.replace('torch-target = "2.11"\n', 'torch-target = "2.11"\nmax-size = "a lot"\n'))
    invalid = run_assemble("-C", str(cuda_ws), "size", str(wheel))
    line = next(n for n, row in enumerate(manifest.read_text().splitlines(), 1) if row.startswith("max-size"))
    assert (invalid.returncode == 2 and f"deps.toml:{line}:1: deps.ops.max-size:" in invalid.stderr
            and "400MB" in invalid.stderr)


def test_build_of_the_example_splits_scalekit_by_arch_and_fails_over_budget(example_ws: Path,
                                                                            private_cache: Path) -> None:
    """The demo wheel for two architectures: the size split of scalekit's CUDA extension, the
    SBOM listing both dependencies, and the build failing (exit 1, breakdown) over a budget."""
    manifest = example_ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace('cuda-archs = ["9.0a"]           # defaults',
                                                     'cuda-archs = ["8.0", "9.0a"]    # defaults'))
    first = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, "--json", cache=private_cache)
    assert first.returncode == 0, first.stderr[-4000:]
    report = json.loads(first.stdout)
    wheel = Path(report["wheel"])
    [scalekit] = [o for o in report["size"]["objects"] if o["dep"] == "scalekit"]
    assert {(a["arch"], a["kind"]) for a in scalekit["fatbin"]["archs"]} >= {("sm_80", "cubin"), ("sm_90a", "cubin")}
    assert {g["name"] for g in report["size"]["deps"]} >= {"vecadd", "scalekit"}
    shown = assemble("sbom", str(wheel), "--json", cache=private_cache)
    assert shown.returncode == 0, shown.stderr
    sbom = {d["name"]: d for d in json.loads(shown.stdout)["deps"]}
    assert set(sbom) >= {"vecadd", "scalekit"} and len(sbom["scalekit"]["patches"]) == 3
    assert sbom["scalekit"]["archs"] == ["8.0", "9.0a"]

    manifest.write_text(manifest.read_text().replace('verify-torch = ["2.13.0", "2.14.1"]',
                                                     'verify-torch = ["2.13.0", "2.14.1"]\nmax-wheel-size = "10kB"'))
    gated = assemble("-C", str(example_ws), "build", "--cuda", HERMETIC_CUDA, cache=private_cache)
    assert gated.returncode == 1, gated.stderr[-4000:]
    error = " ".join(gated.stderr.split())
    assert "over the wheel budget of 10.0 kB" in error and "scalekit" in error and "sm_80" in error
    assert "CUDA code by architecture: " in gated.stdout  # the breakdown is in the build report
    assert not list((example_ws / "dist").glob("*.whl"))  # like the audit gate: no wheel left to upload
