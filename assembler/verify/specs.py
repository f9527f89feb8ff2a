"""Which ops and smoke calls a verify run checks, and where they come from.

A merged wheel says whose it is: ``<dist-info>/assembler.json`` names its bundle and its
dependencies, and (since verify specs are embedded at merge) each dependency's ops and smoke
call. The workspace's deps.toml is used only when its [bundle] is the wheel's; otherwise the
wheel's own specs, or a clear error for a wheel of another bundle that carries none.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.audit.limits import MAX_JSON_DOCUMENT
from assembler.errors import InputError
from assembler.jsonfile import loads
from assembler.manifest.model import Manifest

RECORD_NAME = "assembler.json"


@dataclass(frozen=True)
class DepSpec:
    """One row of the matrix: what to check for a dependency."""

    name: str
    ops: tuple[str, ...] = ()
    smoke: str | None = None
    requires_cuda: bool = False
    builds_extensions: bool = False  # a wheel without any of its shared objects is missing it
    install: Mapping[str, str] = field(default_factory=dict)  # attribution rules for wheels without a record


@dataclass(frozen=True)
class Specs:
    deps: list[DepSpec]
    source: str  # "workspace", "wheel" or "none"
    detail: str  # one sentence saying which specs were used and why
    bundle: str | None  # the wheel's bundle, when it says
    recorded: dict[str, set[str]] | None  # wheel paths per dependency, from the wheel's record
    verify_torch: tuple[str, ...] = ()  # default torch versions
    profiles: Mapping[str, str | None] = field(default_factory=dict)  # the build profile each dependency was built on

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "detail": self.detail, "bundle": self.bundle}


def wheel_record(wheel: Path) -> dict[str, Any] | None:
    """The wheel's ``<name>.dist-info/assembler.json`` (written by `assemble merge`), or None."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/" + re.escape(RECORD_NAME), n)]
            if not names:
                return None
            if archive.getinfo(names[0]).file_size > MAX_JSON_DOCUMENT:
                raise ValueError(f"{archive.getinfo(names[0]).file_size} bytes, over the "
                                 f"{MAX_JSON_DOCUMENT}-byte limit")
            raw = archive.read(names[0])
    except (OSError, zipfile.BadZipFile, ValueError) as error:
        raise InputError(f"{wheel}: its {RECORD_NAME} cannot be read ({error})",
                         hint="rebuild the wheel with assemble merge") from None
    data = loads(raw, f"{wheel}: {names[0]}", hint="rebuild the wheel with assemble merge")
    if not isinstance(data, dict) or not isinstance(data.get("deps"), dict) or not isinstance(data.get("bundle"), dict):
        raise InputError(f"{wheel}: its {RECORD_NAME} has no bundle or deps table",
                         hint="rebuild the wheel with assemble merge")
    problem = _record_problem(data)
    if problem is not None:
        raise InputError(f"{wheel}: its {RECORD_NAME} is malformed: {problem}",
                         hint="rebuild the wheel with assemble merge")
    return data


def _record_problem(data: dict[str, Any]) -> str | None:
    """What has the wrong type in an assembler.json (data from the wheel, checked before use), or None."""

    def strings(value: Any) -> bool:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)

    bundle = data["bundle"]
    if not isinstance(bundle.get("name", ""), str):
        return "bundle.name is not a string"
    if not strings(bundle.get("verify_torch", [])):
        return "bundle.verify_torch is not a list of versions"
    for name, entry in data["deps"].items():
        if not isinstance(entry, dict):
            return f"deps.{name} is {type(entry).__name__}, not an object"
        if not strings(entry.get("files", [])):
            return f"deps.{name}.files is not a list of paths"
        if "verify" in entry and entry["verify"] is not None and not isinstance(entry["verify"], dict):
            return f"deps.{name}.verify is {type(entry['verify']).__name__}, not an object"
    return None


