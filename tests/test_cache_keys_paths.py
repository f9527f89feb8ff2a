"""Compile-cache keys without any path of the workspace, the cache or the toolkit (issue 28, item
6). Two workspaces at different paths, each with its own ASSEMBLE_CACHE and its own copy of the
CUDA toolkit, sharing one Redis, gave 8 hits and 1 miss: nvcc runs by its real path and hands its
host compile ``-I<toolkit>/bin/../include``, so the CUDA unit's key held where the toolkit lives;
and CMake named each object after its source's absolute path (``-o``/``-MT``
``CMakeFiles/x.dir/<workspace>/forks/...``). The launcher's pieces are checked with real files,
links and gcc; the real test builds the example twice against a real redis-server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from assembler.errors import InputError
from assembler.toolchain import cuda, launch, sccache
from assembler.workspace import LINKS_DIR
from tests.build_support import ci_runner

MARKER = json.dumps({"packages": {"nvidia-cuda-nvcc": "13.2.86"}, "release": "13.2.86"})
HEADER = "static inline const char* tk_where(void) { return __FILE__; }\n"
UNIT = '#include <tk.h>\nconst char* where(void) { return tk_where(); }\n'


@pytest.fixture(name="units")
def units_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The launcher's shared root (/tmp/assemble-units) for this test alone."""
    root = tmp_path / "units"
    monkeypatch.setattr(launch, "STUB_ROOT", str(root))
    return root


