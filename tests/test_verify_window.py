"""The torch window (`verify --torch window`, issue 28 item 1), computed against a real local
index: a find-links folder of real wheel files (each a tiny distribution named torch, so no
torch is ever downloaded), read by the real installer (uv, and pip as its fallback) with a real
pip configuration; the floor from real objects built by g++ and a real assembler.json."""

from __future__ import annotations

import json
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest

from assembler.errors import InputError, ToolchainError
from assembler.verify.progress import Heartbeat, shorten, wrapped
from assembler.verify.report import Cell, Check, Status, TorchInfo, VerifyReport
from assembler.verify.specs import recorded_profiles
from assembler.verify.window import Release, offered_releases, torch_window, wheel_floors
from tests.conftest import run_assemble

LINUX = "cp311-cp311-manylinux_2_28_x86_64"
OFFERED = ("2.9.1", "2.10.0", "2.10.2", "2.11.0", "2.11.1+cpu", "2.12.0", "2.13.0rc1")


def torch_wheel(folder: Path, version: str, tag: str = "py3-none-any") -> Path:
    """A real wheel file of a distribution called torch (metadata only): what an index offers."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"torch-{version}-{tag}.whl"
    info = f"torch-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("torch/__init__.py", f"__version__ = {version!r}\n")
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
        archive.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n")
        archive.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture(name="index")
def index_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A find-links folder that is the only index: the machine's pip and uv configuration is
    replaced by an empty one (XDG_CONFIG_DIRS, PIP_CONFIG_FILE, UV_NO_CONFIG)."""
    links = tmp_path / "links"
    for version in OFFERED:
        torch_wheel(links, version)
    torch_wheel(links, "2.14.0", "cp311-cp311-macosx_11_0_arm64")  # not installable here: never offered
    (tmp_path / "xdg").mkdir()
    (tmp_path / "pip.conf").write_text("[global]\n")
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("UV_NO_CONFIG", "1")
    monkeypatch.delenv("ASSEMBLE_INSTALLER", raising=False)
    return links


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_each_minor_at_its_latest_patch_from_the_floor_up(index: Path, installer: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """2.9 is under the floor; 2.10 and 2.11 at their latest patch (the +cpu build is 2.11's
    latest); the pre-release and the macOS-only wheel are not releases this machine can take."""
    monkeypatch.setenv("ASSEMBLE_INSTALLER", installer)
    assert (offered_releases("2.10")
            == [Release("2.10.2", "2.10.2"), Release("2.11.1", "2.11.1+cpu"), Release("2.12.0", "2.12.0")])
    if installer == "pip":
        return  # the same walk; pip starts in seconds per step
    assert [r.version for r in offered_releases("2.11.0")] == ["2.11.1", "2.12.0"]
    assert offered_releases("2.12.1") == []
    assert Release("2.11.1", "2.11.1+cpu").cuda == "cpu" and Release("2.15.0", "2.15.0+cu132").cuda == "13.2"
    assert Release("2.14.1", "2.14.1").cuda is None  # PyPI's default build: its CUDA is read once installed


def test_a_pip_constraint_caps_the_window(index: Path, tmp_path: Path) -> None:
    """The user's pip configuration is honoured: a constraint file in the global pip.conf (as on
    this machine, /etc/xdg/pip) caps the newest release the window reaches."""
    caps = tmp_path / "caps.txt"
    caps.write_text("torch<=2.11.0\n")
    (tmp_path / "xdg" / "pip").mkdir()
    (tmp_path / "xdg" / "pip" / "pip.conf").write_text(f"[global]\nconstraint = {caps}\n")
    assert [r.resolved for r in offered_releases("2.10")] == ["2.10.2", "2.11.0"]


def shim_object(tmp_path: Path, symbol: str) -> bytes:
    """A shared object built by g++ that imports the stable-ABI shim ``symbol``."""
    source = tmp_path / "ext.cpp"
    source.write_text(f'extern "C" int {symbol}(void*);\nextern "C" int use(void* p) {{ return {symbol}(p); }}\n')
    out = tmp_path / "ext.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(out), str(source)], check=True, capture_output=True)
    return out.read_bytes()


def floor_wheel(tmp_path: Path, torch_target: str | None, requires: str | None, obj: bytes | None) -> Path:
    """A wheel with an assembler.json naming ``torch_target`` for its one dependency."""
    path = tmp_path / "dist" / "kern-1.0-cp39-abi3-linux_x86_64.whl"
    path.parent.mkdir(exist_ok=True)
    info = "kern-1.0.dist-info"
    files = ["kern/__init__.py", *(["kern/_C.abi3.so"] if obj else [])]
    record = {"bundle": {"name": "kern"}, "deps": {"kern": {"files": files, "profile": "smoke",
                                                            "toolchain": {"torch_target": torch_target}}}}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("kern/__init__.py", "")
        if obj:
            archive.writestr("kern/_C.abi3.so", obj)
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: kern\nVersion: 1.0\n"
                         + (f"Requires-Dist: {requires}\n" if requires else ""))
        archive.writestr(f"{info}/WHEEL",
                         "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp39-abi3-linux_x86_64\n")
        archive.writestr(f"{info}/assembler.json", json.dumps(record))
        archive.writestr(f"{info}/RECORD", "")
    return path


