"""The verify result: a dependency x torch-version matrix of PASS / FAIL / SKIPPED cells, each
backed by the individual checks (load, op schema, smoke) that decided it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.markup import escape

UNATTRIBUTED = "(unattributed)"


class Status(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIPPED = "SKIPPED"


@dataclass(frozen=True)
class Diagnosis:
    """Why an extension did not load (see verify.diagnose): the symbol, who needs it, and which
    torch versions of this run export it, read from their own libraries."""

    symbol: str  # as the loader named it (mangled)
    demangled: str  # the C++ name (the symbol itself when it is not a C++ one)
    extension: str  # the extension being loaded
    dependency: str | None  # whose extension it is (None: no dependency claims it)
    needed_by: str  # the object that imports the symbol (the extension, or a library it pulls in)
    needed_by_dependency: str | None
    torch: str  # the installed torch it failed on
    present_in: tuple[str, ...]  # installed torch versions of this run whose libraries export it
    absent_in: tuple[str, ...]
    exported_by: dict[str, str]  # installed torch -> the library exporting it
    last_seen: str | None  # the newest torch older than ``torch`` that exports it
    first_seen: str | None  # else the oldest newer one that does
    shim_introduced: str | None  # a stable-ABI shim symbol: the release that added it (shim table)
    # other imports of ``needed_by`` this torch lacks and another exports (demangled)
    also_missing: tuple[str, ...] = ()
    also_missing_count: int = 0

    @property
    def verdict(self) -> str:
        """One phrase: what the torch table says about the symbol."""
        if self.last_seen:
            text = f"last seen in torch {self.last_seen}"
        elif self.first_seen:
            text = f"first exported by torch {self.first_seen} among those verified"
        elif self.torch in self.present_in:
            text = f"torch {self.torch} does export it ({self.exported_by[self.torch]}): not a torch version mismatch"
        else:
            text = "exported by no torch verified"
        if self.shim_introduced:
            text += f"; added in torch {self.shim_introduced} (stable shim table)"
        return text

    @property
    def evidence(self) -> str:
        present = ", ".join(f"{t} ({self.exported_by[t]})" for t in self.present_in) or "none"
        return f"present in {present}, absent in {', '.join(self.absent_in) or 'none'}"

    def owner(self) -> str:
        dep = self.needed_by_dependency if self.needed_by != self.extension else self.dependency
        return f"{self.needed_by} ({f'dependency {dep}' if dep else 'no dependency claims it'})"

    def lines(self) -> list[str]:
        symbol = self.demangled if self.demangled == self.symbol else f"{self.demangled}  [{self.symbol}]"
        loading = self.extension + (f" (dependency {self.dependency})" if self.dependency else "")
        out = [
            f"missing symbol  {symbol}",
            f"needed by       {self.owner()}",
            *([f"while loading   {loading}"] if self.needed_by != self.extension else []),
            f"torch table     {self.verdict}: {self.evidence}",
        ]
        if self.also_missing_count:
            more = self.also_missing_count - len(self.also_missing)
            out.append(f"also missing    {self.also_missing_count} more: " + "; ".join(self.also_missing)
                       + (f"; and {more} more" if more else ""))
        return out

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(verdict=self.verdict, also_missing=list(self.also_missing), present_in=list(self.present_in),
                    absent_in=list(self.absent_in))
        return data


@dataclass(frozen=True)
class Check:
    # "load", "registered" (the ops an extension's load registered), "op", "smoke", "cuda" (a whole-dependency
    # skip), "process" (the probe died), "channel" (forged results), "environment" (the cached environment changed)
    kind: str
    target: str  # extension path, op schema, or ""
    status: Status
    detail: str = ""
    diagnosis: Diagnosis | None = None  # a load that failed on an undefined symbol
    ops: tuple[str, ...] = ()  # "registered": the operators that appeared in the dispatcher when it loaded

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "target": self.target, "status": self.status.value,
                                "detail": self.detail}
        if self.kind == "registered":
            data["ops"] = list(self.ops)
        if self.diagnosis is not None:
            data["diagnosis"] = self.diagnosis.to_json()
        return data


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
        where = {"load": f"load{target}: ", "registered": f"ops of{target}: ", "smoke": "smoke: "}.get(first.kind, "")
        text = where + first.detail
        if first.diagnosis is not None:
            text += f"; {first.diagnosis.verdict}: {first.diagnosis.evidence}"
        passed = [check for check in self.checks if check.status is Status.PASS]
        if status is Status.SKIPPED and passed:
            text += f" ({_passed(passed)} PASS)"
        return text

    @property
    def ops(self) -> tuple[int, int]:
        """The [verify] ops that passed, of those checked (every declared op is checked or SKIPPED)."""
        declared = [check for check in self.checks if check.kind == "op"]
        return sum(1 for check in declared if check.status is Status.PASS), len(declared)

    @property
    def registered(self) -> int:
        """The operators its extensions' loads registered (with or without [verify] ops)."""
        return sum(len(check.ops) for check in self.checks if check.kind == "registered")

    @property
    def counted(self) -> str:
        """The ops as the matrix counts them: "4/4 ops" (declared ops that passed), else "3 ops
        registered", else "" (nothing about ops is known: not loaded, or no op library)."""
        passed, declared = self.ops
        if declared:
            return f"{passed}/{declared} ops"
        return f"{self.registered} ops registered" if self.registered else ""

    @property
    def short(self) -> str:
        """The cell in a few words, for the markdown matrix: "PASS 4/4 ops", "FAIL 3/4 ops",
        "SKIPPED" ("SKIPPED, 4/4 ops PASS" when only the smoke call was skipped)."""
        status = self.status
        counted = self.counted
        if status is Status.PASS:
            smoke = any(check.kind == "smoke" for check in self.checks)
            return f"PASS {counted or _passed(self.checks)}" + (", smoke" if smoke and counted else "")
        if status is Status.SKIPPED and self.ops[0]:
            return f"SKIPPED, {self.ops[0]}/{self.ops[1]} ops PASS"
        return f"{status.value} {counted}" if counted and status is Status.FAIL else status.value

    @property
    def text(self) -> str:
        """The cell of the terminal table: the short form, and the reason unless it passed."""
        if self.status is Status.PASS:
            return self.short
        counted = f"; {self.counted}" if self.counted and self.status is Status.FAIL else ""
        return f"{self.status.value} {self.reason}{counted}"

    def to_json(self) -> dict[str, Any]:
        passed, declared = self.ops
        return {
            "dep": self.dep, "torch": self.torch, "status": self.status.value, "reason": self.reason,
            "text": self.short, "ops": {"passed": passed, "declared": declared, "registered": self.registered},
            "checks": [check.to_json() for check in self.checks],
        }


