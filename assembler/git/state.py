"""What assemble last made of a checkout, readable without starting git or gitpython: the
no-op path of `assemble checkout` (and the build's cache key) needs only this module."""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from assembler.errors import InputError
from assembler.fsutil import atomic_write
from assembler.manifest import Dependency

STATE_FILE = "assemble-state.json"


def branch_name(dep: Dependency) -> str:
    return f"assemble/{dep.name}"


def series_digest(dep: Dependency) -> str:
    """Content hash of the series (names and bytes, in order)."""
    digest = hashlib.sha256()
    for name in dep.series:
        digest.update(name.encode() + b"\0")
        digest.update((dep.patches_dir / name).read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass
class CheckoutState:
    """What assemble last made of the checkout. ``applied`` maps each commit to its patch file."""

    base: str
    source: str
    series_digest: str
    head: str | None = None
    applied: dict[str, str] = field(default_factory=dict)
    status: str = "applying"  # "applying" -> "ready", or "stopped" on a conflicting patch

    @classmethod
    def load(cls, path: Path) -> CheckoutState | None:
        state_path = _state_path(path)
        if not state_path.exists():
            return None
        try:
            return cls(**json.loads(state_path.read_text()))
        except (ValueError, TypeError) as exc:
            raise InputError(
                f"{state_path}: unreadable checkout state ({exc})",
                hint=f"move {path} away and run `assemble checkout` again (export its commits first if you made any)",
            ) from None

    def save(self, path: Path) -> None:
        atomic_write(_state_path(path), json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")


def _state_path(checkout: Path) -> Path:
    return checkout / ".git" / STATE_FILE


def is_up_to_date(state: CheckoutState, dep: Dependency, digest: str) -> bool:
    return state.status == "ready" and state.base == dep.commit and state.series_digest == digest


def read_head(checkout: Path) -> str:
    result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True)
    if result.returncode != 0:
        raise InputError(f"{checkout}: cannot read HEAD ({result.stderr.strip()})", hint="move it away and run `assemble checkout` again")
    return result.stdout.strip()


@dataclass
class CheckoutResult:
    dep: str
    path: Path
    action: str  # "created", "updated", "up-to-date"
    head: str
    applied: int
    fetched: bool

    @classmethod
    def unchanged(cls, dep: Dependency, path: Path, state: CheckoutState) -> CheckoutResult:
        return cls(dep.name, path, "up-to-date", read_head(path), len(state.applied), fetched=False)