def test_the_floor_is_the_highest_of_the_symbols_and_the_declared_floors(index: Path, tmp_path: Path) -> None:
    """An object importing a shim symbol added in 2.12.0 sets the floor over a declared 2.10;
    a declared torch-target of 2.11 over symbols of 2.10; the window starts there."""
    newer_symbol = shim_object(tmp_path, "aoti_torch_cpu_rand_like")  # added in torch 2.12.0 (shim table)
    wheel = floor_wheel(tmp_path, "2.10", "torch>=2.10", newer_symbol)
    floors = wheel_floors(wheel, None)
    assert ([(f.source, f.version) for f in floors]
            == [("symbols", "2.12.0"), ("requires-dist", "2.10"), ("torch-target", "2.10")])
    assert "aoti_torch_cpu_rand_like" in floors[0].detail and "kern/_C.abi3.so" in floors[0].detail
    window = torch_window(wheel, None)
    assert window.floor.source == "symbols" and window.versions == ["2.12.0"]

    declared = floor_wheel(tmp_path, "2.11", None, None)
    window = torch_window(declared, None)
    assert (window.floor.source, window.floor.version) == ("torch-target", "2.11")
    assert window.versions == ["2.11.1", "2.12.0"] and window.to_json()["releases"][0]["resolved"] == "2.11.1+cpu"


def test_an_empty_window_and_a_wheel_without_a_floor_are_clear_errors(index: Path, tmp_path: Path) -> None:
    above = floor_wheel(tmp_path, "2.15", None, None)
    with pytest.raises(ToolchainError) as empty:
        torch_window(above, None)
    assert ("floor is torch 2.15" in empty.value.message
            and "newest release the package index offers is 2.12.0" in empty.value.message)
    assert empty.value.message.endswith(".") and "constraint" in (empty.value.hint or "")
    with pytest.raises(InputError, match="no torch floor"):
        torch_window(floor_wheel(tmp_path, None, None, None), None)


