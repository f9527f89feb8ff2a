"""`assemble build`: checkout -> toolchain -> per-dependency builds (cached) -> merge -> audit gate.

The CLI module only parses arguments and prints; everything a test or CI script needs is here
and returns a BuildReport.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from assembler.build import builder, scheduler
from assembler.build.builder import BuildContext, Outcome, Toolchain
from assembler.build.cache import ArtifactStore
from assembler.errors import BuildError, CheckFailed, InputError, ToolchainError
from assembler.git.state import CheckoutResult, CheckoutState, is_up_to_date, series_digest
from assembler.manifest import Dependency
from assembler.toolchain.cuda import select_cuda
from assembler.toolchain.torchenv import ensure_build_env
from assembler.workspace import Workspace

Note = Callable[[str], None]
Event = Callable[[str, str, int | None, int | None], None]


@dataclass(frozen=True)
class BuildOptions:
    cuda: str
    torch: str | None = None
    jobs: int = 0  # 0: one per CPU
    only: tuple[str, ...] = ()
    artifacts: Path | None = None
    output: Path | None = None  # where the merged wheel goes (default <workspace>/dist)
    allow_unstable: tuple[str, ...] = ()
    memory: int | None = None  # bytes; default 80 % of what is available


@dataclass
class DepReport:
    dep: str
    commit: str
    head: str
    patches: int
    status: str  # cached, built, failed
    seconds: float
    archs: list[str]
    torch_target: str
    artifact: Path | None
    log: Path | None
    verdict: str | None = None  # from the audit of the merged wheel
    min_torch: str | None = None
    extensions: list[dict] = field(default_factory=list)


@dataclass
class BuildReport:
    bundle: str
    cuda: str
    nvcc: str
    cuda_origin: str
    cuda_root: Path
    torch: str
    artifacts: Path | None = None
    deps: list[DepReport] = field(default_factory=list)
    wheel: Path | None = None
    allowed_unstable: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        data = asdict(self)
        return json.loads(json.dumps(data, default=str))


def default_artifacts(workspace: Workspace) -> Path:
    return workspace.state_dir / "artifacts"


def checkout_all(workspace: Workspace, deps: list[Dependency], note: Note) -> dict[str, CheckoutResult]:
    """forks/<dep> for each dependency, touching git only for those that are not up to date."""
    results: dict[str, CheckoutResult] = {}
    for dep in deps:
        path = workspace.fork_path(dep)
        state = CheckoutState.load(path) if path.exists() else None
        if state is not None and is_up_to_date(state, dep, series_digest(dep)):
            results[dep.name] = CheckoutResult.unchanged(dep, path, state)
            continue
        from assembler.git.checkout import checkout  # gitpython only when there is work

        note(f"checkout {dep.name}")
        results[dep.name] = checkout(workspace, dep)
    return results


def resolve_toolchain(workspace: Workspace, options: BuildOptions, note: Note) -> Toolchain:
    torch = options.torch or workspace.manifest.bundle.torch
    if torch is None:
        raise InputError("no torch version to build against", hint='set torch = "2.13.0" in [bundle] or pass --torch')
    cuda = select_cuda(options.cuda, progress=note)
    env = ensure_build_env(torch, progress=note)
    if env.torch_cuda is not None and env.torch_cuda.split(".")[0] != options.cuda.split(".")[0]:
        raise ToolchainError(
            f"torch {env.torch} is built for CUDA {env.torch_cuda}, which cannot load code built for CUDA {options.cuda}",
            hint=f"pick a torch built for CUDA {options.cuda.split('.')[0]}.x or another --cuda",
        )
    return Toolchain(cuda=cuda, env=env, cxx=builder.host_compiler_version(dict(os.environ)))


def build_artifacts(
    workspace: Workspace, options: BuildOptions, note: Note = lambda _: None, on_event: Event = lambda *_: None,
) -> BuildReport:
    """Check out, then build (or reuse) the artifact of every selected dependency. Raises
    BuildError after all builds ran when any failed, naming the unstable includes if that is why."""
    started = time.monotonic()
    manifest = workspace.manifest
    deps = manifest.select(list(options.only))
    for name in options.allow_unstable:
        manifest.select([name])  # unknown names fail here, with a suggestion
    with workspace.lock():
        checkouts = checkout_all(workspace, deps, note)
        toolchain = resolve_toolchain(workspace, options, note)
        ctx = BuildContext(
            state_dir=workspace.state_dir,
            artifacts=(options.artifacts or default_artifacts(workspace)).resolve(),
            store=ArtifactStore(),
            toolchain=toolchain,
            bundle=manifest.bundle,
        )
        requests = [builder.prepare(ctx, dep, checkouts[dep.name].path, series_digest(dep)) for dep in deps]
        outcomes: dict[str, Outcome] = {}
        pending = []
        for request in requests:
            reused = builder.reuse(ctx, request)
            if reused is None:
                pending.append(request)
            else:
                outcomes[request.dep.name] = reused
                on_event(request.dep.name, "cached", None, None)
        jobs = options.jobs or os.cpu_count() or 1
        memory = options.memory or scheduler.default_memory_budget()
        for outcome in scheduler.run_builds(ctx, pending, jobs, memory, on_event):
            outcomes[outcome.dep] = outcome
    report = BuildReport(
        bundle=manifest.bundle.name, artifacts=ctx.artifacts, cuda=toolchain.cuda.version, nvcc=toolchain.cuda.release, cuda_origin=toolchain.cuda.origin,
        cuda_root=toolchain.cuda.root, torch=toolchain.env.torch,
    )
    for request in requests:
        outcome = outcomes[request.dep.name]
        report.deps.append(DepReport(
            dep=request.dep.name, commit=request.dep.commit, head=request.head, patches=len(request.dep.series),
            status=outcome.status,
            seconds=outcome.seconds if outcome.status != "cached" else float(outcome.record.get("build_seconds", 0.0)),
            archs=list(request.archs), torch_target=request.dep.torch_target, artifact=outcome.artifact, log=outcome.log,
        ))
    report.seconds = time.monotonic() - started
    failed = [outcomes[r.dep.name] for r in requests if outcomes[r.dep.name].status == "failed"]
    if failed:
        raise BuildFailed(report, failed)
    return report


class BuildFailed(BuildError):
    """One or more dependencies did not build; carries the report and each failure's details."""

    def __init__(self, report: BuildReport, failed: list[Outcome]) -> None:
        unstable = [item.describe(o.dep) for o in failed for item in o.unstable]
        if unstable:
            message = "; ".join(unstable)
            hint = "include only torch/csrc/stable/ and torch/headeronly/ headers (or raise the dep's torch-target)"
        else:
            message = f"{', '.join(o.dep for o in failed)} failed to build"
            hint = "full log: " + ", ".join(str(o.log) for o in failed if o.log)
        super().__init__(message, hint=hint)
        self.report = report
        self.failed = failed


def merge_and_gate(workspace: Workspace, options: BuildOptions, report: BuildReport, note: Note = lambda _: None) -> CheckFailed | None:
    """Merge the artifacts into one wheel, audit it, and fill the report's verdicts. Returns the
    gate's error (the caller prints the summary first, then raises it) or None."""
    from assembler.wheel import merge_artifacts

    output = (options.output or workspace.root / "dist").resolve()
    artifact_dirs = [dep.artifact for dep in report.deps if dep.artifact is not None]
    report.wheel = merge_artifacts(workspace.manifest, artifact_dirs, output, options.cuda)
    note(f"merged {report.wheel}")
    return _gate(report, options)


def _gate(report: BuildReport, options: BuildOptions) -> CheckFailed | None:
    raise NotImplementedError("audit API pending")
