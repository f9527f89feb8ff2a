"""Verify a wheel on several torch versions without rebuilding it.

For each torch version: the cached torch-only venv (or, with ``--python``, an interpreter that
already has torch: nothing created, nothing downloaded), one probe subprocess (``probe.py``) that
imports torch, loads every extension of the wheel, checks the op schemas and runs the smoke calls
(of the workspace when the wheel is its bundle's, else those the wheel carries: ``specs``). The
wheel is installed with uv ``--no-deps --target`` (pip when uv cannot run) into a scratch
directory per interpreter that its probe puts first on ``sys.path``, so the environments stay
pristine. Probes for different
versions run side by side. A probe that dies (a segfaulting extension) or hangs costs only the
dependency it was working on: that one is a FAIL naming the step, the rest are re-run.
"""

from __future__ import annotations

import contextlib
import json
import re
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

from assembler.audit.demangle import demangle
from assembler.cache import in_use
from assembler.errors import InputError, ManifestError
from assembler.manifest import MANIFEST_NAME, find_workspace, load_manifest
from assembler.manifest.model import Manifest
from assembler.system import available_cpus
from assembler.toolchain.installer import install, installer
from assembler.verify.contents import ExtensionFile, attribute, scan
from assembler.verify.diagnose import ProbedTorch, diagnose_loads
from assembler.verify.envs import TorchEnv, ensure_torch_env, interpreter_env
from assembler.verify.report import Cell, Check, Status, TorchInfo, VerifyReport
from assembler.verify.specs import DepSpec, Specs, resolve_specs
from assembler.workspace import open_workspace

PROBE = Path(__file__).with_name("probe.py")
DEFAULT_TIMEOUT = 600.0
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")


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
) -> VerifyReport:
    """The PASS / FAIL / SKIPPED matrix for ``wheel`` on each of ``torch_versions`` (default: the
    [bundle] verify-torch of the specs used) and on the torch of each interpreter in ``pythons``.

    ``manifest`` (the workspace's) supplies the ops and smoke calls when the wheel is its
    bundle's; otherwise the wheel's own record does (see ``specs``); without either, each
    extension is its own row and only loading is checked. Raises InputError (exit 2) when the
    wheel is missing or does not install, belongs to another bundle and carries no specs, or a
    torch version cannot be installed or imported.
    """
    started = time.monotonic()
    if not wheel.is_file() or not zipfile.is_zipfile(wheel):
        raise InputError(f"{wheel}: no such wheel", hint="pass the path of a .whl file (assemble build prints it)")
    specs = resolve_specs(manifest, wheel)
    progress(f"verify specs: {specs.detail}")
    versions = list(dict.fromkeys(torch_versions or (() if pythons else specs.verify_torch)))
    if not versions and not pythons:
        raise InputError("no torch version to verify against",
                         hint="pass --torch X.Y.Z or --python PATH, or set [bundle] verify-torch")
    given = [interpreter_env(python) for python in dict.fromkeys(pythons)]
    envs = [ensure_torch_env(version, progress) for version in versions] + given
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
                progress(f"installing {wheel.name} for {env.python} (--no-deps --target)")
                _install(env, wheel, installed[interpreter])
        sites = [installed[env.python if env.given else None] for env in envs]
        plan = _plan(specs, scan(sites[0]))
        progress(f"verifying on torch {', '.join(env.requested for env in envs)}")
        with ThreadPoolExecutor(max_workers=min(len(envs), available_cpus())) as pool:
            states = list(pool.map(lambda job: _probe(job[1], sites[job[0]], plan, Path(scratch) / f"probe-{job[0]}", timeout), enumerate(envs)))
        diagnose_loads([  # while the wheel is still installed: the failing objects' other imports are read too
            ProbedTorch(state.env["torch"], Path(state.env["torch_lib"]) if state.env.get("torch_lib") else None, site, state.checks)
            for site, state in zip(sites, states, strict=True) if state.env is not None
        ], plan, [dep.name for dep in specs.deps], progress)
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
        seconds=time.monotonic() - started, specs=specs.to_json(),
    )


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
        return [{"path": f.path, "module": f.module, "cuda_libs": list(f.cuda_libs), "defines_ops": f.defines_ops} for f in items]

    rows = [
        {
            "name": dep.name, "extensions": extensions(owned[dep.name]), "ops": list(dep.ops),
            "smoke": dep.smoke, "requires_cuda": dep.requires_cuda, "absent": _absent(dep, owned[dep.name], specs.recorded),
        }
        for dep in specs.deps
    ]
    rows += [
        {"name": file.path, "extensions": extensions([file]), "ops": [], "smoke": None, "requires_cuda": False, "absent": None}
        for file in orphans
    ]
    return rows


