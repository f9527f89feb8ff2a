"""Merge per-dependency artifacts into one wheel: place files per ``[deps.X.install]``, refuse
collisions, write reproducibly, tag from auditwheel.

``[deps.X.install]`` maps globs, relative to the artifact's payload root, to wheel directories;
a matched file keeps its path below the destination (``"vecadd/**" = "pkg/"`` puts
``vecadd/_vecadd_C.abi3.so`` at ``pkg/vecadd/_vecadd_C.abi3.so``). ``*`` and ``?`` stay within
one path component, a ``**`` component spans any number of them. Every matching pattern
installs the file, so one file may be shipped to two places. A dependency without an install
table ships its whole payload at the wheel root. Files no pattern matches are not shipped and
are reported.
"""

from __future__ import annotations

import os
import posixpath
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from assembler.audit.elf import ELF_MAGIC
from assembler.errors import InputError
from assembler.fsutil import remove_stale, temporary_path
from assembler.manifest import Manifest
from assembler.manifest.globs import glob_regex
from assembler.system import available_cpus
from assembler.wheel.artifact import Artifact, PayloadFile, load_artifacts
from assembler.wheel.consistency import check_same_release
from assembler.wheel.metadata import (
    cuda_label,
    dist_name,
    metadata_text,
    provenance_json,
    python_tag,
    record_text,
    wheel_text,
    wheel_version,
)
from assembler.wheel.platform import DEFAULT_EXCLUDES, PlatformVerdict, platform_verdict
from assembler.wheel.sbom import DepEntry, file_hashes, read_patches, sbom_json, sbom_path
from assembler.wheel.writer import ReproducibleZip, Written, resolve_epoch

DEFAULT_INSTALL = {"**": ""}


@dataclass(frozen=True)
class Placement:
    path: str  # inside the wheel
    dep: str
    file: PayloadFile


@dataclass(frozen=True)
class MergeResult:
    wheel: Path
    version: str
    cuda: str
    platform: PlatformVerdict
    provenance: dict[str, dict[str, Any]]  # dep -> commit, patches, key, toolchain, archs
    files: dict[str, tuple[str, ...]]  # dep -> wheel paths it ships
    unshipped: dict[str, tuple[str, ...]]  # dep -> payload paths no install pattern matched
    warnings: tuple[str, ...] = field(default=())
    seconds: float = 0.0
    missing: tuple[str, ...] = ()  # a partial wheel's: the dependencies it lacks (empty: a release wheel)

    @property
    def size(self) -> int:
        return self.wheel.stat().st_size

    def to_json(self) -> dict[str, Any]:
        return {
            "wheel": str(self.wheel), "version": self.version, "cuda": self.cuda,
            "policy": self.platform.policy, "platform": list(self.platform.platforms),
            "platform_cached": self.platform.cached,
            "symbol_policy": self.platform.symbol_policy, "external_libs": list(self.platform.external_libs),
            "size": self.size, "seconds": round(self.seconds, 3),
            "deps": self.provenance,
            "files": {k: list(v) for k, v in self.files.items()},
            "unshipped": {k: list(v) for k, v in self.unshipped.items()},
            "warnings": list(self.warnings),
            "partial": {"deps": sorted(self.provenance), "missing": list(self.missing)} if self.missing else None,
        }


@dataclass(frozen=True)
class InstallRule:
    """One ``[deps.X.install]`` entry: payload files matching the glob go below ``dest``."""

    regex: re.Pattern[str]
    dest: str  # normalised, "" for the wheel root

    def target(self, relpath: str) -> str | None:
        """The wheel path of payload file ``relpath``, or None when the glob does not match it."""
        if not self.regex.fullmatch(relpath):
            return None
        return posixpath.join(self.dest, relpath) if self.dest else relpath

    def source(self, path: str) -> str | None:
        """The payload path this rule would have put at wheel ``path``, or None: the inverse of
        ``target``, for telling which dependency shipped a file of a finished wheel."""
        prefix = f"{self.dest}/" if self.dest else ""
        relpath = path.removeprefix(prefix)
        if not path.startswith(prefix) or not self.regex.fullmatch(relpath):
            return None
        return relpath


def install_rules(install: Mapping[str, str] | None) -> tuple[InstallRule, ...]:
    """A dependency's install rules; without an install table its whole payload goes to the root."""
    return tuple(InstallRule(glob_regex(pattern), _dest(dest)) for pattern,
                 dest in (install or DEFAULT_INSTALL).items())


