"""`assemble audit`: torch Stable-ABI and CPython abi3 status of wheels, trees and shared objects.

Library API (what the build gate calls)::

    from assembler.audit import audit_paths, check
    [report] = audit_paths([Path("dist/x.whl")])
    problems = check(report, "all")      # "torch" | "abi3" | "all"; [] means the gate passes

Wheels are read in place (see :mod:`assembler.audit.member` and :mod:`assembler.audit.deflate`);
the JSON schema is documented in :mod:`assembler.audit.model`.
"""

from assembler.audit.model import AuditReport, ElfReport
from assembler.audit.scan import CHECKS, audit_object, audit_paths, check

__all__ = ["CHECKS", "AuditReport", "ElfReport", "audit_object", "audit_paths", "check"]
