"""sccache as the compiler launcher: configuration, one real server per build (started, counted,
stopped, none left running), and two runners that share only a Redis remote: the second one's
compiles are all hits."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from assembler.errors import InputError, ManifestError
from assembler.manifest import load_manifest
from assembler.toolchain import sccache
from tests.build_support import EXAMPLE, ci_runner

ROOT = Path(__file__).resolve().parent.parent


def sccache_processes_under(directory: Path) -> list[int]:
    """Ids of running sccache processes whose SCCACHE_DIR lies below ``directory``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if Path(os.readlink(entry / "exe")).name != "sccache":
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(item.startswith(f"SCCACHE_DIR={directory}".encode()) for item in environ):
            found.append(int(entry.name))
    return found


def test_switch_and_manifest_choose_whether_sccache_runs(tmp_path: Path) -> None:
    on = sccache.configure("sccache", None, tmp_path / "sccache", (tmp_path,), None, environ={})
    assert on.enabled and on.binary is not None and on.binary.name == "sccache"
    assert not sccache.configure("none", None, tmp_path, (), None, environ={}).enabled
    assert not sccache.configure("sccache", None, tmp_path, (), None, environ={"ASSEMBLE_SCCACHE": "0"}).enabled
    assert sccache.configure("none", None, tmp_path, (), None, environ={"ASSEMBLE_SCCACHE": "1"}).enabled
    with pytest.raises(InputError, match="ASSEMBLE_SCCACHE='yes'"):
        sccache.configure("sccache", None, tmp_path, (), None, environ={"ASSEMBLE_SCCACHE": "yes"})
    defines = sccache.cmake_launcher_defines(on)
    assert (defines["cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER"].split(";")[-2:]
            == [str(sccache.LAUNCH_SCRIPT), str(on.binary)])
    assert defines["cmake.define.CMAKE_CXX_LINKER_LAUNCHER"].split(";")[-1] == "-"  # a link: the launcher alone
    assert set(sccache.cmake_launcher_defines(None).values()) == {""}  # a reused build tree forgets the launcher


@pytest.mark.parametrize(("table", "problem"), [
    ('compiler = "ccache"', 'cache.compiler: expected "sccache" or "none"'),
    ('remote = "http://cache:6379"', "cache.remote: 'http://cache:6379' is not a Redis URL"),
    ('artifacts = "ftp://host/dir"', "cache.artifacts: 'ftp://host/dir' is not a file:/// or s3:// store"),
    ('artifacts = "file:///srv/../etc"', "cache.artifacts"),
    ('s3-endpoint = "127.0.0.1:9000"', "cache.s3-endpoint"),
    ('artefacts = "file:///x"', "cache.artefacts: unknown key"),
])
def test_cache_table_errors_name_the_line(tmp_path: Path, table: str, problem: str) -> None:
    manifest = tmp_path / "deps.toml"
    manifest.write_text((EXAMPLE / "deps.toml").read_text() + f"\n[cache]\n{table}\n")
    line = manifest.read_text().splitlines().index(table) + 1
    with pytest.raises(ManifestError) as raised:
        load_manifest(manifest)
    assert raised.value.message.startswith(f"{manifest}:{line}:")
    assert problem in raised.value.message


def test_cache_table_is_read(tmp_path: Path) -> None:
    manifest = tmp_path / "deps.toml"
    manifest.write_text((EXAMPLE / "deps.toml").read_text()
                        + '\n[cache]\ncompiler = "none"\nremote = "redis://10.0.0.5:6379/2"\n'
                        'artifacts = "s3://release-cache/assembler"\ns3-endpoint = "http://127.0.0.1:9000"\n')
    cache = load_manifest(manifest).cache
    assert (cache.compiler, cache.remote, cache.artifacts, cache.s3_endpoint) == (
        "none", "redis://10.0.0.5:6379/2", "s3://release-cache/assembler", "http://127.0.0.1:9000")
    assert load_manifest(EXAMPLE / "deps.toml").cache.compiler == "sccache"  # on by default


