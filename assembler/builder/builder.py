"""Build one dependency's checkout into an artifact, or reuse the stored artifact of its key.

An artifact is ``<artifacts>/<dep>/`` with ``artifact.json`` (provenance, toolchain, key) and
``files/`` (what the dependency contributes to the wheel, e.g. ``vecadd/_vecadd_C.abi3.so``).
The dependency's backend (``builder.backends``: our CMake helper, its own CMake, its own
setup.py) compiles inside the build environment, against the toolkit selected for ``--cuda``,
with everything else that could leak a different toolchain removed; what is common to every
backend (the key, the store, the record, the packing) is here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assembler.builder import backends, memory
from assembler.builder.artifact_keys import KeyParts, digest_texts, is_materialization, materialize
from assembler.builder.evidence import workspace_records
from assembler.builder.header_diagnostics import (
    UnstableInclude,
    first_failure,
    log_tail,
    torch_include_roots,
    unstable_includes,
)
from assembler.builder.outcome import BuildOutcome
from assembler.builder.request import BuildContext, BuildRequest, Toolchain
from assembler.builder.units import compile_commands_path
from assembler.cache import touch
from assembler.errors import InputError, ToolchainError
from assembler.fsutil import refuse_links, refuse_links_below
from assembler.git.state import CheckoutState
from assembler.manifest import Dependency
from assembler.manifest.model import CUDA
from assembler.toolchain import sccache
from assembler.toolchain.cxx import INSTALL_HINT, cxx_name
from assembler.wheel.artifact import ARTIFACT_JSON, FILES_DIR, Artifact, stored_artifact

if TYPE_CHECKING:
    from assembler.store import SharedStore



def host_compiler_version(environ: dict[str, str]) -> str:
    compiler = cxx_name(environ)
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        raise ToolchainError(f"no working C++ compiler ({compiler})", hint=INSTALL_HINT) from None
    return out.splitlines()[0].strip()


@dataclass
class Outcome:
    dep: str
    status: BuildOutcome
    seconds: float = 0.0
    artifact: Path | None = None
    log: Path | None = None
    error: str | None = None  # what failed when the log tail would not say it
    unstable: list[UnstableInclude] = field(default_factory=list)
    record: Artifact | None = None  # the artifact.json of a cached or built artifact
    compiler_cache: dict[str, Any] | None = None  # sccache's counts for this build (toolchain.sccache.CompileStats)
    shared: str | None = None  # what the shared store did: "downloaded", "uploaded", or why not
    # bytes: the largest compile process of this build (builder.memory); None: nothing compiled
    peak_rss: int | None = None


def source_identity(checkout: Path) -> tuple[str, str | None]:
    """(HEAD, digest of uncommitted edits or None): the build uses the working tree as it is.
    Read through the one git layer (plain processes, no gitpython: this runs on every no-op build)."""
    from assembler.git.status import working_tree

    # GitFailed: git's reason, exit 2, or 9 when the machine refused (a full disk)
    hint = "check that the checkout is a sound git repository, or move it away and run `assemble checkout`"
    head, changes = working_tree(checkout, hint)
    if changes is None:
        return head, None
    diff, untracked = changes
    contents = [(checkout / name).read_bytes() for name in untracked if (checkout / name).is_file()]
    return head, digest_texts(diff, *untracked, *contents)


def prepare(ctx: BuildContext, dep: Dependency, checkout: Path, series_digest: str) -> BuildRequest:
    """Everything about ``dep``'s build that goes into its key, computed without building."""
    head, dirty = source_identity(checkout)
    prepared = backends.for_dep(dep).prepare(ctx, dep, checkout)
    archs = dep_archs(dep, ctx.bundle.cuda_archs, prepared.uses_cuda)
    toolchain = with_components(ctx.toolchain, dep.cuda_components) if prepared.uses_cuda else ctx.toolchain
    ctx = replace(ctx, toolchain=toolchain)
    parts = KeyParts(
        dep=dep.name,
        source=head if dirty is None else f"{head}+{dirty}",
        series=series_digest,
        recipe=prepared.recipe,
        toolchain=ctx.toolchain.versions(prepared.uses_cuda) + prepared.tools
        + ((("cuda-components", " ".join(dep.cuda_components)),) if prepared.uses_cuda and dep.cuda_components else ()),
        torch=ctx.toolchain.env.torch,
        torch_target=dep.torch_target,
        archs=archs,
        flags=("Release", *dep.build.cmake_args),
        python_abi=ctx.bundle.python_abi,
        profile=dep.profile,
    )
    state = CheckoutState.load(checkout)
    return BuildRequest(dep, checkout, head, dirty is not None, state.head if state else None, parts, archs,
                        prepared.uses_cuda,
                        toolchain)