@pytest.fixture(name="short_dir")
def short_dir_fixture() -> Iterator[Path]:
    """A directory whose path is shorter than any alias: GCC would prefer it to a spelled path."""
    directory = Path(tempfile.mkdtemp(prefix="tk", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def toolkit(parent: Path, marker: str = MARKER, extra_header: str | None = None) -> Path:
    """A toolkit laid out as a hermetic one: ``<parent>/cuda-13.2-x/cuda`` with the marker beside
    its root, include/tk.h and bin/nvcc (never run here)."""
    root = parent / "cuda-13.2-x" / "cuda"
    (root / "include").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "include" / "tk.h").write_text(HEADER)
    if extra_header:
        (root / "include" / extra_header).write_text("\n")
    (root / "bin" / "nvcc").write_text("#!/bin/sh\nexit 1\n")
    (root.parent / cuda.MARKER).write_text(marker)
    return root


def workspace(parent: Path) -> tuple[Path, Path]:
    """A workspace with its unit at a fixed place and a build directory to compile from."""
    ws = parent / "ws"
    build = ws / ".assemble" / "build" / "kern" / "cmake-1"
    build.mkdir(parents=True)
    (ws / "forks" / "kern").mkdir(parents=True)
    (ws / "forks" / "kern" / "a.c").write_text(UNIT)
    return ws, build


def compile_path_free(ws: Path, build: Path, root: Path) -> tuple[list[str], bytes]:
    """What the launcher hands sccache for a C unit that includes the toolkit's header, and the
    object real gcc makes of it."""
    arguments = ["-isystem", str(root / "include"), "-O1", "-c", str(ws / "forks" / "kern" / "a.c"), "-o", "a.o"]
    compiler, free = launch.path_free("gcc", arguments, [(str(ws), str(ws))], str(build), str(root))
    subprocess.run([compiler, *free], cwd=build, check=True, capture_output=True)
    return free, (build / "a.o").read_bytes()


def test_a_toolkit_at_another_path_gives_the_same_arguments_and_object(
        tmp_path: Path, units: Path, short_dir: Path) -> None:
    long_root = toolkit(tmp_path / "a-long-way-down" / "cache" / "toolchains")
    short_root = toolkit(short_dir)
    assert launch.toolkit_identity(str(long_root)) == launch.toolkit_identity(str(short_root)) is not None
    first, first_object = compile_path_free(*workspace(tmp_path / "one"), long_root)
    second, second_object = compile_path_free(*workspace(tmp_path / "elsewhere" / "two"), short_root)
    assert first == second  # the key's arguments: no workspace, no toolkit path
    alias = launch.toolkit_alias(str(short_root))
    assert alias is not None and first[:2] == ["-isystem", f"{alias}/include"]
    assert launch.CANONICAL_OFF in first
    assert first_object == second_object
    assert f"{alias}/include/tk.h".encode() in second_object  # __FILE__ as spelled ...
    assert str(short_dir).encode() not in second_object  # ... never the real path

    # why the flag: GCC takes a system header's real path when it is shorter than the spelling
    ws, build = workspace(tmp_path / "three")
    _, free = launch.path_free("gcc", ["-isystem", str(short_root / "include"), "-c", str(ws / "forks/kern/a.c"),
                                       "-o", "a.o"], [(str(ws), str(ws))], str(build), str(short_root))
    subprocess.run(["gcc", *(arg for arg in free if arg != launch.CANONICAL_OFF)], cwd=build, check=True)
    assert str(short_root / "include" / "tk.h").encode() in (build / "a.o").read_bytes()


def test_identity_tells_toolkits_apart_and_nvcc_runs_through_the_alias(tmp_path: Path, units: Path) -> None:
    plain = toolkit(tmp_path / "plain")
    newer = toolkit(tmp_path / "newer", marker=MARKER.replace("13.2.86", "13.2.90"))
    curand = toolkit(tmp_path / "curand", extra_header="curand.h")
    identities = {launch.toolkit_identity(str(root)) for root in (plain, newer, curand)}
    assert len(identities) == 3 and None not in identities

    ws, build = workspace(tmp_path / "ws1")
    (ws / "forks" / "kern" / "k.cu").write_text("__global__ void k() {}\n")
    arguments = ["-isystem", str(plain / "include"), "-c", str(ws / "forks" / "kern" / "k.cu"), "-o", "k.o"]
    compiler, free = launch.path_free(str(plain / "bin" / "nvcc"), arguments, [(str(ws), str(ws))], str(build), None)
    alias = launch.toolkit_alias(str(plain))
    assert alias is not None and compiler == f"{alias}/bin/nvcc"  # nvcc finds its toolkit from there
    assert Path(alias).resolve() == plain.resolve()
    assert f"{alias}/include" in free and f"-Xcompiler={launch.CANONICAL_OFF}" in free
    assert not any(str(plain.parent) in arg or str(ws) in arg for arg in free), free

    # a toolkit without a record gets no alias: nvcc runs from its real path, as before
    (plain.parent / cuda.MARKER).unlink()
    assert launch.toolkit_identity(str(plain)) is None
    compiler, _ = launch.path_free(str(plain / "bin" / "nvcc"), arguments, [(str(ws), str(ws))], str(build), None)
    assert compiler == os.path.realpath(plain / "bin" / "nvcc")


def test_the_alias_is_never_made_where_another_user_could_change_it(tmp_path: Path, units: Path) -> None:
    """The alias is the compiler itself: only a directory of this user that nobody else may
    write, in a shared root only this user or root owns (sticky when others may write), is used;
    anything else means the real path, and nothing is written through a planted link."""
    root = toolkit(tmp_path / "tk")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    units.symlink_to(elsewhere, target_is_directory=True)  # the shared root planted as a link
    assert launch.toolkit_alias(str(root)) is None
    assert list(elsewhere.iterdir()) == []
    units.unlink()

    units.mkdir()
    units.chmod(0o777)  # writable by all, not sticky: anyone could rename our directory away
    assert launch.toolkit_alias(str(root)) is None
    units.chmod(0o1777)
    alias = launch.toolkit_alias(str(root))
    assert alias is not None and os.readlink(alias) == str(root.resolve())

    directory = Path(alias).parent
    directory.chmod(0o777)  # the alias's directory writable by others
    assert launch.toolkit_alias(str(root)) is None
    directory.chmod(0o755)
    os.unlink(alias)
    os.symlink(elsewhere, alias)  # a stale or planted link in our own directory is replaced, not followed
    assert launch.toolkit_alias(str(root)) == alias and os.readlink(alias) == str(root.resolve())

    if os.getuid() == 0:  # another user's directory or shared root (chown needs root)
        os.chown(directory, 65534, 65534)
        assert launch.toolkit_alias(str(root)) is None
        os.chown(directory, 0, 0)
        os.chown(units, 65534, 65534)
        assert launch.toolkit_alias(str(root)) is None
        source = tmp_path / "ws" / "forks" / "kern" / "a.cu"
        source.parent.mkdir(parents=True)
        source.write_text("__global__ void k() {}\n")
        ws = str(tmp_path / "ws")
        spellings = launch.relative_spellings([(ws, ws)], f"{ws}/b")
        arguments = ["-c", str(source), "-o", "a.o"]
        assert launch.through_stub("nvcc", arguments, spellings) == arguments  # the stub obeys the same rule


def test_the_cache_link_lives_in_the_links_directory_and_nothing_is_written_through_a_link(tmp_path: Path) -> None:
    ws, cache, outside = tmp_path / "ws", tmp_path / "cache", tmp_path / "outside"
    for directory in (ws / ".assemble", cache, outside):
        directory.mkdir(parents=True)
    roots = dict(sccache.path_roots(ws, ws / ".assemble", cache))
    assert os.readlink(ws / ".assemble" / LINKS_DIR / "cache") == str(cache)
    assert roots[str(cache)] == str(ws / ".assemble" / LINKS_DIR / "cache")
    shutil.rmtree(ws / ".assemble" / LINKS_DIR)
    (ws / ".assemble" / LINKS_DIR).symlink_to(outside, target_is_directory=True)  # planted in a pull request
    with pytest.raises(InputError, match="is a symbolic link"):
        sccache.path_roots(ws, ws / ".assemble", cache)
    assert list(outside.iterdir()) == []


def test_the_launcher_reads_the_hermetic_toolkits_marker() -> None:
    assert f"../{cuda.MARKER}" in launch.TOOLKIT_RECORDS


def _hardlinked_copy(source: Path, target: Path) -> None:
    """``source`` copied to ``target`` (hard links where the file system allows): the same
    toolkit at another real path."""
    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, symlinks=True, copy_function=link)


