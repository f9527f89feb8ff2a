"""`assemble build`: checkout -> toolchain -> per-dependency builds (cached) -> merge -> audit
gate -> (--verify) verify.

The CLI module only parses arguments and prints; everything a test or CI script needs is here:
``run_build`` returns a BuildReport whose ``error`` is what the command exits with.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from assembler.audit.gate import CheckKind, GateVerdict, Verdict, findings, object_verdict, summarize
from assembler.builder import backends, builder, links, memory, scheduler, units
from assembler.builder.artifact_keys import ArtifactStore, digest_texts
from assembler.builder.builder import Outcome
from assembler.builder.evidence import default_artifacts, merge_state_path
from assembler.builder.outcome import BuildOutcome, Event
from assembler.builder.recipe import missing_recipe
from assembler.builder.request import BuildContext, BuildRequest, Toolchain
from assembler.builder.shards import Shard
from assembler.cache import in_use, touch
from assembler.errors import AssembleError, BuildError, CheckFailed, InputError, ToolchainError
from assembler.fsutil import atomic_write
from assembler.git.state import series_digest
from assembler.git.sync import sync_checkouts
from assembler.store import open_store
from assembler.system import available_cpus
from assembler.toolchain import sccache
from assembler.toolchain.cuda import select_cuda
from assembler.toolchain.sccache import CompilerCache
from assembler.toolchain.torchenv import ensure_build_env
from assembler.workspace import Workspace, locked

if TYPE_CHECKING:
    from assembler.verify import VerifyReport
    from assembler.wheel.merge import MergeResult

Note = Callable[[str], None]


@dataclass(frozen=True)
class BuildOptions:
    cuda: str
    torch: str | None = None
    jobs: int = 0  # compiler processes in all; 0: auto, by CPUs and memory (builder.memory.choose_jobs)
    only: tuple[str, ...] = ()
    artifacts: Path | None = None
    output: Path | None = None  # where the merged wheel goes (default <workspace>/dist)
    allow_unstable: tuple[str, ...] = ()
    memory: int | None = None  # bytes; default 80 % of what is available
    verify: bool = False  # run `assemble verify` on [bundle] verify-torch after the gate
    shard: Shard | None = None  # --shard k/N: compile one shard of the one --only dependency (builder.shards)
    partial: bool = False  # with --only: merge, gate (and verify) just those, into a wheel labelled partial
    profile: str | None = None  # --profile NAME: each dependency that defines it built reduced (manifest.model.Profile)

    @property
    def merges(self) -> bool:
        """Whether this build makes a wheel: every build but a plain --only (a CI runner's artifact)."""
        return not self.only or self.partial


@dataclass
class ExtensionVerdict:
    path: str  # inside the wheel
    verdict: GateVerdict  # the checks it fails (UNSTABLE, NON-ABI3), else STABLE or NO-TORCH
    min_torch: str | None
    offending: list[str] = field(default_factory=list)  # symbols that make it fail

    @property
    def ok(self) -> bool:
        """STABLE, or no torch at all (a plain abi3 helper module)."""
        return self.verdict.passes

    def record(self) -> dict[str, Any]:
        """As the merge state keeps it (:meth:`from_record` reads it back)."""
        return {"path": self.path, "verdict": self.verdict.record(), "min_torch": self.min_torch,
                "offending": self.offending}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ExtensionVerdict:
        return cls(str(record["path"]), GateVerdict.from_record(record["verdict"]),
                   None if record["min_torch"] is None else str(record["min_torch"]),
                   [str(s) for s in record["offending"]])

    def as_dict(self) -> dict[str, Any]:
        """The --json form: the verdict as its text (build.schema.json)."""
        return {**self.record(), "verdict": str(self.verdict)}


@dataclass
class DepReport:
    dep: str
    commit: str
    head: str
    key: str
    patches: int
    status: BuildOutcome
    seconds: float
    archs: list[str]
    torch_target: str
    artifact: Path | None
    log: Path | None
    verdict: GateVerdict | None = None  # from the audit of the merged wheel
    min_torch: str | None = None
    extensions: list[ExtensionVerdict] = field(default_factory=list)
    # sccache's requests, hits, misses, problem of this build, or of the build that made a reused artifact ("reused":
    # true); None: built without it
    compiler_cache: dict[str, Any] | None = None
    shared: str | None = None  # the shared artifact store: "downloaded", "uploaded", or what went wrong
    # its cuda-components (their wheels are in its artifact.json)
    cuda_components: list[str] = field(default_factory=list)
    shard: dict[str, Any] | None = None  # --shard: {shard, count, split, units, cost} (builder.shards)
    profile: str | None = None  # the build profile it was built on; None: the full build
    peak_rss: int | None = None  # bytes: its largest compile process in this build (None: nothing compiled)


@dataclass
class BuildReport:
    bundle: str
    cuda: str
    nvcc: str
    cuda_origin: str
    cuda_root: Path
    torch: str
    tools: dict[str, str] = field(default_factory=dict)  # c++, cmake, ninja, scikit-build-core
    artifacts: Path | None = None
    deps: list[DepReport] = field(default_factory=list)
    wheel: Path | None = None
    # a partial wheel's missing dependencies (empty: every one, or no wheel)
    partial: list[str] = field(default_factory=list)
    allowed_unstable: list[str] = field(default_factory=list)
    # a failing compiler cache; the merge's: unshipped files, local work in forks/, ...
    warnings: list[str] = field(default_factory=list)
    # the wheel per dependency and CUDA arch, with deps.toml's budgets (assembler.wheel.size)
    size: dict[str, Any] | None = None
    seconds: float = 0.0
    profile: str | None = None  # --profile: the build profile asked for (dependencies without it built in full)
    jobs: dict[str, Any] | None = None  # what --jobs chose and why (builder.memory.JobsChoice)
    verified: VerifyReport | None = None  # with --verify, once the gate passed
    error: AssembleError | None = None  # what the command exits with: BuildFailed, the gate, a verify FAIL

    def as_dict(self) -> dict[str, Any]:
        """The --json summary: every field, the verify matrix under "verify" and the error as
        {"message", "hint", "exit_code"} (null on success)."""
        data = asdict(replace(self, verified=None, error=None))
        for dep, shown in zip(self.deps, data["deps"], strict=True):  # verdicts as their text
            shown["verdict"] = None if dep.verdict is None else str(dep.verdict)
            shown["extensions"] = [item.as_dict() for item in dep.extensions]
        data["verify"] = self.verified.to_json() if self.verified is not None else None
        data["error"] = None if self.error is None else self.error.to_json()
        summary: dict[str, Any] = json.loads(json.dumps(data, default=str))
        # "name", as in every command; "dep" kept
        summary["deps"] = [{"name": dep["dep"], **dep} for dep in summary["deps"]]
        return summary


def compiler_cache(workspace: Workspace) -> CompilerCache:
    """sccache per [cache] and ASSEMBLE_SCCACHE; workspace and assembler cache are its base
    directories, so another workspace or runner hits what this one stored."""
    from assembler.cache import cache_root

    settings = workspace.manifest.cache
    root = cache_root()
    return sccache.configure(settings.compiler, settings.remote, root / "sccache", (workspace.root, root),
                             workspace.state_dir / "logs",
                             roots=sccache.path_roots(workspace.root, workspace.state_dir, root))


def resolve_toolchain(workspace: Workspace, options: BuildOptions, note: Note) -> Toolchain:
    torch = options.torch or workspace.manifest.bundle.torch
    if torch is None:
        raise InputError("deps.toml: [bundle] torch is not set, so there is no torch to build against",
                         hint='set torch = "2.13.0" in [bundle] of deps.toml, or pass --torch')
    cuda = select_cuda(options.cuda, progress=note)
    env = ensure_build_env(torch, progress=note)
    if env.torch_cuda is not None and env.torch_cuda.split(".")[0] != options.cuda.split(".")[0]:
        raise ToolchainError(
            f"torch {env.torch} is built for CUDA {env.torch_cuda}, which cannot load code built for CUDA "
            f"{options.cuda}",
            hint=f"pick a torch built for CUDA {options.cuda.split('.')[0]}.x or another --cuda",
        )
    return Toolchain(cuda=cuda, env=env, cxx=builder.host_compiler_version(dict(os.environ)))


def run_build(
    workspace: Workspace, options: BuildOptions, note: Note = lambda _: None, on_event: Event = lambda *_: None,
) -> BuildReport:
    """All of `assemble build`, under the workspace lock: build the artifacts; unless --only,
    merge and gate them; with --verify, verify the wheel. What fails after the arguments were
    accepted (a dependency that did not build, the gate, a verify FAIL) does not raise: it is
    the report's ``error``, which the caller raises once it has shown the report."""
    if options.partial and not options.only:
        raise InputError("--partial needs --only: it makes a wheel of the dependencies named there",
                         hint="assemble build --only DEP --partial (a build of every dependency is the release wheel)")
    if options.verify:
        if not options.merges:
            raise InputError("--verify needs the merged wheel, and --only builds artifacts without merging",
                             hint="add --partial to merge, gate and verify just those (a wheel labelled partial), "
                                  "or verify after `assemble merge` with `assemble verify WHEEL`")
        if not workspace.manifest.bundle.verify_torch:
            raise InputError("deps.toml: [bundle] verify-torch is not set, so --verify has no torch to verify on",
                             hint='set verify-torch = ["2.13.0", "2.14.1"] in [bundle] of deps.toml')
    full = workspace.manifest
    workspace.manifest = full.with_profile(options.profile)  # an unknown profile: ManifestError, before any work
    try:
        return _run_build(workspace, options, note, on_event)
    finally:
        workspace.manifest = full


def _run_build(workspace: Workspace, options: BuildOptions, note: Note, on_event: Event) -> BuildReport:
    """run_build on the manifest as the build's profile makes it."""
    with workspace.lock():
        try:
            report = build_artifacts(workspace, options, note, on_event)
        except BuildFailed as failure:
            failure.report.error = failure
            return failure.report
        if not options.merges:
            return report
        report.error = merge_and_gate(workspace, options, report, note)
        if report.error is None and options.verify and report.wheel is not None:
            from assembler.verify import Status, verify_wheel

            report.verified = verify_wheel(workspace.manifest, report.wheel, progress=note)
            if report.verified.failed:
                failed = sorted({cell.dep for cell in report.verified.cells.values() if cell.status is Status.FAIL})
                report.error = CheckFailed(
                    f"verify: {report.verified.count(Status.FAIL)} FAIL ({', '.join(failed)}) on torch "
                    f"{', '.join(info.requested for info in report.verified.torch)}",
                    hint=f"the verify table names each failure; rerun with `assemble verify {report.wheel}`",
                )
        if options.profile is None:  # a reduced build proves nothing about the recipe at the pin
            publish_evidence(workspace, report)
    return report


def publish_evidence(workspace: Workspace, report: BuildReport) -> None:
    """Each gated dependency's verdicts (and verify results) as the evidence about its pin,
    series and recipe that `assemble patches` reads in every workspace (builder.evidence)."""
    from assembler.builder.evidence import publish_build

    manifest = workspace.manifest
    for dep in report.deps:
        if dep.verdict is None or dep.artifact is None or dep.dep not in manifest.deps:
            continue
        passed: list[str] = []
        failed: list[str] = []
        if report.verified is not None:
            from assembler.verify import Status

            for (name, torch), cell in report.verified.cells.items():
                if name == dep.dep and cell.status in (Status.PASS, Status.FAIL):
                    (passed if cell.status is Status.PASS else failed).append(torch)
        publish_build(workspace, manifest.deps[dep.dep], dep.artifact, [item.verdict for item in dep.extensions],
                      passed, failed)


def build_artifacts(
    workspace: Workspace, options: BuildOptions, note: Note = lambda _: None, on_event: Event = lambda *_: None,
) -> BuildReport:
    """Check out, then build (or reuse) the artifact of every selected dependency. Raises
    BuildError after all builds ran when any failed, naming the unstable includes if that is why."""
    started = time.monotonic()
    manifest = workspace.manifest
    deps = manifest.select(list(options.only))
    for dep in deps:  # before any checkout or toolchain: a recipe-less dependency has nothing to build
        recipe_error = missing_recipe(manifest.path, dep)
        if recipe_error is not None:
            raise recipe_error
    if options.shard is not None:
        _check_shard_options(workspace, options)
    for name in options.allow_unstable:
        manifest.select([name])  # unknown names fail here, with a suggestion
    with workspace.lock(), contextlib.ExitStack() as held:
        checkouts = sync_checkouts(workspace, deps, lambda dep, step: note(f"{dep}: {step}"))
        for dep in deps:  # refused before any toolchain or backend runs, as check and --plan refuse them
            if backends.for_dep(dep).from_extensions:  # a link out of the checkout, then a recipe path (deps.toml line)
                units.translation_units(workspace, dep, checkouts[dep.name].path)
            else:  # its own build decides what it reads: a link out of the checkout
                links.refuse_escaping(workspace.root, dep.name, checkouts[dep.name].path)
        toolchain = resolve_toolchain(workspace, options, note)
        held.enter_context(in_use(toolchain.env.path))  # no `assemble cache prune` removes it mid-build
        cuda = toolchain.cuda
        note(f"CUDA {cuda.version} (nvcc {cuda.release}, {cuda.origin}: {cuda.root}); torch {toolchain.env.torch}; "
             f"{toolchain.cxx}")
        ctx = BuildContext(
            state_dir=workspace.state_dir,
            artifacts=(options.artifacts or default_artifacts(workspace)).resolve(),
            store=ArtifactStore(),
            toolchain=toolchain,
            bundle=manifest.bundle,
            compiler_cache=compiler_cache(workspace),
            shared=open_store(manifest.cache.artifacts, manifest.cache.s3_endpoint),
        )
        requests = [builder.prepare(ctx, dep, checkouts[dep.name].path, series_digest(dep)) for dep in deps]
        outcomes: dict[str, Outcome] = {}
        pending = []
        for request in requests:
            on_event(request.dep.name, "checking", None, None)  # one progress row per dep, in manifest order
        for request in requests:
            reused = builder.reuse(ctx, request)
            if reused is None:
                pending.append(request)
            else:
                outcomes[request.dep.name] = reused
                on_event(request.dep.name, BuildOutcome.CACHED, None, None)
        choice = memory.choose_jobs(options.jobs, [(r.dep.name, r.cuda) for r in pending],
                                    memory.recorded_peaks(workspace.root),
                                    available_cpus(), memory.available_memory())
        note(f"jobs: {choice.jobs} ({choice.reason})")
        jobs = choice.jobs
        budget = options.memory or scheduler.default_memory_budget()
        shard_of: dict[str, dict[str, Any]] = {}
        if options.shard is not None:
            for request in pending:
                outcome, shard_of[request.dep.name] = _compile_shard(workspace, ctx, request, options.shard, jobs,
                                                                     on_event)
                outcomes[request.dep.name] = outcome
            pending = []
        per_job = {name: item.bytes for name, item in choice.per_job.items()}
        for outcome in scheduler.run_builds(ctx, pending, jobs, budget, on_event, per_job):
            outcomes[outcome.dep] = outcome
        memory.record_peaks(workspace.root, {o.dep: o.peak_rss for o in outcomes.values() if o.peak_rss})
    report = BuildReport(
        bundle=manifest.bundle.name, artifacts=ctx.artifacts, cuda=toolchain.cuda.version, nvcc=toolchain.cuda.release,
        cuda_origin=toolchain.cuda.origin,
        cuda_root=toolchain.cuda.root, torch=toolchain.env.torch,
        # the exact build tools (pinned by data/build-constraints.txt) and what installed them
        tools={**dict(toolchain.versions(with_cuda=False)), **toolchain.env.tool_versions(),
               "installer": toolchain.env.installer or "unknown"},
        profile=options.profile, jobs=choice.to_json(),
    )
    for request in requests:
        outcome = outcomes[request.dep.name]
        built_in = outcome.record.build_seconds if outcome.record is not None else 0.0
        report.deps.append(DepReport(
            dep=request.dep.name, commit=request.dep.commit, head=request.head, key=request.key,
            patches=len(request.dep.series),
            status=outcome.status, seconds=outcome.seconds if outcome.status != BuildOutcome.CACHED else built_in,
            archs=list(request.archs), torch_target=request.dep.torch_target, artifact=outcome.artifact,
            log=outcome.log,
            compiler_cache=outcome.compiler_cache, shared=outcome.shared, shard=shard_of.get(request.dep.name),
            cuda_components=list(request.dep.cuda_components) if request.cuda else [],
            profile=request.dep.profile, peak_rss=outcome.peak_rss,
        ))
    report.warnings.extend(  # a crashed or failing sccache: the compiles ran, uncached
        f"{dep.dep}: the compiler cache failed: {dep.compiler_cache['problem']}" for dep in report.deps
        if dep.status != BuildOutcome.CACHED and dep.compiler_cache and dep.compiler_cache.get("problem"))
    report.seconds = time.monotonic() - started
    failed = [outcomes[r.dep.name] for r in requests if outcomes[r.dep.name].status == BuildOutcome.FAILED]
    if failed:
        raise BuildFailed(report, failed)
    return report


def _check_shard_options(workspace: Workspace, options: BuildOptions) -> None:
    """--shard splits one dependency, and only the compiler cache carries a shard's work on."""
    if len(options.only) != 1:
        raise InputError("--shard compiles a share of one dependency: name it with exactly one --only DEP",
                         hint="e.g. assemble build --only DEP --shard 1/4, as the shard entries of `assemble plan "
                              "--matrix --shards 4` say")
    if not compiler_cache(workspace).enabled:
        raise InputError("--shard compiles into the compiler cache for the final build to find, and the compiler "
                         "cache is off",
                         hint='set [cache] compiler = "sccache" and remote = "redis://HOST:PORT/0" (shared by the '
                              'runners), '
                         "and leave ASSEMBLE_SCCACHE unset or 1")


def _compile_shard(workspace: Workspace, ctx: BuildContext, request: BuildRequest, shard: Shard, jobs: int,
                   on_event: Event) -> tuple[Outcome, dict[str, Any]]:
    """Compile the share ``shard`` of ``request``'s compile jobs (builder.shards) into the cache."""
    from assembler.builder import shards
    from assembler.builder.planner import plan_dep

    dep = request.dep
    plan = plan_dep(workspace, dep, request.checkout)
    if plan.error is not None:
        raise plan.error
    extensions = backends.for_dep(dep).extension_modules(dep)
    split = shards.split(shards.compile_jobs(plan, extensions, shards.unit_times(workspace.state_dir, dep.name)),
                         shard.count)
    mine = split[shard.index - 1]
    on_event(dep.name, "configuring", None, None)
    outcome = builder.build(ctx, request, jobs, scheduler.LineEvents(dep.name, on_event),
                            shard=frozenset(job.unit for job in mine))
    on_event(dep.name, outcome.status, None, None)
    return outcome, {"shard": shard.index, "count": shard.count, "split": shards.split_digest(split),
                     "units": [job.unit for job in mine], "cost": round(sum(job.cost for job in mine), 1)}


class BuildFailed(BuildError):
    """One or more dependencies did not build; carries the report and each failure's details."""

    def __init__(self, report: BuildReport, failed: list[Outcome]) -> None:
        unstable = [item.describe(o.dep) for o in failed for item in o.unstable]
        if unstable:
            message = "; ".join(unstable)
            guard = next((item.guard for o in failed for item in o.unstable if item.guard), None)
            hint = (f"torch: {guard.rstrip('.')}; " if guard else "") + \
                "include only torch/csrc/stable/ and torch/headeronly/ headers (or raise the dep's torch-target)"
        else:
            message = "; ".join(o.error or f"{o.dep} failed to build" for o in failed)
            hint = "full log: " + ", ".join(str(o.log) for o in failed if o.log)
        super().__init__(message, hint=hint)
        self.report = report
        self.failed = failed


def wheel_dir(workspace: Workspace, output: Path | None, partial: bool) -> Path:
    """Where the merged wheel goes: ``output``, else <workspace>/dist, and a partial wheel's
    <workspace>/dist/partial, so no `dist/*.whl` of a release job ever picks one up."""
    if output is not None:
        return output.resolve()
    return (workspace.root / "dist" / ("partial" if partial else "")).resolve()


@locked
def merge_artifacts(workspace: Workspace, dirs: Sequence[Path], out: Path | None, cuda: str, exclude: Sequence[str],
                    jobs: int = 0, partial: bool = False) -> MergeResult:
    """`assemble merge`: artifacts (from CI runners) into one wheel in ``out`` (default
    <workspace>/dist, a partial wheel's dist/partial), under the workspace lock since dist/ is the build's too."""
    from assembler.wheel.merge import merge_wheel

    output = wheel_dir(workspace, out, partial)
    return merge_wheel(workspace.manifest, list(dirs), output, cuda, exclude=tuple(exclude), jobs=jobs, partial=partial)


def merge_and_gate(workspace: Workspace, options: BuildOptions, report: BuildReport,
                   note: Note = lambda _: None) -> CheckFailed | None:
    """Merge the artifacts into one wheel, audit it, and fill the report's verdicts. Returns the
    gate's error (the caller prints the summary first, then raises it) or None.

    When nothing that goes into the wheel changed since the last merge (artifact keys, bundle,
    install maps, CUDA, SOURCE_DATE_EPOCH, the merge and audit code) and the wheel is still there
    untouched, the merge and the audit are not redone: that is most of a no-op build. What the
    last merge and audit said is read only from the user's cache (``merge_state_path``), where
    this machine wrote it: a record in the workspace could be committed with any verdicts."""
    manifest = workspace.manifest
    output = wheel_dir(workspace, options.output, options.partial)
    key = _merge_key(workspace, report, options.cuda, output)
    state_path = merge_state_path(workspace)
    last = _last_merge(state_path, key)
    if last is not None:
        report.wheel, audits, merged, report.partial = last
        report.warnings.extend(merged)
        touch(state_path.parent)  # the workspace's records: used now (`cache prune --older-than`)
    else:
        from assembler.wheel.merge import merge_wheel

        result = merge_wheel(manifest, [dep.artifact for dep in report.deps if dep.artifact is not None], output,
                             options.cuda,
                             partial=options.partial)
        report.wheel, report.partial = result.wheel, list(result.missing)
        report.warnings.extend(result.warnings)
        note(f"merged {result.wheel.name}; auditing")
        audits = _audit_wheel(result.wheel, result.files, _build_torch_lib(workspace, options),
                              _toolkit_lib_dirs(report.cuda_root))
        with contextlib.suppress(OSError):  # only a shortcut for the next build: a read-only cache keeps none
            atomic_write(state_path, json.dumps({
                "key": key, "workspace": str(workspace.root), "wheel": str(result.wheel), "stat": _stat(result.wheel),
                "warnings": list(result.warnings), "partial": list(result.missing),
                "audit": {dep: [item.record() for item in items] for dep, items in audits.items()},
            }, indent=2, sort_keys=True) + "\n")
    error = _gate(report, audits, options.allow_unstable)
    if report.wheel is not None:  # over a deps.toml size budget: exit 1 with the breakdown
        from assembler.wheel.size import size_gate

        report.size, size_error = size_gate(report.wheel, manifest)
        error = error or size_error
    if error is not None and report.wheel is not None:
        report.wheel.unlink(missing_ok=True)  # a release job must not find a gated wheel in dist/
        report.wheel = None
    return error


def _merge_key(workspace: Workspace, report: BuildReport, cuda: str, output: Path) -> str:
    manifest = workspace.manifest
    code = sorted(
        (path.name, path.read_bytes())
        for package in ("wheel", "audit")
        for path in (Path(__file__).resolve().parent.parent / package).glob("*.py")
    )
    payload = {
        "artifacts": {dep.dep: dep.key for dep in report.deps if dep.artifact},
        "bundle": manifest.bundle._asdict(),
        "install": {name: dep.install for name, dep in manifest.deps.items()},
        "targets": {name: dep.torch_target for name, dep in manifest.deps.items()},
        # in the wheel's SBOM
        "sbom": {name: [dep.source, dep.upstream, dep.track] for name, dep in manifest.deps.items()},
        "cuda": cuda,
        "epoch": os.environ.get("SOURCE_DATE_EPOCH"),
        "output": str(output),
    }
    return digest_texts(json.dumps(payload, sort_keys=True, default=str), *(name + "\0" for name, _ in code),
                        *(data for _, data in code))


def _last_merge(state_path: Path, key: str) -> tuple[Path, dict[str, list[ExtensionVerdict]], list[str],
                                                     list[str]] | None:
    """The wheel, audit and warnings of the last merge when its key is ``key`` and the wheel is
    still there untouched; None otherwise (then: merge again), also for a state that does not parse."""
    try:
        state = json.loads(state_path.read_text())
        if state["key"] != key or not _same_file(Path(state["wheel"]), state["stat"]):
            return None
        audits = {dep: [ExtensionVerdict.from_record(item) for item in items] for dep, items in state["audit"].items()}
        return (Path(state["wheel"]), audits, [str(warning) for warning in state["warnings"]],
                [str(name) for name in state.get("partial", [])])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _stat(path: Path) -> list[int]:
    """What tells the merged wheel from any other file put at its path since: its inode and
    device, size and mtime, and ctime, which no one can set (a file unpacked or copied there
    later has a new one, whatever mtime it claims)."""
    info = os.stat(path, follow_symlinks=False)
    return [info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev, info.st_ctime_ns]


def _same_file(path: Path, recorded: list[int]) -> bool:
    return path.is_file() and not path.is_symlink() and _stat(path) == list(recorded)


def _build_torch_lib(workspace: Workspace, options: BuildOptions) -> Path | None:
    """torch/lib of the build environment: the gate resolves each object's torch symbols against
    the libraries it was built against (over the shipped table for the CUDA ones a CPU torch lacks)."""
    torch = options.torch or workspace.manifest.bundle.torch
    return ensure_build_env(torch).torch_dir / "lib" if torch else None


def _toolkit_lib_dirs(root: Path) -> tuple[Path, ...]:
    """Where the build's CUDA toolkit keeps its runtime libraries (libcudart.so.13, components):
    the audit resolves an extension's CUDA imports there, as the loader will in the user's env."""
    return tuple(d for d in (root / "lib", root / "lib64", root / "targets" / "x86_64-linux" / "lib") if d.is_dir())


def _audit_wheel(wheel: Path, files: dict[str, tuple[str, ...]], torch_lib: Path | None = None,
                 library_dirs: tuple[Path, ...] = ()) -> dict[str, list[ExtensionVerdict]]:
    """The audit's verdict on every shared object of the wheel, grouped by the dependency that
    shipped it (the merge says which files each one placed)."""
    from assembler.audit import audit_paths

    [report] = audit_paths([wheel], torch_lib=torch_lib, library_dirs=library_dirs)
    found = [finding for finding in findings(report, CheckKind.ALL) if finding.member is not None]
    owner = {path: dep for dep, paths in files.items() for path in paths}
    verdicts: dict[str, list[ExtensionVerdict]] = {dep: [] for dep in files}
    for elf in report.extensions:
        offending = [symbol for finding in found if finding.member == elf.path for symbol in finding.offending]
        verdicts.setdefault(owner.get(elf.path, "(unknown)"), []).append(
            ExtensionVerdict(elf.path, object_verdict(elf, found), elf.min_torch, offending))
    objects = {elf.path for elf in report.extensions}
    for finding in found:  # a finding about a member that is no object (UNSAFE-PATH): gated all the same
        if finding.member not in objects:
            verdicts.setdefault(owner.get(finding.member or "", "(unknown)"), []).append(
                ExtensionVerdict(finding.member or report.path, GateVerdict.of(finding.verdict), None,
                                 list(finding.offending)))
    return verdicts


def _gate(report: BuildReport, audits: dict[str, list[ExtensionVerdict]],
          allowed: tuple[str, ...]) -> CheckFailed | None:
    """Fill each dependency's verdict; the gate fails on any extension that is not STABLE,
    unless its dependency is in --allow-unstable (then the exception is recorded)."""
    failures: list[str] = []
    for dep in report.deps:
        extensions = audits.get(dep.dep, [])
        dep.extensions = list(extensions)
        bad = [item for item in extensions if not item.ok]
        # the newer of what the symbols need (the audit) and what the headers targeted
        dep.min_torch = max([dep.torch_target, *(item.min_torch for item in extensions if item.min_torch)], key=Version)
        dep.verdict = summarize([item.verdict for item in extensions], allow=dep.dep in allowed)
        if bad and dep.dep in allowed:
            report.allowed_unstable.append(dep.dep)
        elif bad:
            failures.extend(
                f"{item.path} is {item.verdict}" + (f": {', '.join(item.offending[:8])}" if item.offending else "")
                + (f" (+{len(item.offending) - 8} more)" if len(item.offending) > 8 else "")
                for item in bad
            )
    if not failures:
        return None
    names = [dep.dep for dep in report.deps if any(not item.ok for item in audits.get(dep.dep, []))
             and dep.dep not in allowed]
    verdicts = {verdict for dep in report.deps if dep.dep in names for item in audits.get(dep.dep, []) if not item.ok
                for verdict in item.verdict.verdicts}
    fix = ("link the library the finding names, or build the unit that defines each symbol into the extension (it "
           "cannot load as it is)"
           if verdicts == {Verdict.UNRESOLVED} else f"port {', '.join(names)} to the Stable ABI")
    return CheckFailed("audit gate: " + "; ".join(failures),
                       hint=f"{fix}, or ship it anyway with --allow-unstable {names[0]}")