def with_components(toolchain: Toolchain, components: tuple[str, ...]) -> Toolchain:
    """``toolchain`` with its CUDA version's toolkit that has ``components`` (cuda-components):
    the same local toolkit when it has them, else the hermetic one with those wheels. Its
    packages (nvidia-curand 10.4.2.66, ...) are then part of the dependency's artifact key."""
    if not components or toolchain.cuda.components == components:
        return toolchain
    from assembler.toolchain.cuda import select_cuda

    return replace(toolchain, cuda=select_cuda(toolchain.cuda.version, _note, components))


def _note(line: str) -> None:
    """Progress of work before the build's display starts (installing a toolkit's components)."""
    import sys

    print(line, file=sys.stderr)


def dep_archs(dep: Dependency, bundle_archs: tuple[str, ...], uses_cuda: bool) -> tuple[str, ...]:
    """The GPU architectures ``dep`` compiles for: its own cuda-archs, else the bundle's; none
    when nvcc takes no part. A recipe that surely compiles CUDA must have some."""
    archs = (dep.build.cuda_archs if dep.build.cuda_archs is not None else bundle_archs) if uses_cuda else ()
    surely_cuda = (any(ext.language == CUDA for ext in dep.build.extensions)
                   or any(s.endswith(".cu") for s in dep.build.sources))
    if not archs and surely_cuda:  # own CMake may set them itself
        raise InputError(
            f"deps.toml: [deps.{dep.name}.build] compiles CUDA but cuda-archs is set neither there nor in [bundle]",
            hint=f'add cuda-archs = ["9.0"] to [bundle] or [deps.{dep.name}.build]',
        )
    return tuple(archs)


def reuse(ctx: BuildContext, request: BuildRequest) -> Outcome | None:
    """The artifact for the request's key when this machine's store (or the shared store) has it.
    The copy in the workspace (``ctx.artifacts``) is used as it is only while it is provably the
    store's (``cache.is_materialization``: the hard links materialize made), else it is made
    again from the store: its artifact.json proves nothing, as anyone can commit one with the
    right key (keys are deterministic) next to any shared object."""
    target = ctx.artifacts / request.dep.name
    stored = ctx.store.lookup(request.dep.name, request.key)
    if stored is not None and is_materialization(stored, target):  # a no-op build: nothing copied
        return Outcome(request.dep.name, BuildOutcome.CACHED, artifact=target, record=stored_artifact(target),
                       compiler_cache=recorded_compiler_cache(target))
    shared = None
    if stored is None and ctx.shared is not None:  # another runner's, via [cache] artifacts
        staging = ctx.store.root / request.dep.name / f".tmp-{request.key}-{os.getpid()}-shared"
        found, shared = ctx.shared.fetch(request.dep.name, request.key, staging)
        if not found:
            if shared != "not in the shared store":
                _warn(shared)
            return None
        stored = ctx.store.publish(staging, request.dep.name, request.key)
    elif stored is not None and ctx.shared is not None and not _shared_has(ctx.shared, request.dep.name, request.key):
        shared = ctx.shared.upload(stored, request.dep.name, request.key)  # built here before the store was set up
    if stored is None:
        return None
    materialize(stored, target)
    return Outcome(request.dep.name, BuildOutcome.CACHED, artifact=target, record=stored_artifact(target),
                   shared=shared,
                   compiler_cache=recorded_compiler_cache(target))


def _compiler_cache_figures(server: sccache.SccacheServer | None, build_failed: bool = False) -> dict[str, Any] | None:
    """The compiler cache's counts for this build, with ``problem``: what went wrong with it
    (the server died, cache reads or writes failed), or null."""
    if server is None:
        return None
    stats = server.stats()
    return {**stats.to_json(), "problem": server.problem(stats, build_failed)}


def recorded_compiler_cache(artifact: Path) -> dict[str, Any] | None:
    """The compiler cache's counts of the build that made a reused artifact, marked
    ``reused``; None when it was built without one (or by an assembler that did not record them)."""
    try:
        recorded = json.loads((artifact / ARTIFACT_JSON).read_text()).get("compiler_cache")
    except (OSError, ValueError, AttributeError):
        return None
    return {**recorded, "reused": True} if isinstance(recorded, dict) else None


def _shared_has(shared: SharedStore, dep: str, key: str) -> bool:
    """Whether the shared store holds the artifact; unreachable counts as not (the upload that
    follows then says what failed)."""
    from assembler.store import StoreUnavailable

    try:
        return shared.has(dep, key)
    except StoreUnavailable:
        return False


def _warn(note: str) -> None:
    """A shared-store problem that a rebuild repairs: said on stderr, then built."""
    import sys

    print(f"warning: {note}", file=sys.stderr)