def place(artifacts: Sequence[Artifact], installs: Mapping[str, Mapping[str, str]],
          dist_info: str) -> tuple[list[Placement], dict[str, tuple[str, ...]]]:
    """Wheel placements sorted by path, and the payload files left out, per dependency."""
    placed: dict[str, Placement] = {}
    unshipped: dict[str, tuple[str, ...]] = {}
    for artifact in artifacts:
        rules = install_rules(installs.get(artifact.dep))
        left = []
        for item in artifact.payload():
            targets = {target for rule in rules if (target := rule.target(item.relpath)) is not None}
            if not targets:
                left.append(item.relpath)
            for target in sorted(targets):
                _claim(placed, Placement(target, artifact.dep, item), dist_info)
        if left:
            unshipped[artifact.dep] = tuple(left)
    return [placed[path] for path in sorted(placed)], unshipped


def _dest(dest: str) -> str:
    normal = posixpath.normpath(dest.strip("/")) if dest.strip("/") else ""
    return "" if normal == "." else normal


def _claim(placed: dict[str, Placement], new: Placement, dist_info: str) -> None:
    top = new.path.split("/")[0]
    if top == dist_info or top.endswith(".dist-info"):
        raise InputError(
            f"deps.{new.dep}.install puts {new.file.relpath} at {new.path}, inside a .dist-info directory",
            hint="the merge writes the wheel's only dist-info; install payload files elsewhere",
        )
    old = placed.get(new.path)
    if old is None:
        placed[new.path] = new
    elif (old.dep, old.file.relpath) != (new.dep, new.file.relpath):
        who = f"both {old.dep} and {new.dep}" if old.dep != new.dep else f"{new.dep} twice"
        raise InputError(
            f"{new.path} is written by {who} ({old.dep}: {old.file.relpath}, {new.dep}: {new.file.relpath})",
            hint=f"change [deps.{new.dep}.install] (or [deps.{old.dep}.install]) so each wheel path has one source",
        )


def check_artifacts(manifest: Manifest, artifacts: Sequence[Artifact], partial: bool = False) -> None:
    """Every dependency has an artifact built from what deps.toml pins now, and nothing else
    (``partial``: the artifacts given are built from what deps.toml pins, some may be missing)."""
    have = {a.dep for a in artifacts}
    for artifact in artifacts:
        dep = manifest.deps.get(artifact.dep)
        rebuild = f"assemble build --only {artifact.dep} --artifacts {artifact.root.parent}"
        if dep is None:
            raise InputError(f"{artifact.root}: artifact for {artifact.dep}, which {manifest.path} does not list",
                             hint="drop that directory from the merge")
        if artifact.commit != dep.commit:
            raise InputError(f"{artifact.root}: {dep.name} was built from {artifact.commit[:12]}, deps.toml pins "
                             f"{dep.commit[:12]}", hint=f"rebuild it: {rebuild}")
        if artifact.patches != dep.series:
            raise InputError(f"{artifact.root}: {dep.name} was built with patches {list(artifact.patches)}, the series "
                             f"is {list(dep.series)}", hint=f"rebuild it: {rebuild}")
        abi = artifact.toolchain.get("python_abi")
        if abi is not None and abi != manifest.bundle.python_abi:
            raise InputError(f"{artifact.root}: {dep.name} targets Python {abi}, [bundle] python-abi is "
                             f"{manifest.bundle.python_abi}", hint=f"rebuild it: {rebuild}")
    missing = [name for name in manifest.deps if name not in have]
    if missing and not partial:
        raise InputError(
            f"no artifact for {', '.join(missing)}: a release wheel holds every dependency",
            hint="build each with `assemble build --only DEP --artifacts DIR` and pass every DIR to merge; "
                 "to try only what you built, `--partial` makes a wheel labelled partial, never a release",
        )
    if partial and not artifacts:
        raise InputError("no artifact to merge", hint="build one with `assemble build --only DEP`")