def test_a_torch_the_index_does_not_offer_is_one_sentence_with_the_fix(index: Path, tmp_path: Path) -> None:
    """issue 30: `verify --torch 2.99.0` ended on a fragment ("...: no release of torch==2.99.0")."""
    wheel = floor_wheel(tmp_path, "2.10", None, None)
    result = run_assemble("verify", str(wheel), "--torch", "2.99.0", cwd=tmp_path,
                          env={"ASSEMBLE_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 7, result.stderr
    error = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    hint = next(line for line in result.stderr.splitlines() if line.startswith("hint:"))
    assert error.startswith("error: torch 2.99.0 cannot be installed: ") and error.endswith(
        "The newest release the package index offers here is 2.12.0."), error
    assert "--torch 2.12.0" in hint and "--torch window" in hint


def test_the_profile_each_dependency_was_built_on_is_read_defensively() -> None:
    record = {"deps": {"a": {"profile": "smoke"}, "b": {}, "c": {"profile": 3}, "d": {"profile": " "}, "e": []}}
    assert recorded_profiles(record) == {"a": "smoke", "b": None, "c": None, "d": None, "e": None}
    assert recorded_profiles(None) == {}


def report() -> VerifyReport:
    torch = [TorchInfo("2.13.0", "2.13.0+cpu", None, False, "/env/a"),
             TorchInfo("2.15.0", "2.15.0", "13.2", False, "/env/b")]
    ops = [Check("load", "k/_C.abi3.so", Status.PASS),
           Check("registered", "k/_C.abi3.so", Status.PASS, ops=("k::a", "k::b")),
           Check("op", "k::a", Status.PASS), Check("op", "k::b", Status.PASS)]
    cells = {
        ("kern", "2.13.0"): Cell("kern", "2.13.0", [*ops, Check("smoke", "", Status.PASS)]),
        ("kern", "2.15.0"): Cell("kern", "2.15.0", [*ops[:3], Check("op", "k::b", Status.FAIL, "schema | mismatch")]),
        ("gpu", "2.13.0"): Cell("gpu", "2.13.0",
                                [Check("cuda", "", Status.SKIPPED, "CUDA-only; torch 2.13.0+cpu is a CPU-only build")]),
        ("gpu", "2.15.0"): Cell("gpu", "2.15.0", ops[:2]),
    }
    window = {"floor": {"version": "2.10", "source": "torch-target", "detail": "torch-target 2.10 of kern"},
              "floors": [], "releases": [], "index": "uv, pip.conf"}
    return VerifyReport("dist/kern-1.0-cp39-abi3-linux_x86_64.whl", torch, ["kern", "gpu"], cells, 2.0, window=window,
                        profiles={"kern": "smoke", "gpu": None})


def test_the_markdown_matrix_counts_ops_names_cuda_and_profiles() -> None:
    text = report().markdown()
    lines = text.splitlines()
    assert lines[0] == "### kern-1.0-cp39-abi3-linux_x86_64.whl"
    assert "Torch window: from 2.10 (torch-target 2.10 of kern)" in text
    assert "Build profiles: kern: smoke; every other dependency is the full build." in text
    assert "| dependency | torch 2.13.0+cpu (CPU-only) | torch 2.15.0 (CUDA 13.2, no GPU) |" in lines
    assert "| kern (profile smoke) | PASS 2/2 ops, smoke | FAIL 1/2 ops [1] |" in lines
    assert "| gpu | SKIPPED [2] | PASS 2 ops registered |" in lines
    assert "1. kern on torch 2.15.0: FAIL: schema \\| mismatch" in lines  # a | in a reason does not split the row
    assert "2. gpu on torch 2.13.0+cpu: SKIPPED: CUDA-only; torch 2.13.0+cpu is a CPU-only build" in lines
    assert lines[-1] == "2 PASS, 1 FAIL, 1 SKIPPED."
    data = report().to_json()
    assert data["deps"] == [{"name": "kern", "profile": "smoke"}, {"name": "gpu", "profile": None}]
    assert [t["build"] for t in data["torch"]] == ["CPU-only", "CUDA 13.2, no GPU"]
    kern = data["results"][1]
    assert kern["text"] == "FAIL 1/2 ops" and kern["ops"] == {"passed": 1, "declared": 2, "registered": 2}
    no_gpu = Cell("kern", "2.15.0",
                  [*report().cells[("kern", "2.13.0")].checks[:4], Check("smoke", "", Status.SKIPPED, "needs a GPU")])
    assert no_gpu.short == "SKIPPED, 2/2 ops PASS"  # what did run on a CUDA torch without a GPU is said


def test_the_heartbeat_says_what_is_still_running_and_lines_fit_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Verify was silent for 45 s while a probe imported torch (issue 30): with nothing said for
    an interval, the heartbeat repeats what each part is doing; the installer's lines are cut."""
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: still 80 columns
    said: list[str] = []
    spoke = threading.Event()

    def say(line: str) -> None:
        said.append(line)
        spoke.set()

    beat = Heartbeat(say, interval=0.05)
    beat.doing("torch 2.14.1", "importing torch")
    beat.doing("torch 2.15.0", "loading " + "x/" * 60 + "_C.abi3.so")  # cut to fit, its time kept
    beat.doing("torch 2.13.0", "making its environment", quiet=True)  # uv draws its own progress: not written over
    with beat.running():
        assert spoke.wait(30)
    assert said[0].startswith("  torch 2.14.1: still importing torch (") and not any("2.13.0" in line for line in said)
    assert said[1].startswith("  torch 2.15.0: still loading x/x/") and said[1].endswith(" s)") and len(said[1]) <= 80
    beat.relay("  Downloaded nvidia-cublas-cu12 " + "x" * 150)
    assert len(said[-1]) == 80 and said[-1].endswith("...")
    beat.relay("the verify-torch2.13.0 environment changed since it was made (added " + "x" * 100 + ")")
    assert said[-1].endswith("x)")  # assembler's own line is never cut
    assert shorten("short") == "short"
    long = ("verifying on torch 2.10.0, 2.11.0, 2.12.1, 2.13.0, 2.14.1, 2.15.0: one probe per torch imports torch and "
            "more")
    lines = wrapped(long + " /a/very/long/path/" + "p" * 90, 80)
    assert all(len(line) <= 80 for line in lines[:-1]) and lines[-1].strip() == "/a/very/long/path/" + "p" * 90
    assert " ".join(line.strip() for line in lines).split() == (long + " /a/very/long/path/" + "p" * 90).split()
