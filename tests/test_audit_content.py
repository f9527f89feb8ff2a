"""The audit on what a wheel really holds (issue 21, items 9, 10, 14, 15, 16): objects found by
content whatever their names, member names that escape, folded METADATA headers, a string
table larger than any limit used to allow, one unreadable object among good ones, trees
1,200 directories deep and wrong-typed assembler.json. Objects are compiled here with gcc/as/ld."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from assembler.audit.elf import read_dynamic
from assembler.audit.gate import Verdict, findings
from assembler.audit.limits import MAX_STRING_TABLE, STRING_TABLE_IN_MEMORY
from assembler.audit.member import FileSource
from assembler.audit.wheel_scan import audit_paths
from assembler.audit.wheelsource import declared_requirements
from assembler.builder.outcome import BuildOutcome
from assembler.builder.pipeline import BuildReport, DepReport, _audit_wheel, _gate
from tests.audit_fixtures.build import make_wheel
from tests.conftest import run_assemble
from tests.hostile_wheels import DT_STRSZ, Archive, dynamic_value_offsets, member, wheel_entries

# c10::detail::torchCheckFail(char const*, char const*, unsigned int, std::string const&): LibTorch C++
UNSTABLE_C = """
extern void _ZN3c106detail14torchCheckFailEPKcS2_jRKSs(void);
void *PyInit__U(void) { _ZN3c106detail14torchCheckFailEPKcS2_jRKSs(); return 0; }
"""
PLAIN_C = "int plain_answer(void) { return 42; }\n"


def _cc(out: Path, name: str, source: str, *flags: str) -> bytes:
    (out / f"{name}.c").write_text(source)
    subprocess.run(["gcc", "-O1", "-fPIC", "-shared", str(out / f"{name}.c"), "-o", str(out / f"{name}.so"), *flags],
                   check=True, capture_output=True)
    return (out / f"{name}.so").read_bytes()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("content")
    return {"unstable": _cc(out, "unstable", UNSTABLE_C), "plain": _cc(out, "plain", PLAIN_C)}


def _gate_of(wheel: Path, files: dict[str, tuple[str, ...]]) -> tuple[BuildReport, object]:
    audits = _audit_wheel(wheel, files)
    report = BuildReport(bundle="b", cuda="13.2", nvcc="13.2", cuda_origin="test", cuda_root=Path("/"), torch="2.13.0",
                         deps=[
        DepReport(dep, "c" * 40, "c" * 40, "k", 0, BuildOutcome.BUILT, 0.0, [], "2.10", None, None) for dep in files])
    return report, _gate(report, audits, ())


@pytest.mark.parametrize("name", ["pkg/_U.abi3.so.bak", "pkg/_V", "pkg/_W.pyd"])
def test_an_unstable_elf_is_audited_whatever_its_name(built: dict[str, bytes], tmp_path: Path, name: str) -> None:
    wheel = make_wheel(tmp_path / "pkg-1.0-cp39-abi3-linux_x86_64.whl",
                       {name: built["unstable"], "pkg/README.md": b"# pkg\n"})
    done = run_assemble("audit", "--check", "all", "--json", str(wheel))
    assert done.returncode == 1, done.stderr
    [entry] = json.loads(done.stdout)["extensions"]
    assert entry["path"] == name and entry["torch_abi"] == "UNSTABLE"
    assert f"{name} uses the unstable LibTorch C++ ABI" in done.stderr
    report, error = _gate_of(wheel, {"dep": (name,)})
    assert error is not None and str(report.deps[0].verdict) == "UNSTABLE"
    tree = tmp_path / "tree"  # an unpacked tree: the same, by content
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tree)
    assert run_assemble("audit", "--check", "all", str(tree)).returncode == 1


@pytest.mark.parametrize("name", ["../../../etc/cron.d/x.so", "/abs/x.so", "pkg\\..\\..\\x.so", "C:/x.so"])
def test_member_names_that_escape_fail_the_gate(built: dict[str, bytes], tmp_path: Path, name: str) -> None:
    wheel = Archive([member(name, built["plain"]),
                     *wheel_entries({})]).write(tmp_path / "pkg-1.0-cp39-abi3-linux_x86_64.whl")
    for check in ("all", "torch", "abi3"):
        done = run_assemble("audit", "--check", check, "--json", str(wheel))
        assert done.returncode == 1, (check, done.stderr)
        said = " ".join(done.stderr.split())  # FAIL lines wrap at the width
        assert f"member {name} (" in said and "installs outside the target directory" in said
    assert json.loads(done.stdout)["unsafe_names"][0].startswith(name)
    _, error = _gate_of(wheel, {"dep": (name,)})
    assert error is not None and "UNSAFE-PATH" in str(error)
    safe = Archive([member("pkg/x.so", built["plain"]),
                    *wheel_entries({})]).write(tmp_path / "safe-1.0-cp39-abi3-linux_x86_64.whl")
    assert run_assemble("audit", "--check", "all", str(safe)).returncode == 0


FOLDED = """\
Metadata-Version: 2.1
Name: torch-thing
Version: 1.0
License: BSD 3-Clause License
<SPACES>
        Copyright (c) 2024, the authors
