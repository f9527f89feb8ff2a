"""The dist-info files of the merged wheel: WHEEL, METADATA, assembler.json and RECORD.

Everything here is a pure function of its arguments (no clock, no host name), which is what
keeps two merges of the same artifacts byte-identical.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from packaging.version import Version

from assembler import __version__
from assembler.errors import InputError
from assembler.manifest import Bundle


class RecordRow(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def sha256(self) -> str: ...

    @property
    def size(self) -> int: ...


def dist_name(name: str) -> str:
    """The escaped distribution name used in wheel file names and the dist-info directory."""
    return re.sub(r"[-_.]+", "_", name).lower()


def cuda_label(cuda: str) -> str:
    """'13.2' (or '13.2.51') -> 'cu132', the local version label of the wheel."""
    parts = cuda.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise InputError(f"CUDA version {cuda!r} is not MAJOR.MINOR", hint="pass e.g. --cuda 13.2")
    return f"cu{int(parts[0])}{int(parts[1])}"


PARTIAL_LABEL = "partial"  # the local version segment that marks a wheel of some dependencies only


def wheel_version(bundle: Bundle, cuda: str, partial: Sequence[str] = (), profiles: Sequence[str] = ()) -> str:
    """``0.1.0+cu132``; a partial wheel (only the dependencies in ``partial``) is
    ``0.1.0+cu132.partial.vecadd``, one built on a build profile ``0.1.0+cu132.smoke`` (each
    profile of its dependencies, sorted): PEP 440 local segments, never a release (PyPI refuses
    local versions, and a release merge makes neither)."""
    label = cuda_label(cuda)
    for profile in sorted(set(profiles)):
        label += "." + (re.sub(r"[^a-z0-9]", "", profile.lower()) or "profile")
    if partial:
        label += "." + ".".join([PARTIAL_LABEL, *(re.sub(r"[^a-z0-9]", "", name.lower()) or "dep" for name in partial)])
    return str(Version(f"{bundle.version}+{label}"))


def python_tag(bundle: Bundle) -> str:
    return "cp" + bundle.python_abi.replace(".", "")


def wheel_text(python: str, platforms: Sequence[str]) -> str:
    """WHEEL with one Tag line per expanded tag (the file name carries the compressed set)."""
    lines = ["Wheel-Version: 1.0", f"Generator: assembler {__version__}", "Root-Is-Purelib: false"]
    lines += [f"Tag: {python}-abi3-{platform}" for platform in platforms]
    return "\n".join(lines) + "\n"


def metadata_text(bundle: Bundle, version: str, cuda: str, min_torch: str,
                  provenance: Mapping[str, Mapping[str, Any]]) -> str:
    """Core metadata 2.1; the body says in words what assembler.json says in full."""
    profiled = {dep: str(record["profile"]) for dep, record in provenance.items() if record.get("profile")}
    header = [
        "Metadata-Version: 2.1",
        f"Name: {bundle.name}",
        f"Version: {version}",
        f"Summary: {bundle.name} kernels, abi3 / LibTorch Stable ABI, CUDA {cuda}"
        + (f"; build profile {', '.join(sorted(set(profiled.values())))}, not a release" if profiled else ""),
        f"Requires-Python: >={bundle.python_abi}",
        f"Requires-Dist: torch>={min_torch}",
        "Description-Content-Type: text/markdown",
    ]
    body = [
        f"Merged by assembler {__version__} from {len(provenance)} dependencies, CUDA {cuda}, "
        f"Python >= {bundle.python_abi} (abi3), torch >= {min_torch} (Stable ABI).",
        "",
    ]
    if profiled:
        body += ["**Not a release:** built on a reduced build profile "
                 f"({', '.join(f'{dep}: {name}' for dep, name in profiled.items())}); see `profile` in assembler.json.",
                 ""]
    body += [
        "| dependency | commit | patches | archs | torch | nvcc | cmake | scikit-build-core | profile |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for dep, record in provenance.items():
        tool = record["toolchain"]
        body.append(
            f"| {dep} | {record['commit'][:12]} | {len(record['patches'])} | {' '.join(record['archs']) or '-'} "
            f"| {tool.get('torch') or '-'} | {tool.get('nvcc') or '-'} | {tool.get('cmake') or '-'} "
            f"| {tool.get('scikit_build_core') or '-'} | {record.get('profile') or 'full'} |"
        )
    return "\n".join(header) + "\n\n" + "\n".join(body) + "\n"


def provenance_json(bundle: Bundle, version: str, cuda: str, platforms: Sequence[str], excluded: Sequence[str],
                    provenance: Mapping[str, Mapping[str, Any]], files: Mapping[str, Sequence[str]],
                    verify: Mapping[str, Mapping[str, Any]] | None = None, missing: Sequence[str] = ()) -> str:
    """``<dist-info>/assembler.json``: per dependency the commit, patches, toolchain and files, and
    the verify specs (ops, smoke call), so `assemble verify` can check the wheel outside its workspace;
    a partial wheel's ``partial`` names the dependencies it holds and those it lacks."""
    data = {
        "assembler": __version__,
        "bundle": {"name": bundle.name, "version": version, "python_abi": bundle.python_abi, "cuda": cuda,
                   "verify_torch": list(bundle.verify_torch)},
        "platform": list(platforms),
        "excluded_libraries": sorted(excluded),
        "deps": {
            dep: {**record, "files": list(files.get(dep, ())),
                  **({"verify": dict(verify[dep])} if verify and dep in verify else {})}
            for dep, record in provenance.items()
        },
    }
    if missing:
        data["partial"] = {"deps": sorted(provenance), "missing": sorted(missing)}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def record_text(entries: Sequence[RecordRow], record_name: str) -> str:
    """RECORD in the order the members were written, the RECORD itself last without a hash."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for entry in entries:
        writer.writerow([entry.name, f"sha256={entry.sha256}", entry.size])
    writer.writerow([record_name, "", ""])
    return buffer.getvalue()
