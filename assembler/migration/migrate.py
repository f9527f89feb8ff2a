"""`assemble migrate DEP`: steps 2 and 3 of a migration, mechanically. The checkout is assessed
(which lines the build compiles), the rewrites of ``migration_rewrites.json`` run step by step
(registration, headers and types, call forms) on those lines, and each step that changed
something becomes one commit on ``assemble/DEP`` in ``forks/DEP``, its subject saying what was
rewritten; `assemble export DEP` then writes them as patches. What is left (uses without a
mechanical rewrite, rewrites declined for a hazard or the torch-target) is reported by
``file:line`` with the suggested approach. Then `check` runs on the result and the report says
how many units went from UNSTABLE to CLEAN.

pybind11 modules are not converted here yet: they are reported (the pybind11 surface of
`assess` says what to convert), as are TensorOptions, device guards and streams."""

from __future__ import annotations

import difflib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.errors import InputError, WouldLoseWorkError
from assembler.migration.lexer import blank_comments_and_strings
from assembler.migration.rewrite import (
    Declined,
    FileRewrite,
    RewriteSet,
    apply_step,
    as_json,
    load_rewrites,
    rewrite_includes,
)
from assembler.migration.rules import RuleSet, load_rules, match_rules
from assembler.workspace import Workspace

Note = Callable[[str], None]
AUTHOR = {"GIT_AUTHOR_NAME": "assemble migrate", "GIT_AUTHOR_EMAIL": "assemble@localhost"}
STYLE_VALUES = {"data-ptr": ("const-mutable", "mutable")}


@dataclass
class StepResult:
    step: str
    subject: str
    made: Counter[str] = field(default_factory=Counter)
    files: list[str] = field(default_factory=list)
    commit: str | None = None
    diff: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "subject": self.subject, "made": dict(self.made), "files": self.files, "commit": self.commit}


@dataclass
class CheckSummary:
    verdict: str | None
    clean: int
    total: int

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "clean": self.clean, "total": self.total}


@dataclass
class MigrateReport:
    dep: str
    rewrites_version: str
    dry_run: bool
    steps: list[StepResult] = field(default_factory=list)
    declined: list[dict[str, Any]] = field(default_factory=list)
    remaining: list[dict[str, Any]] = field(default_factory=list)
    before: CheckSummary | None = None
    after: CheckSummary | None = None
    seconds: float = 0.0

    @property
    def went_clean(self) -> int | None:
        if self.before is None or self.after is None:
            return None
        return max(0, self.after.clean - self.before.clean)

    def to_json(self) -> dict[str, Any]:
        return {"dep": self.dep, "rewrites_version": self.rewrites_version, "dry_run": self.dry_run,
                "steps": [s.to_json() for s in self.steps], "declined": self.declined, "remaining": self.remaining,
                "check": {"before": None if self.before is None else self.before.to_json(),
                          "after": None if self.after is None else self.after.to_json(), "went_clean": self.went_clean},
                "seconds": round(self.seconds, 3)}


def read_style(path: Path | None) -> dict[str, str]:
    """``--style FILE``: a TOML table of per-project choices, e.g. ``data-ptr = "mutable"``."""
    if path is None:
        return {}
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: unreadable style file ({error})", hint='write e.g. data-ptr = "const-mutable"') from None
    style: dict[str, str] = {}
    for key, value in data.items():
        if key not in STYLE_VALUES or value not in STYLE_VALUES[key]:
            choices = "; ".join(f"{k} = {' | '.join(v)}" for k, v in STYLE_VALUES.items())
            raise InputError(f"{path}: {key} = {value!r} is not a style setting", hint=f"the settings: {choices}")
        style[key] = str(value)
    return style