<SPACES>
        Redistribution and use in source and binary forms ...
Requires-Python: >=3.10
Requires-Dist: numpy
Requires-Dist: torch>=2.9
Requires-Dist: pytest; extra == "test"
Description-Content-Type: text/markdown

# torch-thing
Requires-Dist: torch>=1.0
""".replace("<SPACES>", " " * 8)  # lines of spaces only, as real METADATA folds them


def test_metadata_is_parsed_as_an_email_message_with_folded_headers() -> None:
    """Real METADATA folds License: over lines of spaces; the headers go on after them."""
    assert declared_requirements(FOLDED) == ("torch>=2.9", ">=3.10")
    # not the body's
    assert declared_requirements(FOLDED.replace("Requires-Dist: torch>=2.9\n", "")) == (None, ">=3.10")


def test_a_floor_behind_a_folded_license_is_checked(tmp_path: Path) -> None:
    source = tmp_path / "new.c"  # torch_exception_get_what: torch 2.13; linked to a stand-in libtorch_cpu
    source.write_text("void torch_exception_get_what(void);\nvoid *PyInit__C(void) { torch_exception_get_what(); "
                      "return 0; }\n")
    (tmp_path / "stub.c").write_text("void stub(void) {}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libtorch_cpu.so", str(tmp_path / "stub.c"), "-o",
                    str(tmp_path / "libtorch_cpu.so")], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(tmp_path / "new.so"), f"-L{tmp_path}",
                    "-Wl,--no-as-needed", "-ltorch_cpu"], check=True)
    wheel = tmp_path / "thing-1.0-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("thing/_C.abi3.so", (tmp_path / "new.so").read_bytes())
        archive.writestr("thing-1.0.dist-info/METADATA", FOLDED)
        archive.writestr("thing-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: cp310-abi3-linux_x86_64\n")
    done = run_assemble("audit", "--check", "torch", "--json", str(wheel))
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["requires_torch"] == "torch>=2.9" and data["requires_python"] == ">=3.10"
    assert ("FLOOR-TOO-LOW" not in done.stdout
            and "declares Requires-Dist: torch>=2.9 but thing/_C.abi3.so needs torch 2.13.0" in done.stderr)


def _big_dynstr_object(out: Path, symbols: int, name_length: int) -> Path:
    """A real shared object (as + ld) exporting ``symbols`` functions with long names, like
    intel-extension-for-pytorch's 40.9 MB .dynstr; it also calls one shim symbol."""
    lines = [".text"]
    for i in range(symbols):
        name = f"ipex_like_{i:06d}_" + "x" * name_length
        lines += [f".globl {name}", f".type {name}, @function", f"{name}:", "ret"]
    lines += [".globl PyInit__big", "PyInit__big:", "jmp aoti_torch_get_device_type@PLT"]
    (out / "big.s").write_text("\n".join(lines) + "\n")
    subprocess.run(["as", "-o", str(out / "big.o"), str(out / "big.s")], check=True)
    subprocess.run(["ld", "-shared", "-o", str(out / "big.so"), str(out / "big.o")], check=True)
    return out / "big.so"


def test_a_string_table_over_the_old_limit_is_streamed_and_read_exactly(tmp_path: Path,
                                                                        built: dict[str, bytes]) -> None:
    big = _big_dynstr_object(tmp_path, 17_000, 1_000)
    with big.open("rb") as handle:
        elf = ELFFile(handle)
        dynstr = elf.get_section_by_name(".dynstr")["sh_size"]
        reference = [(s.name, s["st_shndx"] != "SHN_UNDEF")
                     for i, s in enumerate(elf.get_section_by_name(".dynsym").iter_symbols()) if i]
    assert STRING_TABLE_IN_MEMORY < dynstr < 32 << 20  # over the in-memory size, over no limit
    source = FileSource(str(big), big.name)
    try:
        info = read_dynamic(source)
    finally:
        source.close()
    assert [(s.name, s.defined) for s in info.symbols] == reference  # every name, exactly, as pyelftools reads it
    wheel = make_wheel(tmp_path / "big-1.0-cp39-abi3-linux_x86_64.whl",
                       {"big/_big.abi3.so": big, "big/_plain.abi3.so": built["plain"]})
    done = run_assemble("audit", "--json", str(wheel))
    assert done.returncode == 0, done.stderr
    objects = {e["path"]: e for e in json.loads(done.stdout)["extensions"]}
    assert objects["big/_big.abi3.so"]["torch_abi"] == "STABLE" and objects["big/_big.abi3.so"]["stable_shim"] == 1