def test_server_counts_one_miss_then_one_hit_and_stops(tmp_path: Path) -> None:
    cache = sccache.configure("sccache", None, tmp_path / "local", (tmp_path,), tmp_path / "logs", environ={})
    source = tmp_path / "unit.cpp"
    source.write_text("int twice(int x) { return 2 * x; }\n")
    compiler = shutil.which("c++")
    assert compiler is not None
    with sccache.server(cache, "unit") as server:
        assert server is not None
        port = server.port
        env = {**os.environ, **server.client_environment()}
        for _ in range(2):
            subprocess.run([str(cache.binary), compiler, "-O2", "-c", str(source), "-o", str(tmp_path / "unit.o")],
                           env=env, check=True, cwd=tmp_path)
        stats = server.stats()
        assert (stats.hits, stats.misses) == (1, 1), stats
        assert str(tmp_path / "local") in stats.location
        owner = server.owner
    assert sccache.owned_processes(owner, cache.binary) == []  # type: ignore[arg-type]
    assert sccache_processes_under(tmp_path) == []
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing listens there any more


def test_setuptools_shims_run_the_real_compiler_through_sccache(tmp_path: Path) -> None:
    cache = sccache.configure("sccache", None, tmp_path / "local", (tmp_path,), None, environ={})
    nvcc = tmp_path / "fake-cuda" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/bin/sh\necho nvcc-called \"$@\"\n")
    nvcc.chmod(0o755)
    env = {"PATH": os.environ["PATH"]}
    extra = sccache.setuptools_environment(cache, tmp_path / "shims", env, nvcc)
    assert extra["TORCH_NO_COMPILER_WRAPPER"] == "1"
    assert extra["PATH"].split(os.pathsep)[0] == str(tmp_path / "shims")
    assert extra["PYTORCH_NVCC"] == str(tmp_path / "shims" / "nvcc")
    assert str(cache.binary) in (tmp_path / "shims" / "c++").read_text()
    # without a cache torch must not wrap on its own either, and nothing is shimmed
    assert sccache.setuptools_environment(None, tmp_path / "none", env, nvcc) == {"TORCH_NO_COMPILER_WRAPPER": "1"}
    assert not (tmp_path / "none").exists()


def _runner(root: Path, toolchains: Path, redis_url: str | None) -> tuple[Path, Path]:
    """A fresh CI runner whose compiler cache's remote is ``redis_url``."""
    return ci_runner(root, toolchains, None if redis_url is None else f'remote = "{redis_url}"')


def _build(ws: Path, cache: Path, *args: str, **env: str) -> dict[str, dict[str, object]]:
    done = subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws), "build", "--cuda", "13.2", "--json",
                           *args],
                          env={**os.environ, "ASSEMBLE_CACHE": str(cache), **env}, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return {dep["dep"]: dep for dep in json.loads(done.stdout)["deps"]}


@pytest.mark.integration
def test_second_runner_hits_everything_from_redis(tmp_path: Path, toolchains: Path, redis_url: str) -> None:
    """Two runners, one after the other, at different paths (a laptop and CI; a workspace and an
    ASSEMBLE_CACHE elsewhere each) with nothing local in common: the second compiles nothing
    itself, for the C++ unit (helper), the CUDA unit (helper, nvcc) and the setuptools backend."""
    ws, cache = _runner(tmp_path / "runner", toolchains, redis_url)
    first = _build(ws, cache)
    assert sccache_processes_under(tmp_path) == []
    # a fresh runner somewhere else: empty artifact store and local sccache dir, other paths
    ws, cache = _runner(tmp_path / "elsewhere" / "deeper" / "laptop", toolchains, redis_url)
    second = _build(ws, cache)
    assert sccache_processes_under(tmp_path) == []
    assert set(first) == set(second) == {"vecadd", "scalekit", "rowsum"}
    for name in first:
        cold, warm = first[name]["compiler_cache"], second[name]["compiler_cache"]
        assert isinstance(cold, dict) and isinstance(warm, dict), name
        assert second[name]["status"] == "built", name  # not the artifact store: the compiler cache
        assert "redis" in str(warm["location"]), warm
        assert cold["misses"] > 0 and cold["hits"] == 0, (name, cold)
        assert warm["misses"] == 0 and warm["hits"] == cold["misses"], (name, warm, cold)
    assert first["scalekit"]["key"] == second["scalekit"]["key"]

    # sccache off: the build trees configured with the launcher forget it, and no server runs
    (ws / "forks" / "vecadd" / "csrc" / "add_scaled.cpp").open("a").write("// an edit\n")
    off = _build(ws, cache, "--only", "vecadd", ASSEMBLE_SCCACHE="0")
    assert off["vecadd"]["status"] == "built" and off["vecadd"]["compiler_cache"] is None
    assert sccache_processes_under(tmp_path) == []