def resolve_cuda(requested: str | None, artifacts: Sequence[Artifact]) -> str:
    """The CUDA version of the wheel's +cuXY label: --cuda, which every CUDA artifact must match,
    else the one the CUDA artifacts agree on."""
    built = {a.dep: str(a.toolchain["cuda"]) for a in artifacts if a.toolchain.get("cuda")}
    if requested is not None:
        label = cuda_label(requested)
        wrong = [f"{dep} ({cuda})" for dep, cuda in built.items() if cuda_label(cuda) != label]
        if wrong:
            raise InputError(f"--cuda {requested}, but built with another CUDA: {', '.join(wrong)}",
                             hint=f"rebuild them with --cuda {requested}")
        return ".".join(requested.split(".")[:2])
    labels = {cuda_label(cuda) for cuda in built.values()}
    if len(labels) > 1:
        raise InputError("the artifacts were built with different CUDA versions: "
                         f"{', '.join(f'{d} ({c})' for d, c in built.items())}", hint="rebuild them with one --cuda")
    if not built:
        raise InputError("no artifact was built with CUDA, so the +cuXY label is unknown", hint="pass --cuda X.Y")
    return ".".join(next(iter(built.values())).split(".")[:2])


def _warnings(artifacts: Sequence[Artifact], unshipped: Mapping[str, Sequence[str]],
              verdict: PlatformVerdict) -> list[str]:
    notes = [f"{dep}: {len(paths)} file(s) match no install pattern and are not shipped: "
             f"{', '.join(paths[:5])}{' ...' if len(paths) > 5 else ''}"
             for dep, paths in unshipped.items()]
    for a in artifacts:
        local = ["uncommitted edits"] if a.dirty else []
        if a.head and a.series_head and a.head != a.series_head:
            local.append(f"HEAD {a.head[:12]}, not {a.series_head[:12]} that the series produces")
        if local:
            notes.append(f"{a.dep}: built from local work in forks/{a.dep} ({', '.join(local)}), not from commit + "
                         f"patches alone; commit, `assemble export {a.dep}` and rebuild before releasing")
    torches = {str(a.toolchain.get("torch")) for a in artifacts if a.toolchain.get("torch")}
    if len(torches) > 1:
        notes.append(f"artifacts were built against different torch versions: {', '.join(sorted(torches))}")
    if not verdict.portable:
        needs = ", ".join(verdict.external_libs) or "see `auditwheel show`"
        notes.append(f"not a manylinux wheel ({verdict.policy}): it needs {needs}; exclude libraries that torch "
                     "provides with --exclude")
    return notes


def default_jobs() -> int:
    return min(4, available_cpus())


def merge_wheel(
    manifest: Manifest,
    artifact_paths: Sequence[Path],
    out_dir: Path,
    cuda: str | None = None,
    *,
    exclude: Sequence[str] = DEFAULT_EXCLUDES,
    jobs: int | None = None,
    partial: bool = False,
) -> MergeResult:
    """Merge the artifacts under ``artifact_paths`` into one wheel in ``out_dir``. ``partial``:
    the dependencies without an artifact are left out, and the wheel says so (its version's
    local label, assembler.json and SBOM), so it is never taken for a release."""
    started = time.perf_counter()
    bundle = manifest.bundle
    artifacts = load_artifacts(artifact_paths)
    check_artifacts(manifest, artifacts, partial)
    check_same_release(manifest, artifacts)  # one release: series contents and toolchain agree
    cuda = resolve_cuda(cuda, artifacts)
    missing = tuple(name for name in manifest.deps if name not in {a.dep for a in artifacts})
    profiles = {a.dep: a.profile for a in artifacts if a.profile is not None}
    version = wheel_version(bundle, cuda, [a.dep for a in artifacts] if missing else (), list(profiles.values()))
    stem = f"{dist_name(bundle.name)}-{version}"
    dist_info = f"{stem}.dist-info"
    placements, unshipped = place(artifacts, {name: dep.install for name, dep in manifest.deps.items()}, dist_info)
    epoch = resolve_epoch()

    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale(out_dir)  # wheels being written by a merge that was killed
    tmp = temporary_path(out_dir / stem)
    try:
        with ReproducibleZip(tmp, epoch=epoch, jobs=jobs or default_jobs()) as archive:
            for p in placements:
                _add(archive, p)
            payload: list[Written] = archive.verified()  # every digest from the bytes written, CRCs checked
            archive.flush()  # the platform check copies the ELF members out of this file
            verdict = platform_verdict([w for w in payload if w.head == ELF_MAGIC], exclude)
            provenance = {a.dep: a.provenance() for a in artifacts}
            files: dict[str, list[str]] = {}
            for p in placements:
                files.setdefault(p.dep, []).append(p.path)
            min_torch = torch_floor(manifest, artifacts, symbol_floor(tmp, [w for w in payload if w.head == ELF_MAGIC]))
            archive.write_bytes(f"{dist_info}/METADATA",
                                metadata_text(bundle, version, cuda, min_torch, provenance).encode())
            archive.write_bytes(f"{dist_info}/WHEEL", wheel_text(python_tag(bundle), verdict.platforms).encode())
            archive.write_bytes(f"{dist_info}/assembler.json", provenance_json(
                bundle, version, cuda, verdict.platforms, exclude, provenance, files,
                verify={a.dep: manifest.deps[a.dep].verify_record() for a in artifacts}, missing=missing).encode())
            digests = {w.name: w.sha256 for w in payload}
            sbom = _sbom(manifest, artifacts, version, cuda, epoch,
                         {dep: file_hashes([(p, digests[p]) for p in paths]) for dep, paths in files.items()},
                         missing, profiles)
            archive.write_bytes(sbom_path(dist_info, dist_name(bundle.name)), sbom.encode())
            record = f"{dist_info}/RECORD"
            archive.write_bytes(record, record_text(archive.written, record).encode())
        wheel = out_dir / f"{stem}-{python_tag(bundle)}-abi3-{verdict.tag}.whl"
        os.replace(tmp, wheel)
    finally:
        tmp.unlink(missing_ok=True)
    return MergeResult(
        wheel=wheel, version=version, cuda=cuda, platform=verdict, provenance=provenance,
        files={dep: tuple(paths) for dep, paths in files.items()}, unshipped=unshipped,
        warnings=tuple(_warnings(artifacts, unshipped, verdict)), seconds=time.perf_counter() - started,
        missing=missing,
    )


