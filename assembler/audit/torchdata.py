"""Which torch release introduced each stable-ABI shim symbol, and where that knowledge came from.

The table (``assembler/data/torch_shim_versions.json``) holds the shim symbols that already
existed in torch 2.9.0 (the first release with the stable ABI; PyTorch's own manifest omits
them) and, for every later one, the release that added it.  It is seeded from PyTorch's shim
version manifest as packaged by torch-abi-audit and refreshed from the
``#if TORCH_FEATURE_VERSION >= TORCH_VERSION_X_Y_Z`` guards in an installed torch's headers
(:func:`refresh_table`); every source is recorded in the file's ``provenance`` list.
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import re
import subprocess
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from assembler.errors import InputError, ToolchainError
from assembler.fsutil import atomic_write

Version = tuple[int, int, int]

DEFAULT_TABLE = Path(__file__).resolve().parents[1] / "data" / "torch_shim_versions.json"
SHIM_HEADERS = (
    "torch/csrc/stable/c/shim.h",
    "torch/csrc/inductor/aoti_torch/c/shim.h",
    "torch/csrc/inductor/aoti_torch/generated/c_shim_*.h",
)

_GUARD = re.compile(r"#\s*if\s+TORCH_FEATURE_VERSION\s*>=\s*TORCH_VERSION_(\d+)_(\d+)_(\d+)\b")
_CONDITIONAL = re.compile(r"#\s*(if|ifdef|ifndef)\b")
_ELSE = re.compile(r"#\s*(else|elif)\b")
_ENDIF = re.compile(r"#\s*endif\b")
_DECLARED = re.compile(r"\b((?:aoti_torch|torch)_\w+)\s*\(")
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def parse_version(text: str) -> Version:
    parts = text.strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise InputError(f"bad version {text!r} in the torch shim table (want MAJOR.MINOR.PATCH)")
    return int(parts[0]), int(parts[1]), int(parts[2])


def format_version(version: Version) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class TorchTable:
    baseline_version: Version
    baseline: frozenset[str]
    versions: Mapping[str, Version]  # shim symbols added after the baseline release
    provenance: tuple[dict, ...] = field(default=())

    def version_of(self, symbol: str) -> Version | None:
        """The release that introduced ``symbol``; None when the table does not know it."""
        found = self.versions.get(symbol)
        if found is None and symbol in self.baseline:
            return self.baseline_version
        return found

    def describe(self) -> str:
        """One line naming the sources, for reports."""
        return "; ".join(p.get("source", "?") for p in self.provenance)


@cache
def load_table(path: Path = DEFAULT_TABLE) -> TorchTable:
    try:
        raw = json.loads(path.read_text())
        return TorchTable(
            baseline_version=parse_version(raw["baseline_version"]),
            baseline=frozenset(raw["baseline"]),
            versions={name: parse_version(v) for name, v in raw["symbols"].items()},
            provenance=tuple(raw.get("provenance", ())),
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(
            f"cannot read the torch shim table {path}: {error}",
            hint="restore it from git, or rebuild it with `assemble audit --refresh-torch-table`",
        ) from None


def parse_shim_headers(headers: list[tuple[str, str]]) -> dict[str, Version]:
    """Shim functions declared inside ``TORCH_FEATURE_VERSION`` guards of ``(name, text)`` headers."""
    found: dict[str, Version] = {}
    for _name, text in headers:
        stack: list[Version | None] = []
        for line in _COMMENT.sub("", text).splitlines():
            line = line.strip()
            if guard := _GUARD.match(line):
                stack.append((int(guard[1]), int(guard[2]), int(guard[3])))
            elif _CONDITIONAL.match(line):
                stack.append(None)
            elif _ELSE.match(line):
                if stack:
                    stack[-1] = None  # the other branch is not "added in X"
            elif _ENDIF.match(line):
                if stack:
                    stack.pop()
            elif not line.startswith("#"):
                guards = [v for v in stack if v is not None]
                for name in _DECLARED.findall(line):
                    if guards:
                        found[name] = max(max(guards), found.get(name, (0, 0, 0)))
    return found


def _headers_in_dir(include: Path) -> list[tuple[str, str]]:
    return [
        (str(p.relative_to(include)), p.read_text(errors="replace"))
        for pattern in SHIM_HEADERS
        for p in sorted(include.glob(pattern))
    ]


def _headers_in_wheel(wheel: Path) -> tuple[str, list[tuple[str, str]]]:
    """torch's version and shim headers, read in place from a torch wheel."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            version = next(
                (n.split("/")[0].removesuffix(".dist-info").split("-", 1)[1] for n in names if n.endswith(".dist-info/METADATA")),
                "?",
            )
            wanted = sorted(n for n in names if any(fnmatch.fnmatch(n, f"torch/include/{p}") for p in SHIM_HEADERS))
            return version, [(n.removeprefix("torch/include/"), zf.read(n).decode(errors="replace")) for n in wanted]
    except (OSError, zipfile.BadZipFile) as error:
        raise InputError(f"cannot read torch wheel {wheel}: {error}") from None


