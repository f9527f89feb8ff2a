"""The merged wheel's software bill of materials: CycloneDX 1.6 JSON at
``<dist-info>/sboms/<name>.cdx.json`` (PEP 770), listed in RECORD like every other member.

One component per bundled dependency, carrying what only the assembler knows: the repository
built from (a fork or upstream) and the upstream it follows, the pinned commit, every patch of
the series (file, subject, sha256 of the patch file, status and its evidence) and the sha256 of
every file the dependency put into the wheel. The toolchains (nvcc, torch, C++ compiler, CMake,
scikit-build-core) are the BOM's tools.

Patch status here is what the series' DEP-3 headers declare (``Applied-Upstream``,
``Forwarded``), read offline at merge time: a merge never fetches. ``assemble patches`` checks
the same patches against upstream (patch-id, trial replays); the BOM says which source it used.

Reproducible: the timestamp is SOURCE_DATE_EPOCH's (the zip entries' time), the serial number a
UUIDv5 of the document's own content, every bom-ref a name; no clock, no random UUID.
cyclonedx-python-lib (a second of imports) is imported only when a merge writes a BOM; reading
one back (`assemble sbom`) is plain JSON.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from assembler import __version__
from assembler.errors import InputError
from assembler.series.headers import PatchHeader, PatchStatus, forwarded_status, parse_patch_header

SBOM_DIR = "sboms"
PROPERTY = "assembler:"  # prefix of every property this module writes (CycloneDX property taxonomy)
STATUS_SOURCE = ("DEP-3 headers (Applied-Upstream, Forwarded) of the series files, read at merge time without "
                 "network access; `assemble patches` checks them against upstream")
_SERIAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/assembler/sbom")
_GITHUB = re.compile(r"^(?:https?://|ssh://git@|git@)github\.com[/:](?P<owner>[^/]+)/(?P<repo>[^/]+?)(?:\.git)?/?$")


def sbom_path(dist_info: str, dist: str) -> str:
    """Where PEP 770 puts the BOM inside the wheel."""
    return f"{dist_info}/{SBOM_DIR}/{dist}.cdx.json"


@dataclass(frozen=True)
class PatchEntry:
    file: str
    subject: str
    sha256: str  # hex digest of the patch file's bytes
    status: str  # upstream | forwarded | local | not-needed (as the headers declare)
    evidence: str


@dataclass(frozen=True)
class DepEntry:
    """What the BOM says about one bundled dependency."""

    name: str
    source: str  # the repository built from (a fork, or upstream itself)
    upstream: str | None
    track: str
    commit: str
    head: str | None
    dirty: bool
    archs: tuple[str, ...]
    toolchain: Mapping[str, Any]
    patches: tuple[PatchEntry, ...]
    files: tuple[tuple[str, str], ...]  # (wheel path, sha256 hex)
    profile: str | None = None  # the build profile it was built on ([deps.X.profiles.NAME]); None: the full build


def declared_status(header: PatchHeader) -> tuple[PatchStatus, str]:
    """(status, evidence) from a patch's DEP-3 fields alone: ``Applied-Upstream`` = upstream,
    else what ``Forwarded`` says (the header layer of ``assemble patches``, minus its git checks)."""
    applied = header.fields.get("Applied-Upstream")
    if applied:
        return PatchStatus.UPSTREAM, f"Applied-Upstream: {applied}"
    status, url, note = forwarded_status(header)
    return status, url or note


def read_patches(patches_dir: Path, series: Sequence[str]) -> tuple[PatchEntry, ...]:
    """Each series file's subject, sha256 and declared status."""
    entries = []
    for name in series:
        path = patches_dir / name
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"{path}: unreadable patch ({exc.strerror or exc})",
                             hint="restore the series file or fix the series") from None
        header = parse_patch_header(path)
        status, evidence = declared_status(header)
        entries.append(PatchEntry(name, header.subject, hashlib.sha256(data).hexdigest(), str(status), evidence))
    return tuple(entries)


