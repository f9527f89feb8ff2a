"""`assemble migrate DEP`: steps 2 and 3 of a migration, mechanically. The checkout is assessed
(which lines the build compiles), the rewrites of ``migration_rewrites.json`` run step by step
(registration, headers and types, call forms) on those lines, and each step that changed
something becomes one commit on ``assemble/DEP`` in ``forks/DEP``, its subject saying what was
rewritten; `assemble export DEP` then writes them as patches. What is left (uses without a
mechanical rewrite, rewrites declined for a hazard or the torch-target) is reported by
``file:line`` with the suggested approach. Then `check` runs on the result and the report says
how many units went from UNSTABLE to CLEAN. When the dependency has a ``.clang-format``, the
lines each step touched are formatted in that style and no other line (migration/clangformat.py).

pybind11 modules are not converted here yet: they are reported (the pybind11 surface of
`assess` says what to convert), as are TensorOptions, device guards and streams."""

from __future__ import annotations

import difflib
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.errors import InputError, WouldLoseWorkError
from assembler.manifest import Dependency
from assembler.manifest.model import CUDA
from assembler.migration.lexer import blank_comments_and_strings
from assembler.migration.pybind import GENERATED_MARK, ModuleEdit
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
STYLE_VALUES = {"data-ptr": ("const-mutable", "mutable"),
                # the dispatch key a converted pybind11 module's operators register for; by default CUDA
                # when the dependency builds a CUDA unit, else CPU (a pybind11 function takes any device)
                "dispatch-key": ("CUDA", "CPU", "CompositeExplicitAutograd")}


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
    schemas: list[str] = field(default_factory=list)  # the generated operator schemas, each parsed by torch
    remaining: list[dict[str, Any]] = field(default_factory=list)
    before: CheckSummary | None = None
    after: CheckSummary | None = None
    seconds: float = 0.0
    formatted_with: str | None = None  # the project's clang-format style file the touched lines were formatted in
    format_errors: list[str] = field(default_factory=list)

    @property
    def went_clean(self) -> int | None:
        if self.before is None or self.after is None:
            return None
        return max(0, self.after.clean - self.before.clean)

    def to_json(self) -> dict[str, Any]:
        return {"dep": self.dep, "rewrites_version": self.rewrites_version, "dry_run": self.dry_run,
                "steps": [s.to_json() for s in self.steps], "declined": self.declined, "schemas": self.schemas, "remaining": self.remaining,
                "check": {"before": None if self.before is None else self.before.to_json(),
                          "after": None if self.after is None else self.after.to_json(), "went_clean": self.went_clean},
                "clang_format": {"style": self.formatted_with, "errors": self.format_errors},
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
        cuda = any(unit.language == CUDA for unit in assessed.units)
        key = style.get("dispatch-key", "CUDA" if cuda else "CPU")
        modules = _pybind11_modules(workspace, dep, files, report, checkout, key)
        needed, keep_unstable = _plan(files, rewrites, dep.torch_target, style, ruleset, modules)
        for step, subject in rewrites.steps.items():
            result = StepResult(step, subject)
            originals: dict[Path, str] = {}  # what each changed file held before this step
            for path, file in files.items():
                before = file.text
                made_before = Counter(file.made)
                if step == "registration" and path in modules:
                    _apply_modules(file, modules[path])
                apply_step(rewrites.of_step(step), file, dep.torch_target, style)
                if step == "headers-and-types":
                    rewrite_includes(file, needed[path], rewrites.unstable_includes, keep_unstable)
                if file.text != before:
                    _format_touched(file, before, path, checkout, report)
                    rel = path.relative_to(checkout).as_posix()
                    result.files.append(rel)
                    result.made += file.made - made_before
                    result.diff += "".join(difflib.unified_diff(before.splitlines(True), file.text.splitlines(True), f"a/{rel}", f"b/{rel}"))
                    originals[path] = before
            if not result.files:
                continue
            result.subject = _subject(subject, result.made)
            if not dry_run:
                _commit_step(tree, result, rewrites, step, {path: files[path].text for path in originals}, originals)
            report.steps.append(result)
        for path, file in files.items():
            rel = path.relative_to(checkout).as_posix()
            report.declined += [as_json(d, rel) for d in _unique(file.declined)]
            active = {i + 1 for i, flag in enumerate(file.active) if flag}
            for found in match_rules(ruleset, blank_comments_and_strings(file.text), active):
                report.remaining.append({"at": f"{rel}:{found.line}", "rule": found.rule.id, "api": found.rule.api,
                                         "kind": found.rule.kind.value, "stable": found.rule.stable,
                                         "approach": found.rule.way_round or found.rule.stable or ""})
            for schema, approach in (item for edit in modules.get(path, []) for item in edit.unsure):
                where = file.text.find(f'm.def("{schema}")')
                report.remaining.append({"at": f"{rel}:{file.text.count(chr(10), 0, max(where, 0)) + 1}", "rule": "schema-mutation",
                                         "api": "the arguments a schema marks written", "kind": "judgment", "stable": None,
                                         "approach": approach})
        if check and not dry_run:
            report.after = _check(workspace, dep.name, note)
    report.seconds = time.monotonic() - started
    return report


def _commit_step(tree: Any, result: StepResult, rewrites: RewriteSet, step: str, texts: dict[Path, str],
                 originals: dict[Path, str]) -> None:
    """Write the step's files and commit them; when that fails, the files get back what they
    held before the step, so no half-rewritten checkout is left behind."""
    from assembler.errors import AssembleError

    try:
        for path, text in texts.items():
            _write(path, text)
        tree.run("add", "--", *result.files)
        tree.run("commit", "--quiet", "--no-verify", "-m", result.subject, "-m", _body(result, rewrites), env=AUTHOR)
    except AssembleError:
        tree.run("reset", "--quiet", "--", *result.files, check=False)
        for path, text in originals.items():
            _write(path, text)
        raise
    trailers = _generated_registrations(tree.out("show", "--format=", "HEAD")) if step == "registration" else []
    if trailers:  # the converted modules are review's to flag: name them, so a person knows what to read
        tree.run("commit", "--quiet", "--amend", "--no-verify", "-m", result.subject, "-m", _body(result, rewrites),
                 "-m", "\n".join(trailers), env=AUTHOR)
    result.commit = tree.out("rev-parse", "HEAD")


def _format_touched(file: FileRewrite, before: str, path: Path, checkout: Path, report: MigrateReport) -> None:
    """The lines this step changed, in the project's clang-format style when it has one
    (migration/clangformat.py); untouched lines stay as they are."""
    from assembler.migration.clangformat import FormatFailed, executable, reformat, style_file, touched_lines

    style = style_file(path, checkout)
    if style is None:
        return
    rel = path.relative_to(checkout).as_posix()
    binary = executable()
    if binary is None:
        report.format_errors.append(f"{rel}: {style.name} found, but clang-format is not installed (pip install clang-format)")
        return
    try:
        formatted = reformat(file.text, file.active, touched_lines(before, file.text), path, style, binary)
    except FormatFailed as error:
        report.format_errors.append(f"{rel}: {error}; left as rewritten")
        return
    file.text, file.active = formatted.text, formatted.active
    report.formatted_with = style.relative_to(checkout.resolve()).as_posix()


def _pybind11_modules(workspace: Workspace, dep: Dependency, files: dict[Path, FileRewrite], report: MigrateReport,
                      checkout: Path, key: str) -> dict[Path, list[ModuleEdit]]:
    """The pybind11 modules to convert, per file, each schema parsed by the build torch; a
    module with a binding that cannot be converted, or a schema torch refuses, is reported and
    left whole."""
    from assembler.migration.assess import _active_only, _definition_body, _signature
    from assembler.migration.pybind import convert_modules, parse_schemas
    from assembler.toolchain.torchenv import ensure_build_env

    codes = {path: _active_only(blank_comments_and_strings(file.text), {i + 1 for i, f in enumerate(file.active) if f})
             for path, file in files.items()}
    every = {path: blank_comments_and_strings(file.text) for path, file in files.items()}  # a guarded binding's function too
    namespace = re.sub(r"\W", "_", dep.name)
    found: dict[Path, list[ModuleEdit]] = {}
    for path, file in files.items():
        if "PYBIND11_MODULE" not in codes[path]:
            continue
        edits, declined = convert_modules(file.text, namespace, key, dep.build.backend == "setuptools",
                                          lambda name: _signature(codes, name) or _signature(every, name),
                                          lambda name: _definition_body(codes, name))
        rel = path.relative_to(checkout).as_posix()
        report.declined += [{"at": f"{rel}:{line}", "rewrite": "pybind11-module", "reason": reason} for line, reason in declined]
        if not edits:
            continue
        torch = workspace.manifest.bundle.torch
        python = ensure_build_env(torch).python if torch else None
        kept = []
        for edit in edits:
            refused = [] if python is None else [(s, e) for s, e in parse_schemas(python, edit.schemas) if e is not None]
            if python is None:
                refused = [(s, "no [bundle] torch to parse the schema with") for s in edit.schemas]
            if refused:
                report.declined += [{"at": f"{rel}:{edit.line}", "rewrite": "pybind11-module",
                                     "reason": f"torch._C.parse_schema refused {schema!r}: {error}"} for schema, error in refused]
            else:
                kept.append(edit)
                report.schemas += edit.schemas
        if kept:
            found[path] = kept
    return found


def _generated_registrations(diff: str) -> list[str]:
    """``Migration-Review:`` trailers for the hunks that hold a converted pybind11 module:
    review's criterion flags them (new code), and this says where they came from."""
    from assembler.migration.review import parse_patch

    _, _, hunks = parse_patch(diff)
    return [f"Migration-Review: {hunk.id} the pybind11 module, converted by assemble migrate; each schema parsed by "
            "torch._C.parse_schema: check the names, defaults and the wrappers" for hunk in hunks
            if any(GENERATED_MARK in line for line in hunk.added)]


def _apply_modules(file: FileRewrite, edits: list[ModuleEdit]) -> None:
    """Replace each module's text; the new lines are compiled as the module's were."""
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        first = file.text.count("\n", 0, edit.start)
        last = file.text.count("\n", 0, edit.end)
        file.text = file.text[:edit.start] + edit.replacement + file.text[edit.end:]
        file.active[first:last + 1] = [True] * (edit.replacement.count("\n") + 1)
        file.made["pybind11-module"] += 1
        file.includes.add("torch/csrc/stable/library.h")
        if "PyModule_Create" in edit.replacement:
            file.includes.add("Python.h")


def _flags(path: Path, lines: set[int]) -> list[bool]:
    count = path.read_text(encoding="utf-8").count("\n") + 1
    return [number + 1 in lines for number in range(count)]


def _plan(files: dict[Path, FileRewrite], rewrites: RewriteSet, target: str, style: dict[str, str],
          ruleset: RuleSet, modules: dict[Path, list[ModuleEdit]]) -> tuple[dict[Path, set[str]], bool]:
    """A trial run of every step on copies: the stable headers each file will need, and
    whether any use is left anywhere (then the unstable includes stay, so what is not yet
    migrated still compiles)."""
    needed: dict[Path, set[str]] = {}
    left = False
    for path, file in files.items():
        trial = FileRewrite(file.text, list(file.active))
        if path in modules:
            _apply_modules(trial, modules[path])
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