def recorded_profiles(record: Mapping[str, Any] | None) -> dict[str, str | None]:
    """Dependency -> the build profile its ``assembler.json`` entry names (``"profile"``), None
    for the full build. Read defensively: a wheel of an assembler without profiles has no key, and
    a value that is not a non-empty string names no profile."""
    if record is None:
        return {}
    profiles: dict[str, str | None] = {}
    for name, entry in record["deps"].items():
        profile = entry.get("profile") if isinstance(entry, dict) else None
        profiles[str(name)] = profile if isinstance(profile, str) and profile.strip() else None
    return profiles


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _from_manifest(manifest: Manifest) -> list[DepSpec]:
    return [
        DepSpec(name=dep.name, ops=tuple(dep.verify.ops), smoke=dep.verify.smoke,
                requires_cuda=dep.verify.requires_cuda,
                builds_extensions=dep.builds_extensions, install=dict(dep.install))
        for dep in manifest.deps.values()
    ]


def _from_record(wheel: Path, deps: Mapping[str, Any]) -> list[DepSpec]:
    specs = []
    for name, entry in deps.items():
        verify = entry.get("verify") if isinstance(entry, dict) else None
        if verify is None:
            specs.append(DepSpec(name=str(name)))
            continue
        ops, smoke = verify.get("ops", []), verify.get("smoke")
        if not (isinstance(ops, list) and all(isinstance(op, str) for op in ops)
                and (smoke is None or isinstance(smoke, str))):
            raise InputError(f"{wheel}: {RECORD_NAME} deps.{name}.verify is malformed",
                             hint="rebuild the wheel with assemble merge")
        specs.append(DepSpec(name=str(name), ops=tuple(ops), smoke=smoke,
                             requires_cuda=bool(verify.get("requires_cuda")),
                             builds_extensions=bool(verify.get("builds_extensions"))))
    return specs


def resolve_specs(manifest: Manifest | None, wheel: Path) -> Specs:
    """The specs to verify ``wheel`` with (see the module docstring)."""
    record = wheel_record(wheel)
    if record is None:
        if manifest is None:
            return Specs([], "none",
                         "no deps.toml found and no assembler.json in the wheel: checking that each extension loads",
                         None, None)
        return Specs(_from_manifest(manifest), "workspace",
                     f"{manifest.path} (bundle {manifest.bundle.name}; the wheel has no assembler.json)", None, None,
                     manifest.bundle.verify_torch)
    deps = record["deps"]
    profiles = recorded_profiles(record)
    recorded = {str(name): set(entry.get("files", ())) for name, entry in deps.items() if isinstance(entry, dict)}
    bundle = str(record["bundle"].get("name", ""))
    wheel_torch = tuple(str(v) for v in record["bundle"].get("verify_torch", ()))
    if manifest is not None and _canonical(manifest.bundle.name) == _canonical(bundle):
        specs = _from_manifest(manifest)
        detail = f"{manifest.path} (bundle {bundle}, the wheel's)"
        if isinstance(record.get("partial"), dict):  # a partial wheel: the dependencies it lacks are not rows
            specs = [spec for spec in specs if spec.name in recorded]
            detail += f"; a partial wheel of {', '.join(spec.name for spec in specs)}"
        return Specs(specs, "workspace", detail, bundle, recorded, manifest.bundle.verify_torch, profiles)
    embedded = any(isinstance(entry, dict) and "verify" in entry for entry in deps.values())
    elsewhere = f"; the workspace {manifest.path} is bundle {manifest.bundle.name}" if manifest is not None else ""
    if embedded:
        return Specs(_from_record(wheel, deps), "wheel", f"the wheel's own {RECORD_NAME} (bundle {bundle}){elsewhere}",
                     bundle, recorded, wheel_torch, profiles)
    if manifest is not None:
        raise InputError(
            f"{wheel.name} belongs to bundle {bundle}, not to this workspace's bundle {manifest.bundle.name} "
            f"({manifest.path}), and carries no verify specs of its own",
            hint=f"run verify in {bundle}'s workspace (-C DIR), or outside any workspace to check that each "
                 "extension loads",
        )
    return Specs(_from_record(wheel, deps), "wheel",
                 f"the wheel's own {RECORD_NAME} (bundle {bundle}; it carries no verify specs: each extension "
                 "must load)",
                 bundle, recorded, wheel_torch, profiles)