def purl(name: str, url: str, commit: str) -> str:
    """``pkg:github/owner/repo@sha`` for GitHub; otherwise a generic purl with the clone URL as
    its ``vcs_url`` qualifier (the purl spec's way to point at any git repository)."""
    from packageurl import PackageURL

    match = _GITHUB.match(url)
    if match:
        return str(PackageURL("github", match["owner"].lower(), match["repo"].lower(), commit))
    return str(PackageURL("generic", None, name, commit, qualifiers={"vcs_url": f"git+{url}@{commit}"}))


def _hex(record_digest: str) -> str:
    """RECORD's urlsafe-base64 sha256 as the hex CycloneDX wants."""
    import base64

    return base64.urlsafe_b64decode(record_digest + "=" * (-len(record_digest) % 4)).hex()


def file_hashes(written: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """(path, RECORD digest) pairs -> (path, sha256 hex) pairs."""
    return tuple((path, _hex(digest)) for path, digest in written)


_TOOLS = (  # toolchain key in artifact.json -> tool name in the BOM
    ("nvcc", "nvcc"), ("torch", "torch"), ("cxx", "c++"), ("cmake", "cmake"), ("ninja", "ninja"),
    ("scikit_build_core", "scikit-build-core"),
)


def sbom_json(*, name: str, version: str, wheel_purl_name: str, epoch: int, deps: Sequence[DepEntry], cuda: str | None,
              missing: Sequence[str] = ()) -> str:
    """The CycloneDX 1.6 document for the merged wheel, as deterministic JSON text. A partial
    wheel (``missing`` the dependencies it lacks) says so in its description and properties;
    a dependency built on a build profile carries ``assembler:profile`` (absent: the full build),
    and the BOM's metadata lists the profiles."""
    profiles = sorted({dep.profile for dep in deps if dep.profile})
    from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, Property, XsUri
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Commit, Component, ComponentType, Diff, Patch, PatchClassification, Pedigree
    from cyclonedx.model.tool import ToolRepository
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    root = Component(
        name=name, version=version, type=ComponentType.LIBRARY, bom_ref="wheel",
        purl=PackageURL("pypi", None, wheel_purl_name, version),
        description=f"{name} kernels bundled by assembler (abi3, LibTorch Stable ABI"
        + (f", CUDA {cuda})" if cuda else ")")
        + (f"; PARTIAL, not a release: lacks {', '.join(missing)}" if missing else "")
        + (f"; built on build profile {', '.join(profiles)}, not a release" if profiles else ""),
    )
    tools: dict[tuple[str, str], Component] = {}
    tools[("assembler", __version__)] = Component(name="assembler", version=__version__, type=ComponentType.APPLICATION,
                                                  bom_ref="tool:assembler")
    components = []
    for dep in deps:
        for key, tool in _TOOLS:
            value = dep.toolchain.get(key)
            if value:
                ref = f"tool:{tool}@{value}"
                tools.setdefault((tool, str(value)),
                                 Component(name=tool, version=str(value), type=ComponentType.APPLICATION, bom_ref=ref))
        refs = [ExternalReference(type=ExternalReferenceType.VCS, url=XsUri(dep.source),
                                  comment="built from"
                                  + (" (fork)" if dep.upstream and dep.upstream != dep.source else ""))]
        if dep.upstream and dep.upstream != dep.source:
            refs.append(ExternalReference(type=ExternalReferenceType.VCS, url=XsUri(dep.upstream),
                                          comment=f"upstream (tracks {dep.track})"))
        props = [
            Property(name=f"{PROPERTY}commit", value=dep.commit),
            Property(name=f"{PROPERTY}source", value=dep.source),
            Property(name=f"{PROPERTY}upstream", value=dep.upstream or dep.source),
            Property(name=f"{PROPERTY}track", value=dep.track),
            Property(name=f"{PROPERTY}head", value=dep.head or ""),
            Property(name=f"{PROPERTY}dirty", value="true" if dep.dirty else "false"),
            Property(name=f"{PROPERTY}archs", value=" ".join(dep.archs)),
            Property(name=f"{PROPERTY}patch-status-source", value=STATUS_SOURCE),
            *([Property(name=f"{PROPERTY}profile", value=dep.profile)] if dep.profile else []),
        ]
        props += [Property(name=f"{PROPERTY}toolchain:{key}", value=str(value)) for key,
                  value in sorted(dep.toolchain.items()) if value is not None]
        patches = []
        for index, patch in enumerate(dep.patches, 1):
            tag = f"{PROPERTY}patch:{index:04d}:"
            props += [Property(name=tag + "file", value=patch.file),
                      Property(name=tag + "subject", value=patch.subject),
                      Property(name=tag + "sha256", value=patch.sha256),
                      Property(name=tag + "status", value=patch.status),
                      Property(name=tag + "evidence", value=patch.evidence)]
            kind = (PatchClassification.BACKPORT if patch.status == PatchStatus.UPSTREAM
                    else PatchClassification.UNOFFICIAL)
            patches.append(Patch(type=kind, diff=Diff(url=XsUri(f"patches/{dep.name}/{patch.file}"))))
        ancestors = []
        if dep.upstream and dep.upstream != dep.source:
            ancestors.append(Component(name=dep.name, type=ComponentType.LIBRARY, bom_ref=f"upstream:{dep.name}",
                                       external_references=[ExternalReference(type=ExternalReferenceType.VCS,
                                                                              url=XsUri(dep.upstream))]))
        files = [Component(name=path, type=ComponentType.FILE, bom_ref=f"file:{path}",
                           hashes=[HashType(alg=HashAlgorithm.SHA_256, content=digest)]) for path, digest in dep.files]
        component = Component(
            name=dep.name, version=dep.commit, type=ComponentType.LIBRARY, bom_ref=f"dep:{dep.name}",
            purl=PackageURL.from_string(purl(dep.name, dep.source, dep.commit)),
            external_references=refs, properties=props, components=files,
            pedigree=Pedigree(ancestors=ancestors, commits=[Commit(uid=dep.commit, url=XsUri(dep.source))],
                              patches=patches,
                              notes=f"{len(dep.patches)} patch(es) applied on {dep.commit}; status from the "
                                    "DEP-3 headers"),
        )
        components.append(component)
    metadata = BomMetaData(
        timestamp=datetime.fromtimestamp(epoch, UTC), component=root,
        tools=ToolRepository(components=sorted(tools.values(), key=lambda c: (c.name, c.version or ""))),
        properties=[Property(name=f"{PROPERTY}patch-status-source", value=STATUS_SOURCE)]
        + ([Property(name=f"{PROPERTY}partial", value="true"),
            Property(name=f"{PROPERTY}partial:missing", value=" ".join(missing))]
           if missing else [])
        + ([Property(name=f"{PROPERTY}profile", value=" ".join(profiles))] if profiles else []),
    )
    bom = Bom(components=components, metadata=metadata, serial_number=uuid.UUID(int=0))
    bom.register_dependency(root, components)
    text = JsonV1Dot6(bom).output_as_string(indent=2)
    serial = uuid.uuid5(_SERIAL_NAMESPACE, hashlib.sha256(text.encode()).hexdigest())
    data = json.loads(text)
    data["serialNumber"] = serial.urn
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


# -- reading back ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SbomDep:
    """One bundled dependency as a BOM in a wheel describes it."""

    name: str
    commit: str
    purl: str
    source: str
    upstream: str
    archs: str
    toolchain: dict[str, str]
    patches: tuple[PatchEntry, ...]
    files: dict[str, str]  # wheel path -> sha256 hex

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "commit": self.commit, "purl": self.purl, "source": self.source,
            "upstream": self.upstream,
            "archs": self.archs.split(), "toolchain": self.toolchain,
            "patches": [vars(p) for p in self.patches], "files": self.files,
        }