@dataclass(frozen=True)
class SymbolFloor:
    """The newest torch any shipped object's shim symbols need (the audit's min_torch)."""

    version: str
    path: str  # the object that sets it
    symbols: tuple[str, ...]


def symbol_floor(archive: Path, elves: Sequence[Written]) -> SymbolFloor | None:
    """Audit the ELF members just written to ``archive`` (read in place) for their torch floor."""
    from assembler.audit.member import MemberInfo
    from assembler.audit.torchdata import DEFAULT_TABLE, load_table
    from assembler.audit.wheel_scan import audit_object

    table = load_table(DEFAULT_TABLE)
    best: SymbolFloor | None = None
    for w in elves:
        job = MemberInfo(str(archive), w.name, w.raw.header_offset, w.raw.compress_type, w.raw.compress_size,
                         w.raw.file_size)
        elf = audit_object(job, None, table)
        if elf.min_torch and (best is None or Version(elf.min_torch) > Version(best.version)):
            best = SymbolFloor(elf.min_torch, w.name, elf.min_torch_symbols)
    return best


def torch_floor(manifest: Manifest, artifacts: Sequence[Artifact], symbols: SymbolFloor | None) -> str:
    """``Requires-Dist: torch>=`` of the merged wheel: the newer of the highest torch-target the
    headers were built for and what the symbols need, so the wheel never installs next to a torch
    whose shim lacks a symbol it imports."""
    targeted = max(Version(manifest.deps[a.dep].torch_target) for a in artifacts)
    if symbols is not None and Version(symbols.version) > targeted:
        return symbols.version
    return str(targeted)


def _sbom(manifest: Manifest, artifacts: Sequence[Artifact], version: str, cuda: str, epoch: int,
          hashes: Mapping[str, tuple[tuple[str, str], ...]], missing: Sequence[str] = (),
          profiles: Mapping[str, str] | None = None) -> str:
    """The wheel's CycloneDX document (see assembler.wheel.sbom)."""
    entries = []
    for a in artifacts:
        dep = manifest.deps[a.dep]
        entries.append(DepEntry(
            name=a.dep, source=a.source or dep.source, upstream=dep.upstream, track=dep.track, commit=a.commit,
            head=a.head, dirty=a.dirty, archs=a.archs, toolchain=a.toolchain,
            patches=read_patches(dep.patches_dir, a.patches), files=hashes.get(a.dep, ()),
            profile=(profiles or {}).get(a.dep),
        ))
    bundle = manifest.bundle
    return sbom_json(name=bundle.name, version=version, wheel_purl_name=dist_name(bundle.name).replace("_", "-"),
                     epoch=epoch, deps=entries, cuda=cuda, missing=missing)


def _add(archive: ReproducibleZip, placement: Placement) -> Written:
    item = placement.file
    if item.member is not None:
        return archive.copy_member(placement.path, item.member, item.sha256, item.relpath)
    assert item.path is not None
    return archive.write_file(placement.path, item.path)
