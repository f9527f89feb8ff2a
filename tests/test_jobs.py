"""--jobs auto (#28 item 4): the fewer of the CPUs and what the available memory holds of one
compile job, measured in the dependency's last build (wait4 of the backend's commands; VmHWM of
the compiler cache's compilers), else 5 GiB per nvcc job and 1.5 GiB per g++ job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from assembler.builder import memory
from assembler.builder.builder import _run_logged
from assembler.builder.memory import GIB, ServerSampler, choose_jobs, record_peaks, recorded_peaks

# Allocates and touches ``MB`` megabytes, then says so on stdout.
HOG = "import sys; b = bytearray({mb} << 20); b[::4096] = b'x' * len(b[::4096]); print('held', flush=True)"


def test_auto_takes_the_fewer_of_cpus_and_memory_over_the_hungriest_job() -> None:
    both = [("vecadd", False), ("fa3", True)]
    # 16 CPUs, 20 GiB available: nvcc's default 5 GiB -> 18 GiB usable / 5 = 3 jobs
    choice = choose_jobs(0, both, {}, cpus=16, memory_available=20 * GIB)
    assert (choice.jobs, choice.limited_by, choice.requested) == (3, "memory", "auto")
    assert choice.per_job["fa3"].source == "default nvcc" and choice.per_job["vecadd"].bytes == 3 * GIB // 2
    assert "fa3: default nvcc" in choice.reason and "limited by memory" in choice.reason
    # measured: 1 GiB at most per job last time -> 18 jobs fit, the 16 CPUs decide
    measured = choose_jobs(0, both, {"fa3": GIB, "vecadd": GIB // 2}, cpus=16, memory_available=20 * GIB)
    assert (measured.jobs, measured.limited_by, measured.per_job["fa3"].source) == (16, "cpus", "measured")
    # a job larger than all the memory still runs, alone
    assert choose_jobs(0, both, {}, cpus=4, memory_available=GIB).jobs == 1
    # a number given is taken as it is, and said so
    given = choose_jobs(7, both, {}, cpus=2, memory_available=GIB)
    assert (given.jobs, given.reason) == (7, "--jobs 7")
    assert set(given.to_json()) >= {"jobs", "requested", "cpus", "memory_available", "limited_by", "reason", "per_job"}


def test_peaks_are_kept_in_the_users_cache_per_dependency(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    ws = tmp_path / "ws"
    ws.mkdir()
    assert recorded_peaks(ws) == {}
    record_peaks(ws, {"fa3": 6 * GIB})
    record_peaks(ws, {"vecadd": 200 << 20})  # another build: fa3's figure stays
    assert recorded_peaks(ws) == {"fa3": 6 * GIB, "vecadd": 200 << 20}
    assert not (ws / ".assemble").exists()  # never the workspace: a committed file could claim less
    other = tmp_path / "other"
    other.mkdir()
    assert recorded_peaks(other) == {}


def test_a_commands_peak_is_its_largest_process_grandchildren_included(tmp_path: Path) -> None:
    """The backend runs cmake -> ninja -> compiler: wait4's ru_maxrss of the command it started is
    the largest process below it, here a grandchild holding 300 MB behind a small shell."""
    peaks: list[int] = []
    log = tmp_path / ".assemble" / "logs" / "dep.log"
    log.parent.mkdir(parents=True)
    command = ["sh", "-c", f'"{sys.executable}" -c "{HOG.format(mb=300)}"; exit 3']
    status = _run_logged(command, tmp_path, {"PATH": "/usr/bin:/bin"}, log, lambda _: None, peaks)
    assert status == 3  # the exit status still comes through
    assert len(peaks) == 1 and peaks[0] >= 300 << 20
    assert "held" in log.read_text()


def test_the_compiler_caches_compilers_are_sampled(tmp_path: Path) -> None:
    """sccache's server runs the compilers as its own children, out of wait4's reach: their
    high-water marks are read below the server's pid."""
    server = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys; subprocess.run([sys.executable, '-c', sys.argv[1]])",
                               HOG.format(mb=250) + "; sys.stdin.read()"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "held"  # the grandchild holds its memory now
        sampler = ServerSampler([server.pid])
        sampler.sample()
        assert sampler.peak >= 250 << 20
        assert ServerSampler([]).peak == 0
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait()


def test_jobs_auto_is_the_default_and_a_number_still_works() -> None:
    from assembler.cli import build_parser

    parser = build_parser("build")
    assert parser.parse_args(["build", "--cuda", "13.2"]).jobs == 0
    assert parser.parse_args(["build", "--cuda", "13.2", "--jobs", "auto"]).jobs == 0
    assert parser.parse_args(["build", "--cuda", "13.2", "-j", "3"]).jobs == 3
    assert memory.DEFAULT_PER_JOB == {"nvcc": 5 * GIB, "g++": 3 * GIB // 2}