def _passed(checks: list[Check]) -> str:
    counts = {kind: sum(1 for c in checks if c.kind == kind) for kind in ("load", "op", "smoke")}
    registered = sum(len(c.ops) for c in checks if c.kind == "registered")
    parts = []
    if counts["load"]:
        parts.append(f"{counts['load']} loaded")
    if registered:
        parts.append(f"{registered} registered")
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
    def build(self) -> str:
        """Which CUDA this torch brings (its torch.version.cuda), and whether a GPU was there."""
        return f"CUDA {self.cuda}" + ("" if self.gpu else ", no GPU") if self.cuda else "CPU-only"

    @property
    def label(self) -> str:
        where = f" ({self.python})" if self.python else ""
        return f"torch {self.installed}{where}\n({self.build})"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "build": self.build}


@dataclass
class VerifyReport:
    wheel: str
    torch: list[TorchInfo]
    deps: list[str]
    cells: dict[tuple[str, str], Cell]
    seconds: float = 0.0
    specs: dict[str, Any] = field(default_factory=dict)  # which ops / smoke specs were used (verify.specs.Specs)
    window: dict[str, Any] | None = None  # `--torch window`: its floor and releases (verify.window.TorchWindow)
    profiles: dict[str, str | None] = field(default_factory=dict)  # dependency -> the build profile the wheel records

    def dep_label(self, dep: str) -> str:
        """A row's name, with the build profile it was built on when not the full build."""
        profile = self.profiles.get(dep)
        return f"{dep} (profile {profile})" if profile else dep

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
            "window": self.window,
            "torch": [info.to_json() for info in self.torch],
            "deps": [{"name": dep, "profile": self.profiles.get(dep)} for dep in self.deps],
            "results": [self.cells[(dep, info.requested)].to_json() for dep in self.deps for info in self.torch],
            "summary": {status.value: self.count(status) for status in Status},
            "seconds": round(self.seconds, 2),
        }

    def markdown(self) -> str:
        """The matrix for release notes: one row per dependency (its build profile named), one
        column per torch (the CUDA it brings), each cell "PASS 4/4 ops" / "FAIL ..." / "SKIPPED"
        with the reason of every cell that did not pass as a numbered note under the table."""
        def escaped(text: str) -> str:
            return " ".join(text.split()).replace("|", "\\|")

        name = self.wheel.rsplit("/", 1)[-1]
        lines = [f"### {escaped(name)}", ""]
        if self.window is not None:
            floor = self.window["floor"]
            lines += [f"Torch window: from {floor['version']} ({escaped(floor['detail'])}) to the newest release on "
                      f"the package index, each minor at its latest patch ({escaped(self.window['index'])}).", ""]
        if any(self.profiles.get(dep) for dep in self.deps):
            reduced = ", ".join(f"{dep}: {self.profiles[dep]}" for dep in self.deps if self.profiles.get(dep))
            lines += [f"Build profiles: {escaped(reduced)}; every other dependency is the full build.", ""]
        lines.append("| dependency | " + " | ".join(f"torch {escaped(i.installed)} ({i.build})" for i in self.torch)
                     + " |")
        lines.append("| --- |" + " --- |" * len(self.torch))
        notes: list[str] = []
        for dep in self.deps:
            row = [escaped(self.dep_label(dep))]
            for info in self.torch:
                cell = self.cells[(dep, info.requested)]
                if cell.status is Status.PASS:
                    row.append(cell.short)
                    continue
                notes.append(f"{len(notes) + 1}. {escaped(dep)} on torch {escaped(info.installed)}: "
                             f"{cell.status.value}: {escaped(cell.reason)}")
                row.append(f"{cell.short} [{len(notes)}]")
            lines.append("| " + " | ".join(row) + " |")
        lines += ["", *notes, *([""] if notes else [])]
        lines.append(", ".join(f"{self.count(s)} {s.value}" for s in Status) + ".")
        return "\n".join(lines) + "\n"

    def render(self, console: Console) -> None:
        from assembler.report.table import Cell as TableCell
        from assembler.report.table import TextTable

        labels = [info.label for info in self.torch]  # free text: a verdict's reason wraps, the names never do
        table = TextTable("dependency", *labels, text=labels, title=f"verify {self.wheel}")
        for dep in self.deps:
            row: list[str | TableCell] = [self.dep_label(dep)]
            for info in self.torch:
                cell = self.cells[(dep, info.requested)]
                style = {Status.PASS: "green", Status.FAIL: "red", Status.SKIPPED: "yellow"}[cell.status]
                row.append(TableCell(cell.text, style))
            table.add_row(*row)
        table.print(console.file)
        failures = [(cell, check) for cell in self.cells.values() for check in cell.checks
                    if check.diagnosis is not None]
        if failures:
            console.print("load failures (symbols from the torch libraries of the verify environments):",
                          soft_wrap=True)
        for cell, check in failures:
            assert check.diagnosis is not None
            console.print(f"  {escape(cell.dep)} on torch {escape(check.diagnosis.torch)}: {escape(check.target)} does "
                          "not load",
                          soft_wrap=True, highlight=False)
            for line in check.diagnosis.lines():
                console.print(f"    {escape(line)}", soft_wrap=True, highlight=False)
        if self.window is not None:
            floor = self.window["floor"]
            console.print(f"torch window: from {escape(floor['version'])} ({escape(floor['detail'])}), each minor's "
                          f"latest patch on the index ({escape(self.window['index'])})", soft_wrap=True,
                          highlight=False)
        if self.specs:
            console.print(f"specs: {escape(self.specs['detail'])}", soft_wrap=True)
        summary = ", ".join(f"{self.count(s)} {s.value}" for s in Status)
        console.print(f"{summary} in {self.seconds:.1f} s")