def test_compile_commands_name_the_real_compiler_not_the_shim(tmp_path: Path) -> None:
    cache = sccache.configure("sccache", None, tmp_path / "local", (tmp_path,), None, environ={})
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    extra = sccache.setuptools_environment(cache, tmp_path / "shims", {"PATH": os.environ["PATH"]}, nvcc)
    command = [extra["PYTORCH_NVCC"], "-c", "a.cu"]
    assert sccache.unshimmed(command) == [str(nvcc), "-c", "a.cu"]
    assert sccache.unshimmed(["c++", "-c", "a.cpp"]) == ["c++", "-c", "a.cpp"]


BUILD_THAT_HANGS = """
import sys, time
from pathlib import Path
from assembler.toolchain import sccache
cache = sccache.configure("sccache", None, Path(sys.argv[1]), (), None, environ={})
with sccache.server(cache, sys.argv[2]) as running:
    print(running.port, flush=True)
    time.sleep(600)
"""


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _start_build(local: Path, label: str) -> tuple[subprocess.Popen[str], int]:
    """A process that holds one real sccache server, as `assemble build` does, and its port."""
    build = subprocess.Popen([sys.executable, "-c", BUILD_THAT_HANGS, str(local), label], stdout=subprocess.PIPE,
                             text=True, cwd=ROOT)
    assert build.stdout is not None
    return build, int(build.stdout.readline())


def test_the_next_build_stops_servers_whose_build_was_killed(tmp_path: Path) -> None:
    """Issue 21, item 13: each SIGKILL of a build left its sccache server listening. The next
    build stops those, and only those: a server whose build still runs is left alone."""
    local = tmp_path / "local"
    killed = [_start_build(local, f"killed{n}") for n in range(2)]
    alive, alive_port = _start_build(local, "alive")
    for build, _ in killed:
        build.kill()
        build.wait()
    try:
        assert all(_listening(port) for _, port in killed)  # what SIGKILL leaves
        cache = sccache.configure("sccache", None, local, (), None, environ={})
        sccache._reaped.discard(cache.binary)  # type: ignore[arg-type]  # a new build process
        with sccache.server(cache, "next") as server:
            assert server is not None
            assert not any(_listening(port) for _, port in killed)
            assert _listening(alive_port) and alive.poll() is None
            servers = sccache_processes_under(local)
            assert len(servers) == 2, servers  # the live build's and ours
    finally:
        alive.kill()
        alive.wait()
        assert sccache.stop_orphans(cache.binary)  # type: ignore[arg-type]  # its server, now orphaned
    assert not _listening(alive_port)
    assert sccache_processes_under(local) == []


def test_a_server_that_dies_during_the_build_is_a_problem_named(tmp_path: Path) -> None:
    """A real server killed mid-build (as the one that crashed with "Failed to bind socket"):
    the problem says it stopped; a healthy server that compiled has none."""
    import signal

    cache = sccache.configure("sccache", None, tmp_path / "local", (tmp_path,), tmp_path / "logs", environ={})
    (tmp_path / "a.cpp").write_text("int f() { return 1; }\n")
    with sccache.server(cache, "kern") as running:
        assert running is not None and running.pids
        env = {**os.environ, **running.client_environment()}
        subprocess.run([str(cache.binary), "c++", "-c", "a.cpp", "-o", "a.o"], cwd=tmp_path, env=env, check=True)
        healthy = running.stats()
        assert healthy.requests == 1 and running.problem(healthy) is None
        for pid in running.pids:
            os.kill(pid, signal.SIGKILL)
        problem = running.problem(running.stats())
    assert problem is not None and f"the sccache server (pid {running.pids[0]}) stopped during the build" in problem
    assert sccache_processes_under(tmp_path) == []