def run_migrate(workspace: Workspace, name: str, style: dict[str, str], dry_run: bool = False, check: bool = True,
                note: Note = lambda _: None) -> MigrateReport:
    from assembler.git.process import WorkTree
    from assembler.migration.assess import run_assess

    started = time.monotonic()
    dep = workspace.manifest.select([name])[0]
    rewrites = load_rewrites()
    ruleset = load_rules()
    report = MigrateReport(dep.name, rewrites.version, dry_run)
    with workspace.lock():
        assessed = run_assess(workspace, [dep.name], note=note).deps[0]
        if assessed.error is not None:
            raise assessed.error
        checkout = workspace.fork_path(dep)
        tree = WorkTree(checkout)
        dirty = tree.dirty()
        if dirty and not dry_run:
            raise WouldLoseWorkError(f"{dep.name}: forks/{dep.name} has uncommitted edits ({', '.join(dirty[:5])})",
                                     hint=f"commit or stash them in forks/{dep.name} first; migrate commits its own steps")
        if check and not dry_run:
            report.before = _check(workspace, dep.name, note)
        files = {path: FileRewrite(path.read_text(encoding="utf-8"), _flags(path, lines)) for path, lines in sorted(assessed.active.items())}
        needed, keep_unstable = _plan(files, rewrites, dep.torch_target, style, ruleset)
        for step, subject in rewrites.steps.items():
            result = StepResult(step, subject)
            for path, file in files.items():
                before = file.text
                made_before = Counter(file.made)
                apply_step(rewrites.of_step(step), file, dep.torch_target, style)
                if step == "headers-and-types":
                    rewrite_includes(file, needed[path], rewrites.unstable_includes, keep_unstable)
                if file.text != before:
                    rel = path.relative_to(checkout).as_posix()
                    result.files.append(rel)
                    result.made += file.made - made_before
                    result.diff += "".join(difflib.unified_diff(before.splitlines(True), file.text.splitlines(True), f"a/{rel}", f"b/{rel}"))
                    if not dry_run:
                        _write(path, file.text)
            if not result.files:
                continue
            result.subject = _subject(subject, result.made)
            if not dry_run:
                tree.run("add", "--", *result.files)
                tree.run("commit", "--quiet", "--no-verify", "-m", result.subject, "-m", _body(result, rewrites), env=AUTHOR)
                result.commit = tree.out("rev-parse", "HEAD")
            report.steps.append(result)
        for path, file in files.items():
            rel = path.relative_to(checkout).as_posix()
            report.declined += [as_json(d, rel) for d in _unique(file.declined)]
            active = {i + 1 for i, flag in enumerate(file.active) if flag}
            for found in match_rules(ruleset, blank_comments_and_strings(file.text), active):
                report.remaining.append({"at": f"{rel}:{found.line}", "rule": found.rule.id, "api": found.rule.api,
                                         "kind": found.rule.kind.value, "stable": found.rule.stable,
                                         "approach": found.rule.way_round or found.rule.stable or ""})
        if check and not dry_run:
            report.after = _check(workspace, dep.name, note)
    report.seconds = time.monotonic() - started
    return report


def _flags(path: Path, lines: set[int]) -> list[bool]:
    count = path.read_text(encoding="utf-8").count("\n") + 1
    return [number + 1 in lines for number in range(count)]


def _plan(files: dict[Path, FileRewrite], rewrites: RewriteSet, target: str, style: dict[str, str],
          ruleset: RuleSet) -> tuple[dict[Path, set[str]], bool]:
    """A trial run of every step on copies: the stable headers each file will need, and
    whether any use is left anywhere (then the unstable includes stay, so what is not yet
    migrated still compiles)."""
    needed: dict[Path, set[str]] = {}
    left = False
    for path, file in files.items():
        trial = FileRewrite(file.text, list(file.active))
        for step in rewrites.steps:
            apply_step(rewrites.of_step(step), trial, target, style)
        needed[path] = set(trial.includes)
        active = {i + 1 for i, flag in enumerate(trial.active) if flag}
        left = left or any(not m.rule.id.startswith("include-") for m in match_rules(ruleset, blank_comments_and_strings(trial.text), active))
    return needed, left


def _unique(declined: list[Declined]) -> list[Declined]:
    seen: set[tuple[int, str]] = set()
    out = []
    for item in declined:
        if (item.line, item.rewrite) not in seen:
            seen.add((item.line, item.rewrite))
            out.append(item)
    return out


def _subject(subject: str, made: Counter[str]) -> str:
    what = ", ".join(f"{count} {name}" for name, count in sorted(made.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{subject} ({what})"


def _body(result: StepResult, rewrites: RewriteSet) -> str:
    lines = [f"Generated by `assemble migrate` (rewrites {rewrites.version}), step {result.step}:"]
    lines += [f"- {name}: {count}" for name, count in sorted(result.made.items())]
    lines.append(f"Files: {', '.join(result.files)}")
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    from assembler.fsutil import atomic_write

    atomic_write(path, text)


def _check(workspace: Workspace, name: str, note: Note) -> CheckSummary:
    from assembler.check.run import CheckOptions, run_check

    report = run_check(workspace, [name], CheckOptions(), note=note)
    dep = report.deps[0]
    if dep.error is not None:
        raise dep.error
    return CheckSummary(None if dep.verdict is None else dep.verdict.value, dep.clean, dep.total)

