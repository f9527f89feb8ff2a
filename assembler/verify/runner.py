"""Verify a wheel on several torch versions without rebuilding it.

For each torch version: the cached torch-only venv (or, with ``--python``, an interpreter that
already has torch: nothing created, nothing downloaded), one probe subprocess (``probe.py``) that
imports torch, loads every extension of the wheel, checks the op schemas and runs the smoke calls
(of the workspace when the wheel is its bundle's, else those the wheel carries: ``specs``). The
wheel is installed with uv ``--no-deps --target`` (pip when uv cannot run) into a scratch
directory per interpreter that its probe puts first on ``sys.path``. Probes for different
versions run side by side. A probe that dies (a segfaulting extension) or hangs costs only the
dependency it was working on: that one is a FAIL naming the step, the rest are re-run.

The wheel's code runs in the probe, so nothing the probe says is taken on trust: its input comes
on stdin and its results through a pipe of their own, each line behind a per-run nonce (what the
wheel prints or writes elsewhere is no result, and a line without the nonce fails every row of
that torch). The environments stay pristine: the probe runs with them (and the caches and its
interpreter) read-only where the kernel allows a user namespace (``sandbox.py``), and each cached
environment is compared with the manifest it was made with after the probes; one that changed
FAILs the run, saying what changed, and is removed to be made again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import select
import signal
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from assembler.audit.demangle import demangle
from assembler.cache import in_use
from assembler.errors import InputError, ManifestError
from assembler.jsonfile import loads
from assembler.manifest import MANIFEST_NAME, find_workspace, load_manifest
from assembler.manifest.model import Manifest
from assembler.system import available_cpus
from assembler.toolchain.installer import install, installer
from assembler.toolchain.venv import changed_files, discard_changed, summary
from assembler.verify.contents import ExtensionFile, attribute, scan
from assembler.verify.envs import TorchEnv, ensure_torch_env, interpreter_env
from assembler.verify.load_failure import ProbedTorch, diagnose_loads
from assembler.verify.probe import IMPORTING_TORCH
from assembler.verify.progress import Heartbeat, wrapped
from assembler.verify.report import Cell, Check, Status, TorchInfo, VerifyReport
from assembler.verify.specs import DepSpec, Specs, resolve_specs
from assembler.verify.window import TorchWindow, torch_window
from assembler.workspace import open_workspace

PROBE = Path(__file__).with_name("probe.py")
SANDBOX = Path(__file__).with_name("sandbox.py")
DEFAULT_TIMEOUT = 600.0
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
_STARTING = "starting Python"  # the step before the probe said anything


@dataclass
class _ProbeState:
    """What the probe runs for one torch version have established so far."""

    checks: dict[str, list[Check]] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    crashed: set[str] = field(default_factory=set)
    env: dict[str, Any] | None = None


def workspace_manifest(directory: Path | None, search_from: Path) -> Manifest | None:
    """The manifest naming the ops and smoke calls to check: the one of ``directory``
    (``--workspace``, which must hold one), else the nearest deps.toml at or above
    ``search_from`` (the CLI passes its working directory), else None: outside every workspace
    only loading is checked. A deps.toml that is there but does not load is an error (exit 2),
    never taken for no deps.toml."""
    if directory is not None:
        return open_workspace(directory).manifest
    try:
        root = find_workspace(search_from)
    except ManifestError:
        return None
    return load_manifest(root / MANIFEST_NAME)


def verify_wheel(
    manifest: Manifest | None,
    wheel: Path,
    torch_versions: Sequence[str] = (),
    progress: Callable[[str], None] = lambda _: None,
    timeout: float = DEFAULT_TIMEOUT,
    pythons: Sequence[Path] = (),
    window: bool = False,
) -> VerifyReport:
    """The PASS / FAIL / SKIPPED matrix for ``wheel`` on each of ``torch_versions`` (default: the
    [bundle] verify-torch of the specs used) and on the torch of each interpreter in ``pythons``;
    with ``window``, also on every release of the wheel's torch window (``verify.window``).
    ``progress`` hears what is being done at least every ``progress.HEARTBEAT`` seconds.

    ``manifest`` (the workspace's) supplies the ops and smoke calls when the wheel is its
    bundle's; otherwise the wheel's own record does (see ``specs``); without either, each
    extension is its own row and only loading is checked. Raises InputError (exit 2) when the
    wheel is missing or does not install, belongs to another bundle and carries no specs, or a
    torch version cannot be installed or imported.
    """
    started = time.monotonic()
    if not wheel.is_file() or not zipfile.is_zipfile(wheel):
        raise InputError(f"{wheel}: no such wheel", hint="pass the path of a .whl file (assemble build prints it)")
    beat = Heartbeat(progress)
    with beat.running():
        return _verify(manifest, wheel, torch_versions, beat, timeout, pythons, window, started)


def _verify(manifest: Manifest | None, wheel: Path, torch_versions: Sequence[str], beat: Heartbeat, timeout: float,
            pythons: Sequence[Path], window: bool, started: float) -> VerifyReport:
    specs = resolve_specs(manifest, wheel)
    beat(f"verify specs: {specs.detail}")
    span: TorchWindow | None = None
    if window:
        beat.doing("verify", "asking the package index for the torch releases of the window")
        span = torch_window(wheel, manifest, beat)
        beat.doing("verify", None)
        beat("\n".join(wrapped(span.describe())))
        torch_versions = sorted(dict.fromkeys([*span.versions, *torch_versions]), key=Version)
    versions = list(dict.fromkeys(torch_versions or (() if pythons else specs.verify_torch)))
    if not versions and not pythons:
        raise InputError("no torch version to verify against",
                         hint="pass --torch X.Y.Z, --torch window or --python PATH, or set [bundle] verify-torch")
    given = [interpreter_env(python) for python in dict.fromkeys(pythons)]
    envs = [_torch_env(version, beat) for version in versions] + given
    with tempfile.TemporaryDirectory(prefix="assemble-verify-") as scratch, contextlib.ExitStack() as held:
        for env in envs:
            if not env.given:
                held.enter_context(in_use(env.path))  # no `assemble cache prune` under a running probe
        # One install per interpreter: the cached environments all run the Python assemble runs on.
        installed: dict[Path | None, Path] = {}
        for env in envs:
            interpreter = env.python if env.given else None
            if interpreter not in installed:
                installed[interpreter] = Path(scratch) / f"site-{len(installed)}"
                beat(f"installing {wheel.name} for {env.python} (--no-deps --target)")
                _install(env, wheel, installed[interpreter])
        sites = [installed[env.python if env.given else None] for env in envs]
        plan = _plan(specs, scan(sites[0]))
        read_only = _read_only(envs, sites)
        beat("\n".join(wrapped(f"verifying on torch {', '.join(env.requested for env in envs)}: "
                               f"{_what_a_probe_does(plan)}")))
        with ThreadPoolExecutor(max_workers=min(len(envs), available_cpus())) as pool:
            states = list(pool.map(lambda job: _probe(job[1], sites[job[0]], plan, read_only, timeout, beat),
                                   enumerate(envs)))
        changed = {env.path: _env_changed(env, state, plan) for env, state in zip(envs, states, strict=True)}
        for env, state in zip(envs, states, strict=True):
            _say_sandbox(env, state, beat)
        beat.doing("verify", "reading the torch libraries of the environments for the loads that failed")
        diagnose_loads([  # while the wheel is still installed: the failing objects' other imports are read too
            ProbedTorch(state.env["torch"], Path(state.env["torch_lib"]) if state.env.get("torch_lib") else None, site,
                        state.checks)
            for site, state in zip(sites, states, strict=True) if state.env is not None
        ], plan, [dep.name for dep in specs.deps], beat)
    beat.doing("verify", None)
    for env in envs:  # after the shared locks are let go: a discard waits for every other run using it
        if changed.get(env.path) and env.files is not None and discard_changed(env.path, env.files):
            beat(f"removed the changed environment {env.path}; the next verify makes it again")
    infos = []
    cells: dict[tuple[str, str], Cell] = {}
    for env, state in zip(envs, states, strict=True):
        assert state.env is not None
        infos.append(TorchInfo(
            requested=env.requested, installed=state.env["torch"], cuda=state.env["cuda"],
            gpu=state.env["gpu"], env=str(env.path), python=str(env.python) if env.given else None,
        ))
        for dep in plan:
            checks = state.checks.get(dep["name"], [])
            if dep["absent"]:
                checks = [Check("wheel", "", Status.FAIL, dep["absent"]), *checks]
            cells[(dep["name"], env.requested)] = Cell(dep["name"], env.requested, checks)
    return VerifyReport(
        wheel=str(wheel), torch=infos, deps=[dep["name"] for dep in plan], cells=cells,
        seconds=time.monotonic() - started, specs=specs.to_json(), window=span.to_json() if span else None,
        profiles={dep["name"]: specs.profiles.get(dep["name"]) for dep in plan},
    )


def _torch_env(version: str, beat: Heartbeat) -> TorchEnv:
    """The cached environment of one torch version, the heartbeat saying meanwhile that it is
    being made (the installer's own progress bars on a terminal, its phase lines otherwise)."""
    from assembler.toolchain.installer import draws_on_terminal

    part = f"torch {version}"
    beat.doing(part, f"making its environment (torch=={version}, about 5 GB with CUDA)", quiet=draws_on_terminal())
    try:
        return ensure_torch_env(version, beat.relay)
    finally:
        beat.doing(part, None)


def _what_a_probe_does(plan: list[dict[str, Any]]) -> str:
    """What each probe is about to do, counted (it runs for tens of seconds)."""
    extensions = sum(len(row["extensions"]) for row in plan)
    ops = sum(len(row["ops"]) for row in plan)
    smoke = sum(1 for row in plan if row["smoke"])
    return (f"one probe per torch imports torch, loads {extensions} extension(s), checks {ops} op(s) and runs "
            f"{smoke} smoke call(s)")


def _read_only(envs: Sequence[TorchEnv], sites: Sequence[Path]) -> list[str]:
    """What the probes may not write (``sandbox.py``): the assembler cache (the environments, the
    evidence other commands trust), uv's cache (what environments are made from), the wheel as
    installed and every interpreter's prefix. The probe adds its own interpreter's prefixes."""
    from assembler.cache import cache_root
    from assembler.toolchain.installer import uv_cache_dir

    paths = [str(cache_root()), *(str(env.path) for env in envs), *(str(site) for site in sites)]
    uv_cache = uv_cache_dir()
    return [*paths, uv_cache] if uv_cache else paths


def _say_sandbox(env: TorchEnv, state: _ProbeState, progress: Callable[[str], None]) -> None:
    """One line on how the probe was kept from writing (``sandbox.py``'s answer)."""
    status = str((state.env or {}).get("sandbox", ""))
    if status.startswith("read-only: "):
        progress(f"torch {env.requested}: the probe ran with {len(status.split(', '))} paths read-only "
                 "(the environment, the caches, the wheel, the interpreter)")
    elif status:
        progress(f"torch {env.requested}: the probe ran without a read-only view ({status.removeprefix('off: ')})"
                 + ("; the environment is compared with its manifest instead" if not env.given else ""))


def _env_changed(env: TorchEnv, state: _ProbeState, plan: list[dict[str, Any]]) -> bool:
    """Whether the cached environment differs from the manifest this run found it with; if so,
    every row on it FAILs, saying what changed (the probe's results on it prove nothing)."""
    if env.files is None:
        return False
    changes = changed_files(env.path, env.files)
    if not changes:
        return False
    detail = (f"the cached torch {env.installed} environment changed while the wheel ran in it ({summary(changes)}): "
              "it is removed and made again")
    for row in plan:
        state.checks.setdefault(row["name"], []).insert(0, Check("environment", str(env.path), Status.FAIL, detail))
    if state.env is None:
        state.env = {"torch": env.installed, "cuda": None, "gpu": False}
    return True


def _install(env: TorchEnv, wheel: Path, site: Path) -> None:
    """The installer's own wheel install (tag check, .data directories, .pth files) into ``site``
    only, offline and without the user's index settings: the wheel is a local file."""
    tool = installer()
    install(
        tool, env.python, [str(wheel)], target=site,
        options=["--no-deps", "--no-index", "--no-compile", *(["--no-cache"] if tool.uv else ["--quiet"])],
        user_config=False, doing=f"{wheel.name} does not install on torch {env.installed}'s Python ({env.python})",
        fallback=InputError, progress=lambda _: None, started=time.monotonic(),
    )


def _plan(specs: Specs, files: list[ExtensionFile]) -> list[dict[str, Any]]:
    """What each probe does, per row of the matrix: the dependencies in order, then one row per
    extension that no dependency claims."""
    owned, orphans = attribute(specs.deps, files, specs.recorded)

    def extensions(items: list[ExtensionFile]) -> list[dict[str, Any]]:
        return [{"path": f.path, "module": f.module, "cuda_libs": list(f.cuda_libs), "defines_ops": f.defines_ops}
                for f in items]

    rows = [
        {
            "name": dep.name, "extensions": extensions(owned[dep.name]), "ops": list(dep.ops),
            "smoke": dep.smoke, "requires_cuda": dep.requires_cuda,
            "absent": _absent(dep, owned[dep.name], specs.recorded),
        }
        for dep in specs.deps
    ]
    rows += [
        {"name": file.path, "extensions": extensions([file]), "ops": [], "smoke": None, "requires_cuda": False,
         "absent": None}
        for file in orphans
    ]
    return rows


def _absent(dep: DepSpec, owned: list[ExtensionFile], recorded: dict[str, set[str]] | None) -> str | None:
    """Why a dependency that builds extensions counts as missing from the wheel (a merge that
    dropped it must not pass as "nothing to check"), or None."""
    if owned or not dep.builds_extensions:
        return None
    if recorded is not None:
        return (f"no extension of {dep.name} in the wheel (its assembler.json lists {len(recorded.get(dep.name, ()))} "
                "files, no shared object)")
    rules = ", ".join(f"{pattern} -> {dest or '.'}" for pattern, dest in dep.install.items()) or "no [install] rules"
    return f"no extension of {dep.name} in the wheel ({rules})"


def _probe(env: TorchEnv, site: Path, plan: list[dict[str, Any]], read_only: list[str], timeout: float,
           beat: Heartbeat | None = None) -> _ProbeState:
    """Run the probe until every row is settled, restarting after a row that killed it."""
    part = f"torch {env.requested}"

    def announce(what: str) -> None:
        if beat is not None:
            beat.doing(part, what)

    try:
        return _probe_until_settled(env, site, plan, read_only, timeout, announce)
    finally:
        if beat is not None:
            beat.doing(part, None)


def _probe_until_settled(env: TorchEnv, site: Path, plan: list[dict[str, Any]], read_only: list[str], timeout: float,
                         announce: Callable[[str], None]) -> _ProbeState:
    state = _ProbeState()
    attempt = 0
    while True:
        remaining = [row for row in plan if row["name"] not in state.done]
        if not remaining and state.env is not None:
            return state
        attempt += 1
        # A restart re-loads what the earlier probes loaded, so a dependency's ops that another
        # dependency's extension registers are still there, as in one uninterrupted process.
        preload = [ext for row in plan if row["name"] in state.done - state.crashed for ext in row["extensions"]]
        announce("starting the probe" if attempt == 1 else f"starting the probe again (attempt {attempt})")
        run = _run_probe(env, {"site": str(site), "deps": remaining, "preload": preload}, read_only, timeout, announce)
        try:
            step = _read_events(run.events, state, site)
        except (KeyError, ValueError, TypeError) as error:  # the nonce was right, the event is not one the probe writes
            run.forged += 1
            step = (None, f"reading its results ({type(error).__name__})")
        if run.forged:
            _fail_all(state, env, remaining, "channel",
                      f"the probe's result channel held {run.forged} line(s) without this "
                      "run's nonce: something the wheel ran wrote forged results, so none of this probe's "
                      "results count")
            return state
        died = run.died
        if died is None and (state.env is None or any(row["name"] not in state.done for row in remaining)):
            died = "stopped before finishing (exit status 0)"
        if died is None:
            return state
        dep, doing = step
        if dep is None and doing not in (_STARTING, IMPORTING_TORCH):  # torch was in: the wheel's code did it
            _fail_all(state, env, remaining, "process", f"the probe {died} while {doing}")
            return state
        if dep is None:
            hint = f"check that torch imports in {env.python}" if env.given else f"delete {env.path} and re-run"
            raise InputError(f"torch {env.requested} ({env.path}) failed while {doing}: {died}", hint=hint)
        state.checks.setdefault(dep, []).append(Check("process", doing, Status.FAIL, f"the probe {died} while {doing}"))
        state.done.add(dep)
        state.crashed.add(dep)


def _fail_all(state: _ProbeState, env: TorchEnv, rows: list[dict[str, Any]], kind: str, detail: str) -> None:
    """Every row still open FAILs with ``detail`` (what the probe said of them before no longer counts)."""
    if state.env is None:  # the probe said nothing true of its torch: the environment's own record
        state.env = {"torch": env.installed, "cuda": None, "gpu": False}
    for row in rows:
        state.checks[row["name"]] = [Check(kind, "", Status.FAIL, detail)]
        state.done.add(row["name"])
        state.crashed.add(row["name"])


@dataclass
class _ProbeRun:
    events: list[dict[str, Any]]  # the lines that carried the nonce, decoded
    forged: int  # lines on the channel without it
    died: str | None  # how the process ended, when not with status 0


def _run_probe(env: TorchEnv, plan: dict[str, Any], read_only: list[str], timeout: float,
               step: Callable[[str], None] = lambda _: None) -> _ProbeRun:
    """One probe process. Its input (plan, nonce, the channel's descriptor) goes through stdin,
    which it reads whole and closes before anything of the wheel runs; its results come back
    through a pipe of their own, never stdout or a file the wheel could name. The sandbox
    launcher makes ``read_only`` read-only first where the kernel allows it (``sandbox.py``).
    ``step`` hears each step the probe announces, as it announces it (for the heartbeat only:
    the results are read once the probe has ended)."""
    nonce = secrets.token_hex(16)
    read_end, write_end = os.pipe()
    # -I: no PYTHONPATH, no user site
    command = [str(env.python), "-I", "-B", str(SANDBOX), json.dumps(read_only), str(PROBE)]
    try:
        with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
            try:
                process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=stdout, stderr=stderr,
                                           pass_fds=(write_end,), start_new_session=True)
            finally:
                os.close(write_end)
            assert process.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                process.stdin.write(json.dumps({"plan": plan, "nonce": nonce, "fd": write_end}).encode())
            with contextlib.suppress(BrokenPipeError):
                process.stdin.close()
            raw, timed_out = _collect(read_end, process, timeout, _StepWatcher(nonce, step))
            stderr.seek(0)
            tail = stderr.read()[-20000:].decode(errors="replace")
    finally:
        os.close(read_end)
    events: list[dict[str, Any]] = []
    forged = 0
    lines = raw.split(b"\n")
    for number, line in enumerate(lines):
        tag, _, body = line.partition(b" ")
        if not line or (number == len(lines) - 1 and process.returncode != 0):
            continue  # the last line of a killed probe may be cut short
        if tag.decode(errors="replace") != nonce:
            forged += 1
            continue
        try:
            event = loads(body, "the probe's result channel")
        except ValueError:  # jsonfile's errors are ValueErrors too: deep nesting included
            forged += 1
            continue
        if isinstance(event, dict):
            events.append(event)
    died = f"timed out after {timeout:.0f} s" if timed_out else None
    if died is None and process.returncode != 0:
        died = _death(process.returncode, tail)
    return _ProbeRun(events, forged, died)


class _StepWatcher:
    """Reads the channel's lines as they arrive and passes each step the probe announces
    (a "start" event behind this run's nonce) to ``step``; what it says decides nothing."""

    def __init__(self, nonce: str, step: Callable[[str], None]) -> None:
        self._tag = nonce.encode() + b" "
        self._step = step
        self._pending = b""

    def __call__(self, data: bytes) -> None:
        *lines, self._pending = (self._pending + data).split(b"\n")
        if len(self._pending) > 1 << 20:  # not a line the probe writes: nothing to announce in it
            self._pending = b""
        for line in lines:
            if not line.startswith(self._tag):
                continue
            try:
                event = json.loads(line[len(self._tag):])
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") == "start" and isinstance(event.get("step"), str):
                dep = event.get("dep")
                self._step(event["step"] + (f" ({dep})" if isinstance(dep, str) and dep not in event["step"] else ""))


def _collect(read_end: int, process: subprocess.Popen[bytes], timeout: float,
             watch: Callable[[bytes], None] = lambda _: None) -> tuple[bytes, bool]:
    """Everything written to the channel until every writer closed it (or, once the probe has
    exited, until a grandchild it left holding the pipe is given up on); whether it timed out.
    The probe runs in a session of its own, so it and whatever it started are killed here on
    the way out (Ctrl-C included), never left running."""
    try:
        return _drain(read_end, process, timeout, watch)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise


def _drain(read_end: int, process: subprocess.Popen[bytes], timeout: float,
           watch: Callable[[bytes], None]) -> tuple[bytes, bool]:
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return b"".join(chunks), True
        if exited_at is None and process.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > 2.0:
            break
        ready, _, _ = select.select([read_end], [], [], 0.2)
        if ready:
            data = os.read(read_end, 1 << 16)
            if not data:
                break
            chunks.append(data)
            watch(data)
    try:
        process.wait(timeout=max(deadline - time.monotonic(), 0.1))  # the probe closed its channel: it is ending
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return b"".join(chunks), True
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # what the wheel left running in the probe's session
    return b"".join(chunks), False


def _read_events(events: list[dict[str, Any]], state: _ProbeState, site: Path) -> tuple[str | None, str]:
    """Fold the probe's events into ``state``; returns the step announced last."""
    step: tuple[str | None, str] = (None, _STARTING)
    for event in events:
        kind = event.get("event")
        if kind == "start":
            step = (event["dep"], event["step"])
        elif kind == "env":
            state.env = event
        elif kind == "check":
            detail = _readable(event["detail"], site)
            state.checks.setdefault(event["dep"],
                                    []).append(Check(event["kind"], event["target"], Status(event["status"]), detail,
                                                                    ops=tuple(map(str, event.get("ops") or ()))))
        elif kind == "done":
            state.done.add(event["dep"])
            step = (None, "between dependencies")
    return step


def _death(returncode: int, stderr: str) -> str:
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    how = f"died of {signal.Signals(-returncode).name}" if returncode < 0 else f"exited with status {returncode}"
    return f"{how}{f' ({last})' if last else ''}"


def _readable(detail: str, site: Path) -> str:
    """Wheel-relative paths instead of scratch paths; C++ names next to mangled ones."""
    detail = detail.replace(f"{site}/", "")
    match = _UNDEFINED.search(detail)
    if match:
        symbol = match.group(1)
        demangled = demangle(symbol)
        if demangled != symbol:
            detail = detail.replace(symbol, f"{demangled} [{symbol}]")
    return detail
