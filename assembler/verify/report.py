"""The verify result: a dependency x torch-version matrix of PASS / FAIL / SKIPPED cells, each
backed by the individual checks (load, op schema, smoke) that decided it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

UNATTRIBUTED = "(unattributed)"


class Status(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIPPED = "SKIPPED"


@dataclass(frozen=True)
class Check:
    kind: str  # "load", "op", "smoke", "cuda" (a whole-dependency skip) or "process"
    target: str  # extension path, op schema, or ""
    status: Status
    detail: str = ""


@dataclass
class Cell:
    """One dependency on one torch version. Never PASS unless every check ran and passed."""

    dep: str
    torch: str
    checks: list[Check] = field(default_factory=list)

    @property
    def status(self) -> Status:
        statuses = {check.status for check in self.checks}
        if Status.FAIL in statuses:
            return Status.FAIL
        if statuses == {Status.PASS}:
            return Status.PASS
        return Status.SKIPPED

    @property
    def reason(self) -> str:
        """The first error line for a FAIL, the skip reason (and what did pass) for a SKIPPED."""
        status = self.status
        if not self.checks:
            return "nothing to verify: no extension, ops or smoke call for this dependency in the wheel"
        if status is Status.PASS:
            return _passed(self.checks)
        first = next(check for check in self.checks if check.status is status)
        target = "" if first.target in first.detail else f" {first.target}"
        where = {"load": f"load{target}: ", "smoke": "smoke: "}.get(first.kind, "")
        text = where + first.detail
        passed = [check for check in self.checks if check.status is Status.PASS]
        if status is Status.SKIPPED and passed:
            text += f" ({_passed(passed)} PASS)"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "dep": self.dep, "torch": self.torch, "status": self.status.value, "reason": self.reason,
            "checks": [{**asdict(check), "status": check.status.value} for check in self.checks],
        }


def _passed(checks: list[Check]) -> str:
    counts = {kind: sum(1 for c in checks if c.kind == kind) for kind in ("load", "op", "smoke")}
    parts = []
    if counts["load"]:
        parts.append(f"{counts['load']} loaded")
    if counts["op"]:
        parts.append(f"{counts['op']} ops")
    if counts["smoke"]:
        parts.append("smoke")
    return ", ".join(parts)


@dataclass(frozen=True)
class TorchInfo:
    requested: str
    installed: str
    cuda: str | None
    gpu: bool
    env: str
    python: str | None = None  # the interpreter given with --python (its own torch), else None

    @property
    def label(self) -> str:
        build = f"CUDA {self.cuda}" + ("" if self.gpu else ", no GPU") if self.cuda else "CPU-only"
        where = f" ({self.python})" if self.python else ""
        return f"torch {self.installed}{where}\n({build})"


@dataclass
class VerifyReport:
    wheel: str
    torch: list[TorchInfo]
    deps: list[str]
    cells: dict[tuple[str, str], Cell]
    seconds: float = 0.0
    specs: dict[str, Any] = field(default_factory=dict)  # which ops / smoke specs were used (verify.specs.Specs)

    def cell(self, dep: str, torch: str) -> Cell:
        return self.cells[(dep, torch)]

    def count(self, status: Status) -> int:
        return sum(1 for cell in self.cells.values() if cell.status is status)

    @property
    def failed(self) -> bool:
        return self.count(Status.FAIL) > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "wheel": self.wheel,
            "ok": not self.failed,
            "specs": self.specs,
            "torch": [asdict(info) for info in self.torch],
            "results": [self.cells[(dep, info.requested)].to_json() for dep in self.deps for info in self.torch],
            "summary": {status.value: self.count(status) for status in Status},
            "seconds": round(self.seconds, 2),
        }

    def render(self, console: Console) -> None:
        table = Table(title=f"verify {self.wheel}", title_justify="left")
        table.add_column("dependency", no_wrap=True)
        for info in self.torch:
            table.add_column(info.label, overflow="fold")
        for dep in self.deps:
            row = [dep]
            for info in self.torch:
                cell = self.cells[(dep, info.requested)]
                style = {Status.PASS: "green", Status.FAIL: "red", Status.SKIPPED: "yellow"}[cell.status]
                row.append(f"[bold {style}]{cell.status.value}[/] {escape(cell.reason)}")
            table.add_row(*row)
        console.print(table)
        if self.specs:
            console.print(f"specs: {escape(self.specs['detail'])}", soft_wrap=True)
        summary = ", ".join(f"{self.count(s)} {s.value}" for s in Status)
        console.print(f"{summary} in {self.seconds:.1f} s")
