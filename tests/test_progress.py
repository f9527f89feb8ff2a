"""Live progress a CI log can read: the build's output lines as steps (ninja's ``[k/N]``,
setuptools' compile commands) and the heartbeat of every other long step when piped. The
lines parsed are what CMake's ninja, torch.utils.cpp_extension's ninja and distutils print
(taken from real build logs of the example)."""

from __future__ import annotations

import re
import threading
import time

import pytest

from assembler.builder.progress import Step, compile_command, ninja_step
from assembler.builder.scheduler import LineEvents
from assembler.report import output

CMAKE_LINES = [
    "[1/5] Building CXX object CMakeFiles/assembler_soname_torch_cuda.dir/assembler_soname_torch_cuda.cpp.o",
    "[2/5] Building CUDA object CMakeFiles/_scalekit_C.dir/tmp/pl/ws/forks/scalekit/csrc/scale.cu.o",
    "[4/5] Linking CXX shared library assembler_soname/libtorch_cuda.so",
    "[5/5] Linking CXX shared module _scalekit_C.abi3.so",
]
# cpp_extension runs `ninja -v`: the status line is the command (it really says -c twice)
CPP_EXTENSION_LINE = ("[1/1] c++ -MMD -MF /w/.assemble/build/rowsum/temp/csrc/rowsum.o.d "
                      "-DTORCH_TARGET_VERSION=0x020A000000000000 "
                      "-I/w/venv/include -c -c /w/forks/rowsum/csrc/rowsum.cpp -o "
                      "/w/.assemble/build/rowsum/temp/csrc/rowsum.o -O3")
DISTUTILS_LINE = ("gcc -pthread -fPIC -I/w/venv/include -c csrc/rowsum.cpp -o "
                  "build/temp.linux-x86_64-cpython-311/csrc/rowsum.o -O3")


def test_ninja_status_lines_name_what_each_step_made() -> None:
    assert [ninja_step(line) for line in CMAKE_LINES] == [
        Step(1, 5, "assembler_soname_torch_cuda.cpp"), Step(2, 5, "scale.cu"),
        Step(4, 5, "link libtorch_cuda.so"), Step(5, 5, "link _scalekit_C.abi3.so"),
    ]
    assert ninja_step(CPP_EXTENSION_LINE) == Step(1, 1, "rowsum.cpp")
    assert ninja_step("-- Configuring done (0.3s)") is None
    assert ninja_step("[1/x] not a status") is None


def test_setuptools_compile_lines_are_counted_units() -> None:
    assert compile_command(DISTUTILS_LINE) == "rowsum.cpp"
    assert compile_command("/usr/local/cuda/bin/nvcc -I/x -c csrc/k.cu -o k.o") == "k.cu"
    assert compile_command("g++ -shared a.o -o _x.abi3.so") is None  # a link, not a unit
    assert compile_command("running build_ext") is None
    events: list[tuple[object, ...]] = []
    lines = LineEvents("rowsum", lambda *event: events.append(event))
    for line in ["running build_ext", DISTUTILS_LINE, DISTUTILS_LINE.replace("rowsum.cpp", "other.cpp"),
                 "[3/4] Linking CXX shared module x.abi3.so", "*** Installing project into wheel..."]:
        lines(line)
    assert events == [("rowsum", "compiling", 1, None, "rowsum.cpp"), ("rowsum", "compiling", 2, None, "other.cpp"),
                      ("rowsum", "compiling", 3, 4, "link x.abi3.so"), ("rowsum", "installing", None, None)]


@pytest.fixture(name="fast_heartbeat")
def fast_heartbeat_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output, "HEARTBEAT_S", 0.2)
    output.configure()


def _wait_for(pattern: str, capsys: pytest.CaptureFixture[str]) -> str:
    """stderr until ``pattern`` appears in it (the heartbeat's thread prints it)."""
    seen = ""
    for _ in range(200):
        seen += capsys.readouterr().err
        if re.search(pattern, seen, re.M):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"no {pattern!r} in {seen!r}")


def test_a_silent_step_gets_a_heartbeat_when_piped(fast_heartbeat: None, capsys: pytest.CaptureFixture[str]) -> None:
    """A fetch, an environment install, a check: the step in progress and its time, repeated
    while nothing else is printed; nothing once it ended."""
    with output.heartbeat():
        output.note("vecadd: mirror")
        seen = _wait_for(r"^vecadd: mirror: still running \(\d+ s\)$", capsys)
        assert seen.startswith("vecadd: mirror\n")
        with output.status("checking translation units") as spinner:
            assert spinner is None  # no spinner off a terminal
            _wait_for(r"^checking translation units: still running \(\d+ s\)$", capsys)
        _wait_for(r"^vecadd: mirror: still running", capsys)  # the outer step again
    # the command ended: its end joined the heartbeat's thread, so nothing is left that could beat
    assert not any(thread.name == "assemble-heartbeat" for thread in threading.enumerate())


def test_the_heartbeat_is_quiet_under_q(fast_heartbeat: None, capsys: pytest.CaptureFixture[str]) -> None:
    output.configure(verbosity=-1)
    try:
        with output.heartbeat():
            output.note("vecadd: mirror")
            with output.status("fetching"):
                time.sleep(0.6)
        assert capsys.readouterr().err == ""
    finally:
        output.configure()


def test_a_build_heartbeat_names_every_dependency_at_work(fast_heartbeat: None, capsys: pytest.CaptureFixture[str],
                                                         tmp_path: object) -> None:
    from pathlib import Path

    from assembler.cli.build import _Progress

    with output.heartbeat(), _Progress(logs=Path(str(tmp_path))) as progress:
        progress.note("CUDA 13.2 (nvcc 13.2.86)")
        _wait_for(r"^CUDA 13\.2 \(nvcc 13\.2\.86\): still running", capsys)  # before any build: the note
        progress.event("scalekit", "compiling", 1, 5, "a.cpp")
        progress.event("rowsum", "configuring", None, None)
        progress.event("vecadd", "cached", None, None)
        seen = _wait_for(r"^rowsum: configuring: still running", capsys)
        assert re.search(r"^scalekit: compiling \(1/5 done\): still running \(\d+\.\d s\)$", seen, re.M)
        assert "vecadd: cached: still" not in seen