def test_a_limit_hit_by_one_object_never_hides_the_others(tmp_path: Path, built: dict[str, bytes]) -> None:
    hostile = bytearray(built["plain"])
    import struct

    struct.pack_into("<Q", hostile, dynamic_value_offsets(bytes(hostile))[DT_STRSZ], MAX_STRING_TABLE + 1)
    wheel = make_wheel(tmp_path / "mix-1.0-cp39-abi3-linux_x86_64.whl",
                       {"mix/a_unstable.abi3.so": built["unstable"], "mix/b_hostile.abi3.so": bytes(hostile),
                        "mix/c_plain.abi3.so": built["plain"]})
    done = run_assemble("audit", "--json", str(wheel))
    assert done.returncode == 2
    assert (done.stderr.splitlines()[0].startswith("error: ") and "mix/b_hostile.abi3.so" in done.stderr
            and "DT_STRSZ" in done.stderr)
    objects = {e["path"]: e for e in json.loads(done.stdout)["extensions"]}
    assert objects["mix/a_unstable.abi3.so"]["torch_abi"] == "UNSTABLE"  # still reported
    assert objects["mix/c_plain.abi3.so"]["torch_abi"] == "NO-TORCH"
    assert (objects["mix/b_hostile.abi3.so"]["torch_abi"] == "INCOMPLETE"
            and "limit" in objects["mix/b_hostile.abi3.so"]["error"])
    [report] = audit_paths([wheel], keep_going=True)
    assert {f.verdict for f in findings(report, "torch")} == {Verdict.UNSTABLE, Verdict.INCOMPLETE}


def test_a_tree_1200_directories_deep_is_walked_by_audit_and_size(tmp_path: Path, built: dict[str, bytes]) -> None:
    deep = tmp_path / "tree"
    deep.mkdir()
    leaf = deep
    for _ in range(1200):  # one level at a time (pathlib's mkdir(parents=True) recurses too)
        leaf = leaf / "d"
        leaf.mkdir()
    (leaf / "_C.abi3.so").write_bytes(built["unstable"])
    try:
        audited = run_assemble("audit", "--json", str(deep))
        assert audited.returncode == 0, audited.stderr[-2000:]
        assert json.loads(audited.stdout)["extensions"][0]["path"].endswith("d/d/_C.abi3.so")
        sized = run_assemble("size", "--json", str(deep))
        assert sized.returncode == 0, sized.stderr[-2000:]
        assert len(json.loads(sized.stdout)["objects"]) == 1
    finally:  # bottom up: shutil.rmtree (pytest's cleanup) recurses too, and would fail on it
        (leaf / "_C.abi3.so").unlink()
        while leaf != deep:
            leaf.rmdir()
            leaf = leaf.parent


@pytest.mark.parametrize(("record", "size_reads_it"), [
    ({"bundle": {"name": "b"}, "deps": []}, True),
    ({"bundle": {"name": "b"}, "deps": {"d": "files"}}, True),
    ({"bundle": {"name": "b"}, "deps": {"d": {"files": 7}}}, True),
    ({"bundle": {"name": "b"}, "deps": {"d": {"files": ["x"], "verify": "ops"}}}, False),  # size does not read verify
    ({"bundle": {"name": 3}, "deps": {}}, False),
])
def test_a_wrong_typed_assembler_json_is_exit_2_in_size_and_verify(tmp_path: Path, built: dict[str, bytes],
                                                                   record: dict, size_reads_it: bool) -> None:
    wheel = make_wheel(tmp_path / "b-1.0-cp39-abi3-linux_x86_64.whl", {
        "b/_C.abi3.so": built["plain"], "b-1.0.dist-info/assembler.json": json.dumps(record).encode()})
    for command in ("size", "verify") if size_reads_it else ("verify",):
        done = run_assemble(command, "--json", str(wheel), cwd=tmp_path)
        assert done.returncode == 2, (command, done.stderr)
        assert "Traceback" not in done.stderr and "assembler.json" in done.stderr, (command, done.stderr)
        message = json.loads(done.stdout)["error"]["message"]
        assert "deps" in message or "bundle" in message, message
    if not size_reads_it:
        assert run_assemble("size", str(wheel), cwd=tmp_path).returncode == 0


def test_every_inflater_gives_the_same_audit_and_size(built: dict[str, bytes], tmp_path: Path) -> None:
    """zlib-ng (the default when installed), ISA-L and the zlib fallback: identical outputs."""
    from assembler.audit.inflate import CHOICES, _module

    wheel = make_wheel(tmp_path / "inf-1.0-cp39-abi3-linux_x86_64.whl",
                       {"inf/_U.abi3.so": built["unstable"], "inf/_p.abi3.so": built["plain"],
                        "inf/blob.bin": bytes(3 << 20)})
    seen: dict[str, tuple[object, object]] = {}
    for name in (n for n in CHOICES if _module(n) is not None):
        audited = run_assemble("audit", "--json", str(wheel), env={"ASSEMBLE_INFLATER": name}, subprocess=True)
        sized = run_assemble("size", "--json", str(wheel), env={"ASSEMBLE_INFLATER": name}, subprocess=True)
        size = json.loads(sized.stdout)
        size.pop("seconds")
        seen[name] = (json.loads(audited.stdout)["extensions"], size)
    assert "zlib" in seen and len({json.dumps(v, sort_keys=True) for v in seen.values()}) == 1, list(seen)