def parse_sbom(text: str, where: str) -> tuple[dict[str, Any], list[SbomDep]]:
    """The document and its dependencies; InputError naming ``where`` when it is not ours."""
    from assembler.jsonfile import loads

    hint = "rebuild the wheel with `assemble build` or `assemble merge`"
    data = loads(text, where, hint=hint)
    try:
        if data.get("bomFormat") != "CycloneDX":
            raise ValueError("bomFormat is not CycloneDX")
        deps = []
        for component in data.get("components", []):
            if not str(component.get("bom-ref", "")).startswith("dep:"):
                continue
            props = {p["name"].removeprefix(PROPERTY): p.get("value", "") for p in component.get("properties", [])
                     if p["name"].startswith(PROPERTY)}
            numbers = sorted({key.split(":")[1] for key in props if key.startswith("patch:")})
            patches = tuple(PatchEntry(*(props.get(f"patch:{n}:{f}", "")
                                         for f in ("file", "subject", "sha256", "status", "evidence")))
                            for n in numbers)
            files = {f["name"]: next((h["content"] for h in f.get("hashes", []) if h.get("alg") == "SHA-256"), "")
                     for f in component.get("components", [])}
            toolchain = {key.removeprefix("toolchain:"): value for key,
                         value in props.items() if key.startswith("toolchain:")}
            deps.append(SbomDep(component["name"], props.get("commit", component.get("version", "")),
                                component.get("purl", ""),
                                props.get("source", ""), props.get("upstream", ""), props.get("archs", ""), toolchain,
                                patches, files))
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise InputError(f"{where}: not an assembler CycloneDX SBOM ({exc})", hint=hint) from None
    return data, deps