def _build(ws: Path, cache: Path) -> dict[str, dict[str, object]]:
    done = subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws), "build", "--cuda", "13.2", "--json"],
                          env={**os.environ, "ASSEMBLE_CACHE": str(cache)}, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return {dep["dep"]: dep for dep in json.loads(done.stdout)["deps"]}


@pytest.mark.integration
def test_a_runner_at_other_paths_with_its_own_toolkit_misses_nothing(
        tmp_path: Path, toolchains: Path, redis_url: str) -> None:
    """The issue's measurement: a second workspace and cache at other paths, whose CUDA toolkit
    is its own copy at another real path, compiles nothing itself; CUDA units included."""
    remote = f'remote = "{redis_url}"'
    ws, cache = ci_runner(tmp_path / "runner", toolchains, remote)
    first = _build(ws, cache)
    ws, cache = ci_runner(tmp_path / "elsewhere" / "deeper" / "laptop", toolchains, remote)
    name = cuda.toolkit_dir_name("13.2", ())
    (cache / "toolchains").unlink()
    _hardlinked_copy(toolchains / "toolchains" / name, cache / "toolchains" / name)
    own = cache / "toolchains" / name / "cuda"
    assert own.resolve() != (toolchains / "toolchains" / name / "cuda").resolve()  # the same toolkit, another path
    second = _build(ws, cache)
    assert set(first) == set(second) == {"vecadd", "scalekit", "rowsum"}
    counts = {dep: (first[dep]["compiler_cache"], second[dep]["compiler_cache"]) for dep in first}
    print("compile cache (first, second):", json.dumps(counts))
    for dep, (cold, warm) in counts.items():
        assert isinstance(cold, dict) and isinstance(warm, dict), dep
        assert second[dep]["status"] == "built", dep  # from the compiler cache, not the artifact store
        assert cold["misses"] > 0 and cold["hits"] == 0, (dep, cold)
        assert warm["misses"] == 0 and warm["hits"] == cold["misses"], (dep, warm, cold)

    # no object is named after an absolute path: the same -o and -MT in every workspace
    [ninja] = (ws / ".assemble" / "build" / "scalekit").glob("cmake-*/build.ninja")
    objects = [line.split(":")[0].removeprefix("build ") for line in ninja.read_text().splitlines()
               if line.startswith("build ") and line.split(":")[0].endswith(".o")]
    assert "CMakeFiles/_scalekit_C.dir/csrc/scale.cu.o" in objects, objects
    assert not [name for name in objects if str(tmp_path) in name], objects
    assert {dep: first[dep]["key"] for dep in first} == {dep: second[dep]["key"] for dep in second}
