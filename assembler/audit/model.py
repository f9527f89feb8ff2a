"""Audit results and their JSON form (``assemble audit --json``), schema version 1.

One object per PATH (a JSON array when several PATHs are given)::

    {
      "schema": 1,
      "path": "dist/vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl",
      "kind": "wheel",                 # wheel | directory | file
      "tags": ["cp38-abi3-manylinux_2_28_x86_64"],
      "abi3_floor": "3.8",             # from an abi3 tag; null when there is none
      "torch_abi": "STABLE",           # UNSTABLE if any object is, else STABLE if any is, else NO-TORCH
      "min_torch": "2.13.0",           # highest over the objects; null without shim symbols
      "cpython_abi": "ABI3-MISMATCH",  # NON-ABI3 | ABI3-MISMATCH | ABI3 | NO-PYTHON (see below)
      "min_python": "3.11",            # highest over the abi3 objects; null without limited-API symbols
      "requires_torch": "torch>=2.11", # the wheel's Requires-Dist on torch (METADATA); null if none
      "requires_python": ">=3.8",      # its Requires-Python; null if none
      "floor_too_low": ["..."],        # FLOOR-TOO-LOW: a declared floor below what the symbols need
      "not_elf": ["pkg/notes.so"],     # named like a shared object but not ELF: not audited
                                       # (objects are found by content)
      "unsafe_names": ["../x.so (a '..' component)"],  # UNSAFE-PATH: members that install outside the target
      "sources": {"torch": "...", "cpython": "..."},   # where the version tables came from
      "extensions": [                  # every ELF shared object, Python extension or not
        {
          "path": "vllm/_qutlass_C.abi3.so",   # inside the wheel / relative to the directory
          "kind": "extension",         # extension (defines PyInit_* / PyModExport_*) | library
          "torch_abi": "STABLE",       # STABLE | UNSTABLE | NO-TORCH
          "stable_shim": 63,           # undefined aoti_torch_* / torch_* symbols
          "unstable": 0,               # undefined symbols naming at:: / c10:: / torch:: (not stable/headeronly)
          "unstable_symbols": [],      # those, demangled
          "min_torch": "2.13.0",       # release that added the newest shim symbol used; null if none
          "min_torch_symbols": ["torch_exception_get_what", "..."],  # symbols added in min_torch
                                       # (empty at the 2.9.0 baseline, which no single symbol sets)
          "unknown_shim_symbols": [],  # shim symbols the table does not know: min_torch is a lower bound
          "abi3_compliant": true,      # no non-limited CPython symbol (module entry points excepted)
          "abi3_violations": [],       # non-limited Py*/_Py* symbols
          "min_python": "3.8",         # Python that added the newest limited-API symbol used; null if none,
                                       # and null for an object built for the full API (python_api "full")
          "min_python_symbols": ["..."],
          "newer_than_tag": {},        # limited-API symbols added after abi3_floor: {symbol: version}
          "needed": ["libtorch.so", "libc10.so", "..."],  # DT_NEEDED, in order
          "python_api": "limited",     # limited (abi3 object) | full (built for one CPython) | none (NO-PYTHON)
          "unresolved": {"aoti_torch_get_current_cuda_stream": "libtorch_cuda.so"},
          "error": "..."               # only for an object that could not be read (torch_abi INCOMPLETE, kind unknown)
                                       # UNRESOLVED: torch symbols no library of its DT_NEEDED tree (nor the
                                       # global scope `import torch` makes) exports, with the library that does
        }
      ]
    }

``cpython_abi``: NON-ABI3 when an object uses non-limited CPython symbols; ABI3-MISMATCH when
it stays in the limited API but needs a newer Python than the abi3 tag; ABI3 when it stays
within both; NO-PYTHON when no object references the CPython API.  Fields are only ever added.

An object is an abi3 object when its name says ``.abi3.`` or it sits in an abi3-tagged wheel
without a ``.cpython-3XX`` name; only for those is ``min_python`` (the limited-API floor)
reported: a full-API object may use a symbol that joined the limited API late (PyObject_Vectorcall,
3.12) while the full API had it long before. ``floor_too_low`` compares the wheel's
``Requires-Dist: torch`` lower bound with ``min_torch``, and ``Requires-Python`` with the abi3 tag
and ``min_python``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from assembler.audit.gate import PYTHON_FULL, PYTHON_LIMITED, PYTHON_NONE, Verdict, floor_findings, worst_torch

SCHEMA = 1


@dataclass(frozen=True)
class ElfReport:
    path: str
    kind: str
    torch_abi: Verdict
    stable_shim: int
    unstable: int
    unstable_symbols: tuple[str, ...]
    min_torch: str | None
    min_torch_symbols: tuple[str, ...]
    unknown_shim_symbols: tuple[str, ...]
    abi3_compliant: bool
    abi3_violations: tuple[str, ...]
    min_python: str | None
    min_python_symbols: tuple[str, ...]
    newer_than_tag: dict[str, str]
    needed: tuple[str, ...]
    # limited: an abi3 object (its name says .abi3., or it sits in an abi3-tagged wheel), whose
    # min_python is the limited-API floor; full: built for one CPython's full API, no limited-API
    # floor is reported (min_python null); none: uses no CPython symbol (NO-PYTHON)
    python_api: str = PYTHON_LIMITED
    # symbols its load scope cannot resolve: torch's -> the torch library that exports it; any
    # other -> gate.NOWHERE (no library of its DT_NEEDED tree defines it)
    unresolved: dict[str, str] = field(default_factory=dict)
    # why its non-torch imports were not judged (a library of its tree is not here), or None
    unjudged_imports: str | None = None
    error: str | None = None  # INCOMPLETE: why it could not be read (a limit, corruption); the other fields are empty

    @classmethod
    def unreadable(cls, path: str, error: str) -> ElfReport:
        """An object the audit could not read: INCOMPLETE, with the reason, so the others still report."""
        return cls(path=path, kind="unknown", torch_abi=Verdict.INCOMPLETE, stable_shim=0, unstable=0,
                   unstable_symbols=(),
                   min_torch=None, min_torch_symbols=(), unknown_shim_symbols=(), abi3_compliant=False,
                   abi3_violations=(),
                   min_python=None, min_python_symbols=(), newer_than_tag={}, needed=(), python_api=PYTHON_NONE,
                   error=error)

    @property
    def uses_python(self) -> bool:
        """Whether it references the CPython API at all (module entry points aside)."""
        return self.python_api == PYTHON_FULL or bool(self.min_python or self.abi3_violations)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "torch_abi": str(self.torch_abi),
            "stable_shim": self.stable_shim,
            "unstable": self.unstable,
            "unstable_symbols": list(self.unstable_symbols),
            "min_torch": self.min_torch,
            "min_torch_symbols": list(self.min_torch_symbols),
            "unknown_shim_symbols": list(self.unknown_shim_symbols),
            "abi3_compliant": self.abi3_compliant,
            "abi3_violations": list(self.abi3_violations),
            "min_python": self.min_python,
            "min_python_symbols": list(self.min_python_symbols),
            "newer_than_tag": dict(self.newer_than_tag),
            "needed": list(self.needed),
            "python_api": self.python_api,
            "unresolved": dict(self.unresolved),
            **({"unjudged_imports": self.unjudged_imports} if self.unjudged_imports is not None else {}),
            **({"error": self.error} if self.error is not None else {}),
        }


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


@dataclass(frozen=True)
class AuditReport:
    path: str
    kind: str
    tags: tuple[str, ...]
    abi3_floor: str | None
    extensions: tuple[ElfReport, ...]
    sources: dict[str, str]
    requires_torch: str | None = None  # the wheel's Requires-Dist on torch ("torch>=2.11"), without extras
    requires_python: str | None = None  # its Requires-Python (">=3.9")
    not_elf: tuple[str, ...] = ()  # named like a shared object but not ELF (a text x.so): not audited
    unsafe_names: tuple[str, ...] = ()  # UNSAFE-PATH: member names that install outside the target

    @property
    def declared_torch(self) -> str | None:
        """The lowest torch ``requires_torch`` admits (None: no lower bound)."""
        return lower_bound(self.requires_torch.removeprefix("torch")) if self.requires_torch else None

    @property
    def declared_python(self) -> str | None:
        return lower_bound(self.requires_python) if self.requires_python else None

    @property
    def torch_abi(self) -> Verdict:
        return worst_torch(e.torch_abi for e in self.extensions)

    @property
    def min_torch(self) -> str | None:
        return max((e.min_torch for e in self.extensions if e.min_torch), key=_version_key, default=None)

    @property
    def min_python(self) -> str | None:
        return max((e.min_python for e in self.extensions if e.min_python), key=_version_key, default=None)

    @property
    def cpython_abi(self) -> Verdict:
        if any(e.abi3_violations for e in self.extensions):
            return Verdict.NON_ABI3
        if any(e.newer_than_tag for e in self.extensions):
            return Verdict.ABI3_MISMATCH
        return Verdict.ABI3 if any(e.uses_python for e in self.extensions) else Verdict.NO_PYTHON

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "path": self.path,
            "kind": self.kind,
            "tags": list(self.tags),
            "abi3_floor": self.abi3_floor,
            "torch_abi": str(self.torch_abi),
            "min_torch": self.min_torch,
            "cpython_abi": str(self.cpython_abi),
            "min_python": self.min_python,
            "sources": dict(self.sources),
            "extensions": [e.to_json() for e in self.extensions],
            "requires_torch": self.requires_torch,
            "requires_python": self.requires_python,
            "floor_too_low": [f.line for f in floor_findings(self)],
            "not_elf": list(self.not_elf),
            "unsafe_names": list(self.unsafe_names),
        }


def lower_bound(specifiers: str) -> str | None:
    """The lowest version a PEP 440 specifier set admits, as written (``>=2.11``, ``==2.11.*``,
    ``~=2.11``, ``>2.10``); None when it has no lower bound or does not parse."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        specs = SpecifierSet(specifiers.strip().strip("()"))
    except InvalidSpecifier:
        return None
    bounds = []
    for spec in specs:
        if spec.operator in (">=", ">", "==", "~=", "==="):
            text = spec.version.removesuffix(".*")
            try:
                bounds.append((Version(text), text))
            except InvalidVersion:
                continue
    return max(bounds)[1] if bounds else None