def read_wheel_sbom(wheel: Path) -> tuple[str, dict[str, Any], list[SbomDep]]:
    """(member name, document, dependencies) of the BOM in ``wheel``, read in place."""
    from assembler.audit.limits import MAX_JSON_DOCUMENT
    from assembler.audit.member import read_small_member
    from assembler.audit.zipindex import read_index

    if not wheel.is_file():
        raise InputError(f"{wheel}: no such wheel", hint="pass the path of a .whl file")
    members = read_index(str(wheel), re.compile(rb"^[^/]+\.dist-info/sboms/[^/]+\.cdx\.json$"))
    if not members:
        raise InputError(f"{wheel}: no CycloneDX SBOM (*.dist-info/sboms/*.cdx.json)",
                         hint="wheels merged by this assembler carry one; rebuild it")
    info = members[0]
    text = read_small_member(info, MAX_JSON_DOCUMENT).decode("utf-8", "replace")  # bounded: the wheel is untrusted data
    data, deps = parse_sbom(text, f"{wheel}: {info.name}")
    return info.name, data, deps


def diff_sboms(old: Sequence[SbomDep], new: Sequence[SbomDep]) -> list[dict[str, Any]]:
    """What changed per dependency between two releases: added/removed deps, pins, and patches
    added, removed, changed (other bytes) or with another status. Unchanged deps are left out."""
    before, after = {d.name: d for d in old}, {d.name: d for d in new}
    changes: list[dict[str, Any]] = []
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        if a is None or b is None:
            changes.append({"dep": name, "change": "added" if a is None else "removed",
                            "commit": (b or a).commit})  # type: ignore[union-attr]
            continue
        entry: dict[str, Any] = {"dep": name, "change": "changed"}
        if a.commit != b.commit:
            entry["commit"] = {"old": a.commit, "new": b.commit}
        if a.source != b.source:
            entry["source"] = {"old": a.source, "new": b.source}
        pa, pb = {p.file: p for p in a.patches}, {p.file: p for p in b.patches}
        patches = []
        for file in sorted(pa.keys() | pb.keys()):
            x, y = pa.get(file), pb.get(file)
            if x is None:
                patches.append({"file": file, "change": "added",
                                "subject": y.subject, "status": y.status})  # type: ignore[union-attr]
            elif y is None:
                patches.append({"file": file, "change": "removed", "subject": x.subject, "status": x.status})
            elif x.sha256 != y.sha256 or x.status != y.status:
                what = "changed" if x.sha256 != y.sha256 else "status"
                patches.append({"file": file, "change": what, "subject": y.subject,
                                "status": {"old": x.status, "new": y.status}})
        if patches:
            entry["patches"] = patches
        toolchain = {k: {"old": a.toolchain.get(k), "new": b.toolchain.get(k)}
                     for k in sorted(a.toolchain.keys() | b.toolchain.keys())
                     if a.toolchain.get(k) != b.toolchain.get(k)}
        if toolchain:
            entry["toolchain"] = toolchain
        if len(entry) > 2:
            changes.append(entry)
    return changes
