"""`assemble audit`: torch Stable-ABI and CPython abi3 status of wheels, trees and shared objects.

Library API::

    from assembler.audit import audit_paths, check
    [report] = audit_paths([Path("dist/x.whl")])
    problems = check(report, "all")      # "torch" | "abi3" | "all"; [] means the gate passes

Every verdict and the gate itself live in :mod:`assembler.audit.gate` (``findings`` is what
``check``, the build's gate and `assemble patches` use). Wheels are read in place (see
:mod:`assembler.audit.member` and :mod:`assembler.audit.deflate`); the JSON schema is
documented in :mod:`assembler.audit.model`.

Names load on first use, so the CLI can read :mod:`assembler.audit.gate` (``--check``'s
choices) without paying for the ELF reader at start-up.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assembler.audit.model import AuditReport, ElfReport
    from assembler.audit.wheel_scan import CHECKS, audit_object, audit_paths, check

__all__ = ["CHECKS", "AuditReport", "ElfReport", "audit_object", "audit_paths", "check"]
_HOME = {"AuditReport": "model", "ElfReport": "model"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'assembler.audit' has no attribute {name!r}")
    return getattr(import_module(f"assembler.audit.{_HOME.get(name, 'wheel_scan')}"), name)