@dataclass(frozen=True)
class RefreshSummary:
    torch_version: str
    added: tuple[str, ...]
    changed: tuple[str, ...]
    confirmed: int
    path: Path


def _headers_in_env(python: str) -> tuple[str, list[tuple[str, str]]]:
    """torch's version and include directory in the interpreter ``python``, without importing torch."""
    probe = (
        "import importlib.metadata as m, importlib.util as u, json, os;"
        "s = u.find_spec('torch');"
        "print(json.dumps([m.version('torch'), os.path.dirname(s.origin)]))"
    )
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
        version, root = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        detail = getattr(error, "stderr", "") or str(error)
        raise ToolchainError(
            f"cannot find torch in {python}: {detail.strip().splitlines()[-1] if detail.strip() else error}",
            hint="pass --from-torch with a Python that has torch installed",
        ) from None
    return version, _headers_in_dir(Path(root) / "include")


def refresh_table(source: str, path: Path = DEFAULT_TABLE) -> RefreshSummary:
    """Merge the version guards of a torch's shim headers into the table at ``path`` (atomically).

    ``source`` is a Python interpreter with torch installed (torch is not imported) or a torch
    wheel, read in place.
    """
    if source.endswith(".whl"):
        torch_version, headers = _headers_in_wheel(Path(source))
    else:
        torch_version, headers = _headers_in_env(source)
    if not headers:
        raise ToolchainError(f"no torch shim headers in {source}", hint="is this torch >= 2.10?")
    guarded = parse_shim_headers(headers)
    raw = json.loads(path.read_text())
    symbols: dict[str, str] = raw["symbols"]
    baseline = set(raw["baseline"])
    added, changed, confirmed = [], [], 0
    for name, version in sorted(guarded.items()):
        text = format_version(version)
        if name in baseline:
            continue  # guarded after the fact; it existed in the baseline release
        if name not in symbols:
            added.append(name)
        elif symbols[name] != text:
            changed.append(name)
        else:
            confirmed += 1
        symbols[name] = text
    raw["symbols"] = dict(sorted(symbols.items()))
    raw.setdefault("provenance", []).append(
        {
            "what": "versions of guarded shim symbols",
            "source": f"TORCH_FEATURE_VERSION guards in torch {torch_version} headers",
            "files": [name for name, _text in headers],
            "date": datetime.date.today().isoformat(),
            "added": added,
            "changed": changed,
            "confirmed": confirmed,
        }
    )
    atomic_write(path, json.dumps(raw, indent=1) + "\n")
    load_table.cache_clear()
    return RefreshSummary(
        torch_version=torch_version,
        added=tuple(added),
        changed=tuple(changed),
        confirmed=confirmed,
        path=path,
    )
