"""What the gate reads of an audit report, as Protocols: ``audit/gate.py`` judges reports and
``audit/model.py`` builds them with the gate's verdicts, so the gate types its arguments with
these rather than with the model's classes, and the audit's imports point one way
(model -> gate -> shapes; #22). ``model.AuditReport`` and ``model.ElfReport`` satisfy them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class ElfReport(Protocol):
    """One shared object's findings, as the gate reads them."""

    @property
    def path(self) -> str: ...
    @property
    def torch_abi(self) -> str: ...  # a gate.Verdict (a StrEnum)
    @property
    def unstable(self) -> int: ...
    @property
    def unstable_symbols(self) -> tuple[str, ...]: ...
    @property
    def min_torch(self) -> str | None: ...
    @property
    def min_torch_symbols(self) -> tuple[str, ...]: ...
    @property
    def abi3_violations(self) -> tuple[str, ...]: ...
    @property
    def min_python(self) -> str | None: ...
    @property
    def min_python_symbols(self) -> tuple[str, ...]: ...
    @property
    def newer_than_tag(self) -> Mapping[str, str]: ...
    @property
    def uses_python(self) -> bool: ...
    @property
    def needed(self) -> tuple[str, ...]: ...  # DT_NEEDED
    @property
    def unresolved(self) -> Mapping[str, str]: ...  # torch symbol -> the torch library that exports it (UNRESOLVED)
    @property
    def error(self) -> str | None: ...  # INCOMPLETE: why it could not be read


class AuditReport(Protocol):
    """One audited path (a wheel, a directory, a shared object), as the gate reads it."""

    @property
    def path(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def tags(self) -> tuple[str, ...]: ...
    @property
    def abi3_floor(self) -> str | None: ...
    @property
    def extensions(self) -> Sequence[ElfReport]: ...
    @property
    def requires_torch(self) -> str | None: ...
    @property
    def requires_python(self) -> str | None: ...
    @property
    def declared_torch(self) -> str | None: ...
    @property
    def declared_python(self) -> str | None: ...
    @property
    def min_torch(self) -> str | None: ...
    @property
    def min_python(self) -> str | None: ...
    @property
    def unsafe_names(self) -> tuple[str, ...]: ...  # UNSAFE-PATH: member names that install outside the target
