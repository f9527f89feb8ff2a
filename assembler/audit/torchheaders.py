"""Refresh the torch shim version table from the version guards in torch's own headers.

Since 2.10, every shim function PyTorch adds is declared inside
``#if TORCH_FEATURE_VERSION >= TORCH_VERSION_X_Y_Z``; the guard is the release that added it.
The headers are read from an installed torch (torch is not imported) or from a torch wheel in
place, and merged into the table with a provenance entry.
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import os
import re
import struct
import subprocess
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from assembler import jsonfile
from assembler.audit.limits import MAX_TORCH_HEADER
from assembler.audit.member import open_regular
from assembler.audit.torchdata import DEFAULT_TABLE, Version, format_version, load_table
from assembler.errors import InputError, ToolchainError
from assembler.fsutil import atomic_write

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


def feature_guarded_lines(text: str) -> Iterator[tuple[str, Version | None]]:
    """Each line of a header (comments already removed by the caller, stripped) with the
    release its innermost enclosing ``TORCH_FEATURE_VERSION >=`` guards add it in: the newest
    of them, None when no such guard encloses it. The one reading of torch's version guards, for
    the shim table and for `assemble assess` (``migration/versions.py``). An ``#else`` branch
    is not "added in X"."""
    stack: list[Version | None] = []
    for raw in text.splitlines():
        line = raw.strip()
        if guard := _GUARD.match(line):
            stack.append((int(guard[1]), int(guard[2]), int(guard[3])))
        elif _CONDITIONAL.match(line):
            stack.append(None)
        elif _ELSE.match(line):
            if stack:
                stack[-1] = None
        elif _ENDIF.match(line) and stack:
            stack.pop()
        guards = [v for v in stack if v is not None]
        yield line, max(guards) if guards else None


def parse_shim_headers(headers: list[tuple[str, str]]) -> dict[str, Version]:
    """Shim functions declared inside ``TORCH_FEATURE_VERSION`` guards of ``(name, text)`` headers."""
    found: dict[str, Version] = {}
    for _name, text in headers:
        for line, since in feature_guarded_lines(_COMMENT.sub("", text)):
            if since is not None and not line.startswith("#"):
                for name in _DECLARED.findall(line):
                    found[name] = max(since, found.get(name, (0, 0, 0)))
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
        with os.fdopen(open_regular(str(wheel)), "rb") as raw, zipfile.ZipFile(raw) as zf:
            names = zf.namelist()
            version = next(
                (n.split("/")[0].removesuffix(".dist-info").split("-", 1)[1] for n in names
                 if n.endswith(".dist-info/METADATA")),
                "?",
            )
            wanted = sorted(n for n in names if any(fnmatch.fnmatch(n, f"torch/include/{p}") for p in SHIM_HEADERS))
            for name in wanted:
                if zf.getinfo(name).file_size > MAX_TORCH_HEADER:
                    raise InputError(f"{wheel}: {name} declares more than the {MAX_TORCH_HEADER}-byte limit for "
                                     "a header")
            return version, [(n.removeprefix("torch/include/"), zf.read(n).decode(errors="replace")) for n in wanted]
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error, struct.error, NotImplementedError, RuntimeError,
            ValueError) as error:
        # zipfile's own ways of saying "damaged": bad CRC, unknown method, encryption, broken names
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
    if not path.is_file():
        raise InputError(
            f"{path}: no such torch shim table to refresh",
            hint=f"copy the shipped table ({DEFAULT_TABLE}) there first, or leave out --torch-table",
        )
    load_table(path)  # InputError naming the file when it is not a table, before the headers are read
    if source.endswith(".whl"):
        torch_version, headers = _headers_in_wheel(Path(source))
    else:
        torch_version, headers = _headers_in_env(source)
    if not headers:
        raise ToolchainError(f"no torch shim headers in {source}", hint="is this torch >= 2.10?")
    guarded = parse_shim_headers(headers)
    raw = jsonfile.load(path)
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