def build_log(state_dir: Path, dep: str) -> Path:
    """Where a dependency's last build writes its log (the CLI shows it; CI groups it)."""
    return state_dir / "logs" / f"{dep}.log"


def open_build_log(log_path: Path, flags: int) -> int:
    """``log_path`` (build_log of a state directory, whose parent is the workspace) opened with
    ``flags``, never through a symbolic link (fsutil.open_state_file): a log committed as a
    link to a file of the user is refused, not overwritten."""
    from assembler.fsutil import open_state_file

    return open_state_file(log_path.parents[2], log_path, flags)


def _working_dirs(tree: Path, depth: int = 3) -> list[Path]:
    """The directories of a build tree, shallowest first, to depth ``depth``: where its
    compilers ran, so the relative paths in their diagnostics can be read back."""
    found, level = [], [tree]
    for _ in range(depth):
        level = sorted(child for parent in level if parent.is_dir() for child in parent.iterdir() if child.is_dir())
        found.extend(level)
    return found


def build(ctx: BuildContext, request: BuildRequest, jobs: int, on_line: Callable[[str], None] = lambda _: None,
          shard: frozenset[str] | None = None) -> Outcome:
    """Compile ``request`` with ``jobs`` parallel compiler processes through its backend; never
    raises for a compiler failure (the Outcome says what failed, with the log). With ``shard``
    (``builder.shards``: the units of one shard), compile only those into the compiler cache,
    link nothing, publish nothing, and drop the build tree (status COMPILED)."""
    from assembler.builder.shards import TIMES_DIR, record_unit_times
    from assembler.toolchain.launch import CHECKOUT_ENV, SHARD_ENV, TIMES_ENV

    dep = request.dep
    if request.toolchain is not None:  # its CUDA toolkit, with its cuda-components
        ctx = replace(ctx, toolchain=request.toolchain)
    log_path = build_log(ctx.state_dir, dep.name)
    os.close(open_build_log(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))  # empty, before anything runs
    staging = ctx.store.root / dep.name / f".tmp-{request.key}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    tree = ctx.state_dir / "build" / dep.name
    refuse_links(ctx.state_dir.parent, tree)  # the backend and its tools write there,
    refuse_links_below(tree, 1)  # and below its own directories (project/, cmake-*/, setuptools-*/, wheel/)
    if shard is not None:  # a tree a full build left would skip the compiles; one a shard left holds stand-ins
        shutil.rmtree(tree, ignore_errors=True)
    times = ctx.state_dir / TIMES_DIR / f".{dep.name}.{os.getpid()}.jsonl"
    refuse_links(ctx.state_dir.parent, times.parent)
    times.parent.mkdir(parents=True, exist_ok=True)
    times.unlink(missing_ok=True)
    started = time.monotonic()
    peaks: list[int] = []  # each command's largest process (wait4), for builder.memory
    with sccache.server(ctx.compiler_cache, dep.name) as server:  # one per build: its stats are this dep's
        client = server.client_environment() if server is not None else {}
        if server is not None:  # what our launcher reads (toolchain/launch.py)
            client.update({CHECKOUT_ENV: str(request.checkout), TIMES_ENV: str(times)})
            if shard is not None:
                client[SHARD_ENV] = json.dumps(sorted(shard))
        work = backends.Work(
            tree=ctx.state_dir / "build" / dep.name,
            files=staging / FILES_DIR,
            compdb=compile_commands_path(ctx.state_dir, dep.name),
            run=lambda command, cwd, env: _run_logged(command, cwd, {**env, **client}, log_path, on_line, peaks),
        )
        work.tree.mkdir(parents=True, exist_ok=True)
        with memory.ServerSampler(server.pids if server is not None else ()) as sampler:  # its compilers are not ours
            try:
                backends.for_dep(dep).build(ctx, request, jobs, work)
                failure = None
            except backends.BuildFailure as failed:
                failure = failed
        compiled = _compiler_cache_figures(server, build_failed=failure is not None)
    peak_rss = max([*peaks, sampler.peak], default=0) if compiled is None or compiled.get("misses", 0) > 0 else None
    touch(workspace_records(ctx.state_dir.parent))  # they hold its compile commands: used now (`cache prune`)
    record_unit_times(ctx.state_dir, dep.name, times)
    if shard is not None:
        shutil.rmtree(tree, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
        if failure is None:
            return Outcome(dep.name, BuildOutcome.COMPILED, time.monotonic() - started, log=log_path,
                           compiler_cache=compiled,
                           peak_rss=peak_rss)
    if failure is not None:
        shutil.rmtree(staging, ignore_errors=True)
        seconds = time.monotonic() - started
        if failure.error is not None:
            return Outcome(dep.name, BuildOutcome.FAILED, seconds, log=log_path, error=failure.error,
                           compiler_cache=compiled)
        unstable = unstable_includes(log_path.read_text(errors="replace"), request.checkout,
                                     torch_include_roots(ctx.toolchain.env.torch_dir),
                                     _working_dirs(tree))
        return Outcome(dep.name, BuildOutcome.FAILED, seconds, log=log_path, unstable=unstable, compiler_cache=compiled)
    seconds = time.monotonic() - started
    # Deflated once here, so every merge copies the compressed members instead of recompressing.
    from assembler.wheel.artifact import PACK_NAME, pack_files  # the wheel package only when building

    pack_files(staging / FILES_DIR, staging / PACK_NAME)
    record = artifact_record(ctx, request, seconds)
    record["compiler_cache"] = compiled  # what a reuse of this artifact reports
    (staging / ARTIFACT_JSON).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    stored = ctx.store.publish(staging, dep.name, request.key)
    shared = ctx.shared.upload(stored, dep.name, request.key) if ctx.shared is not None else None
    materialize(stored, ctx.artifacts / dep.name)
    return Outcome(dep.name, BuildOutcome.BUILT, seconds, artifact=ctx.artifacts / dep.name, log=log_path,
                   record=stored_artifact(ctx.artifacts / dep.name), compiler_cache=compiled, shared=shared,
                   peak_rss=peak_rss)


def artifact_record(ctx: BuildContext, request: BuildRequest, seconds: float) -> dict[str, Any]:
    """artifact.json: what the merge step and the wheel's metadata need to say where it came from."""
    tc, dep = request.toolchain or ctx.toolchain, request.dep
    return {
        "dep": dep.name,
        "commit": dep.commit,
        "head": request.head,
        "dirty": request.dirty,
        "series_head": request.series_head,
        "source": dep.source,
        "patches": list(dep.series),
        "series_digest": request.parts.series,
        "key": request.key,
        "backend": request.backend,
        "toolchain": {
            "cuda": tc.cuda.version if request.cuda else None,
            "nvcc": tc.cuda.release if request.cuda else None,
            "cuda_origin": tc.cuda.origin if request.cuda else None,
            # cuda-components and the wheels that provided them (the SBOM lists every toolchain entry)
            "cuda_components": " ".join(dep.cuda_components) if request.cuda and dep.cuda_components else None,
            "cuda_packages": " ".join(f"{name}=={version}" for name, version in tc.cuda.packages.items())
            if request.cuda and tc.cuda.packages else None,
            "cxx": tc.cxx,
            "torch": tc.env.torch,
            "python_abi": ctx.bundle.python_abi,
            "torch_target": dep.torch_target,
            "cmake": tc.env.cmake,
            "ninja": tc.env.ninja,
            "scikit_build_core": tc.env.scikit_build_core,
            **{name: version for name, version in request.parts.toolchain if name == "setuptools"},  # its own setup.py
        },
        "archs": list(request.archs),
        "build_seconds": round(seconds, 2),
        # absent: the full build (wheel.merge reads it)
        **({"profile": dep.profile} if dep.profile is not None else {}),
    }


def _run_logged(command: list[str], cwd: Path, env: dict[str, str], log_path: Path, on_line: Callable[[str], None],
                peaks: list[int] | None = None) -> int:
    """Run ``command`` with its output appended to the log and passed on line by line; its exit
    is collected with wait4, whose ru_maxrss (KiB) is the largest process of its tree (the
    compilers it reaped), appended to ``peaks`` in bytes (builder.memory)."""
    with os.fdopen(open_build_log(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a") as log, subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            on_line(line.rstrip("\n"))
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except ChildProcessError:  # already collected
            return process.wait()
        process.returncode = os.waitstatus_to_exitcode(status)
        if peaks is not None:
            peaks.append(usage.ru_maxrss * 1024)
        return process.returncode


def format_failure(outcome: Outcome, tail_lines: int = 30) -> str:
    """What the user reads for a failed dependency: the unstable includes (with torch's guard
    message) when that is the cause, else the first failing command and its first error, else
    (a log with neither) the tail of the log."""
    if outcome.unstable:
        lines = [item.describe(outcome.dep) for item in outcome.unstable]
        guards = list(dict.fromkeys(item.guard for item in outcome.unstable if item.guard))
        return "\n".join(lines + [f"torch: {guard}" for guard in guards])
    if outcome.log is None:
        return outcome.error or ""
    log = outcome.log.read_text(errors="replace")
    found = first_failure(log)
    if found is None:
        return log_tail(log, tail_lines)
    return "\n".join(found.lines())