def _absent(dep: DepSpec, owned: list[ExtensionFile], recorded: dict[str, set[str]] | None) -> str | None:
    """Why a dependency that builds extensions counts as missing from the wheel (a merge that
    dropped it must not pass as "nothing to check"), or None."""
    if owned or not dep.builds_extensions:
        return None
    if recorded is not None:
        return f"no extension of {dep.name} in the wheel (its assembler.json lists {len(recorded.get(dep.name, ()))} files, no shared object)"
    rules = ", ".join(f"{pattern} -> {dest or '.'}" for pattern, dest in dep.install.items()) or "no [install] rules"
    return f"no extension of {dep.name} in the wheel ({rules})"


def _probe(env: TorchEnv, site: Path, plan: list[dict[str, Any]], scratch: Path, timeout: float) -> _ProbeState:
    """Run the probe until every row is settled, restarting after a row that killed it."""
    state = _ProbeState()
    scratch.mkdir()
    attempt = 0
    while True:
        remaining = [row for row in plan if row["name"] not in state.done]
        if not remaining and state.env is not None:
            return state
        attempt += 1
        plan_file = scratch / f"plan-{attempt}.json"  # scratch: this probe's own
        out_file = scratch / f"out-{attempt}.jsonl"
        # A restart re-loads what the earlier probes loaded, so a dependency's ops that another
        # dependency's extension registers are still there, as in one uninterrupted process.
        preload = [ext for row in plan if row["name"] in state.done - state.crashed for ext in row["extensions"]]
        plan_file.write_text(json.dumps({"site": str(site), "deps": remaining, "preload": preload}))
        command = [str(env.python), "-I", str(PROBE), str(plan_file), str(out_file)]  # -I: no PYTHONPATH, no user site
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
            died = None if result.returncode == 0 else _death(result.returncode, result.stderr)
        except subprocess.TimeoutExpired:
            died = f"timed out after {timeout:.0f} s"
        step = _read_events(out_file, state, site)
        if died is None:
            if state.env is None or any(row["name"] not in state.done for row in remaining):
                raise InputError(f"the verify probe for torch {env.requested} stopped early", hint=result.stderr.strip()[-500:] or None)
            return state
        dep, doing = step
        if dep is None:
            hint = f"check that torch imports in {env.python}" if env.given else f"delete {env.path} and re-run"
            raise InputError(f"torch {env.requested} ({env.path}) failed while {doing}: {died}", hint=hint)
        state.checks.setdefault(dep, []).append(Check("process", doing, Status.FAIL, f"the probe {died} while {doing}"))
        state.done.add(dep)
        state.crashed.add(dep)


def _read_events(out_file: Path, state: _ProbeState, site: Path) -> tuple[str | None, str]:
    """Fold the probe's events into ``state``; returns the step announced last."""
    step: tuple[str | None, str] = (None, "starting Python")
    if not out_file.is_file():
        return step
    for line in out_file.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # the last line of a killed probe may be cut short
            continue
        kind = event["event"]
        if kind == "start":
            step = (event["dep"], event["step"])
        elif kind == "env":
            state.env = event
        elif kind == "check":
            detail = _readable(event["detail"], site)
            state.checks.setdefault(event["dep"], []).append(Check(event["kind"], event["target"], Status(event["status"]), detail,
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
