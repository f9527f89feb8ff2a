"""`assemble migrate DEP`: steps 2 and 3 of a migration, mechanically. The checkout is assessed
(which lines the build compiles), the rewrites of ``migration_rewrites.json`` run step by step
(registration, headers and types, call forms) on those lines, and each step that changed
something becomes one commit on ``assemble/DEP`` in ``forks/DEP``, its subject saying what was
rewritten; `assemble export DEP` then writes them as patches. What is left (uses without a
mechanical rewrite, rewrites declined for a hazard or the torch-target) is reported by
``file:line`` with the suggested approach. Then `check` runs on the result and the report says
how many units went from UNSTABLE to CLEAN. When the dependency has a ``.clang-format``, the
lines each step touched are formatted in that style and no other line (migration/clangformat.py).

Nothing is committed unproven where a proof is possible (migration/proof.py): each file is
migrated through every step in memory (once keeping its unstable includes and, when no use is
left in it, once without them), the units that read the rewritten files are compiled before
and after, and a file whose units stop compiling goes back to its unstable includes, then to
what it held, and is reported with the compiler's first error as work for a person. A step's
intermediate state is not compiled: a type rewrite needs the call rewrites of the next step
(``torch::stable::Tensor`` has no ``.contiguous()``), so the unit of proof is a file's whole
migration; the commits stay one per step. A dirty checkout is refused before any of this.

A guard on a tensor's own device and the current CUDA stream become calls of one small helper
header (migration/helpers.py) that the step adding the includes writes into the fork, once:
a later run reuses it and appends only a piece it lacks; its hunks carry a ``Migration-Review``
trailer, as generated code a person reads once."""

from __future__ import annotations

import difflib
import posixpath
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assembler.builder.backends import for_dep
from assembler.errors import InputError, WouldLoseWorkError
from assembler.manifest import Dependency
from assembler.manifest.model import CUDA
from assembler.migration import helpers, syntax
from assembler.migration.assess import DECLARATION_HEAD
from assembler.migration.lexer import blank_comments_and_strings, continued_lines
from assembler.migration.pybind import GENERATED_MARK, ModuleEdit
from assembler.migration.registration import WRAPPER_MARK, Library
from assembler.migration.rewrite import (
    RETURNS_TENSOR,
    SOURCE_SUFFIXES,
    Declined,
    FileRewrite,
    RewriteSet,
    apply_step,
    as_json,
    load_rewrites,
    rewrite_includes,
    with_pointers_decided,
)
from assembler.migration.rules import RuleSet, defined_macros, load_rules, match_rules
from assembler.workspace import Workspace

if TYPE_CHECKING:
    from assembler.builder.units import TranslationUnit
    from assembler.migration.proof import Compiled, CompileError

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
        return {"step": self.step, "subject": self.subject, "made": dict(self.made), "files": self.files,
                "commit": self.commit}


@dataclass
class CheckSummary:
    verdict: str | None
    clean: int
    total: int

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "clean": self.clean, "total": self.total}


@dataclass
class ProofSummary:
    """What the compile proof (migration/proof.py) found: the files proven to compile, the
    rewrites not committed because their file stopped compiling (work for a person, with the
    compiler's first error), the unstable includes kept because a unit needs them, and the
    files no unit could prove (a unit that did not compile before the rewrite proves nothing)."""

    compiled: bool = False
    reason: str | None = None  # why nothing was compiled
    changed: int = 0  # files the rewrites changed
    proven: list[str] = field(default_factory=list)
    not_proven: list[dict[str, Any]] = field(default_factory=list)  # {"file", "reason"}
    not_committed: list[dict[str, Any]] = field(default_factory=list)  # {"file", "at", "error", "unit"}
    includes_kept: list[dict[str, Any]] = field(default_factory=list)  # {"file", "at", "error", "unit"}
    # every error of the first compile with each file in its most migrated form: what is left to
    # a person before anything can be committed (the later rounds' errors are what going back made)
    first_errors: list[dict[str, Any]] = field(default_factory=list)  # {"unit", "at", "error"}
    units: list[dict[str, Any]] = field(default_factory=list)  # each proving unit's last compile
    # the rewrites made on lines the build does not compile, with the probe that proved them
    # (_with_unbuilt_probe): {"rewrites", "probe": {"ok", "error", "seconds"}, "rewritten"}; None: not asked
    unbuilt: dict[str, Any] | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"compiled": self.compiled, "reason": self.reason, "changed": self.changed, "proven": len(self.proven),
                "proven_files": self.proven, "not_proven": self.not_proven, "not_committed": self.not_committed,
                "includes_kept": self.includes_kept, "first_errors": self.first_errors, "units": self.units,
                "unbuilt": self.unbuilt, "seconds": round(self.seconds, 3)}


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
    proof: ProofSummary = field(default_factory=ProofSummary)
    helpers: dict[str, Any] | None = None  # the helper header: {"path", "existing", "pieces", "added"}

    @property
    def went_clean(self) -> int | None:
        if self.before is None or self.after is None:
            return None
        return max(0, self.after.clean - self.before.clean)

    def to_json(self) -> dict[str, Any]:
        return {"dep": self.dep, "rewrites_version": self.rewrites_version, "dry_run": self.dry_run,
                "steps": [s.to_json() for s in self.steps], "declined": self.declined, "schemas": self.schemas,
                "remaining": self.remaining,
                "check": {"before": None if self.before is None else self.before.to_json(),
                          "after": None if self.after is None else self.after.to_json(), "went_clean": self.went_clean},
                "clang_format": {"style": self.formatted_with, "errors": self.format_errors},
                "proof": self.proof.to_json(), "helpers": self.helpers, "seconds": round(self.seconds, 3)}


def read_style(path: Path | None) -> dict[str, str]:
    """``--style FILE``: a TOML table of per-project choices, e.g. ``data-ptr = "mutable"``."""
    if path is None:
        return {}
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: unreadable style file ({error})",
                         hint='write e.g. data-ptr = "const-mutable"') from None
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
        checkout = workspace.fork_path(dep)
        if not dry_run:  # before any work: assess alone preprocesses every unit (minutes on a real tree)
            refuse_dirty(checkout, dep.name)
        assessed = run_assess(workspace, [dep.name], note=note).deps[0]
        if assessed.error is not None:
            raise assessed.error
        tree = WorkTree(checkout)
        if check and not dry_run:
            report.before = _check(workspace, dep.name, note)
        files = {path: FileRewrite(path.read_text(encoding="utf-8"), _flags(path, lines))
                 for path, lines in sorted(assessed.active.items())}
        callees = _callees(files)
        macros = defined_macros(blank_comments_and_strings(file.text) for file in files.values())
        own = frozenset(found.group("name") for file in files.values()
                        for found in RETURNS_TENSOR.finditer(blank_comments_and_strings(file.text)))
        for file in files.values():
            file.callees, file.macros, file.own_tensor_functions = callees, macros, own
        rewrites = _with_schemas(workspace, dep, rewrites, files)
        provers: list[Any] = []  # the compile model, made once and only when something is compiled

        def prover() -> Any:
            if not provers:
                from assembler.migration.proof import Prover

                provers.append(Prover(workspace, dep, checkout, note))
            return provers[0]

        if not dry_run:
            rewrites = _with_unbuilt_probe(prover, rewrites, files, dep.torch_target, report.proof)
        cuda = any(unit.language == CUDA for unit in assessed.units)
        key = style.get("dispatch-key", "CUDA" if cuda else "CPU")
        modules = _pybind11_modules(workspace, dep, files, report, checkout, key, rewrites, style, callees)
        libraries = _torch_libraries(workspace, files, report, checkout, modules)
        for unused in _unused_headers(libraries, files, [checkout / unit.source for unit in assessed.units]):
            del files[unused]  # no longer read by the build: left as it is
        needed, left, pieces = _plan(files, rewrites, dep.torch_target, style, ruleset, modules, libraries)
        placement = _helper_placement(tree, checkout, pieces)
        variants = {path: _variants(path, file, rewrites, dep.torch_target, style, modules, needed[path], left[path],
                                    checkout, report, placement.include(path) if pieces[path] and placement else None,
                                    libraries)
                    for path, file in files.items()}
        anywhere = any(left.values())  # unproven: the unstable includes go only when no use is left anywhere
        if dry_run:
            report.proof.reason = "dry run: nothing written, nothing compiled"
            chosen = {path: _default(runs, anywhere) for path, runs in variants.items()}
        else:
            with _helper_written(placement, {name for names in pieces.values() for name in names}):
                chosen = _prove(workspace, dep, checkout, files, variants, anywhere, report.proof, note,
                                list(rewrites.steps).index("headers-and-types"), provers[0] if provers else None)
        if placement is not None:
            report.helpers = _add_helper(chosen, placement, list(rewrites.steps).index("headers-and-types"), checkout)
        for index, (step, subject) in enumerate(rewrites.steps.items()):
            result = StepResult(step, subject)
            originals: dict[Path, str] = {}  # what each changed file held before this step
            texts: dict[Path, str] = {}
            for path, run in chosen.items():
                if run is None or run.texts[index + 1] == run.texts[index]:
                    continue
                before, after = run.texts[index], run.texts[index + 1]
                rel = path.relative_to(checkout).as_posix()
                result.files.append(rel)
                result.made += run.made[index]
                result.diff += "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                                            f"a/{rel}", f"b/{rel}"))
                originals[path], texts[path] = before, after
            if not result.files:
                continue
            result.subject = _subject(subject, result.made)
            if not dry_run:
                header = None if placement is None else placement.path.relative_to(checkout).as_posix()
                _commit_step(tree, result, rewrites, step, texts, originals, header)
            report.steps.append(result)
        for path, file in files.items():
            rel = path.relative_to(checkout).as_posix()
            run = chosen.get(path)
            final = file if run is None else run.final
            if run is not None:
                if report.proof.unbuilt is not None:
                    report.proof.unbuilt["rewritten"] += sum(final.unbuilt.values())
                report.declined += [as_json(d, rel) for d in _unique(final.declined)]
                report.schemas += [schema for edit in modules.get(path, []) for schema in edit.schemas]
                report.schemas += libraries[path].schemas if path in libraries else []
            active = {i + 1 for i, flag in enumerate(final.active) if flag}
            blanked = blank_comments_and_strings(final.text)
            compiled = continued_lines(blanked, active)  # as match_rules counts a line the build compiles
            for found in match_rules(ruleset, blanked, None, macros) if active else []:
                # a use in a branch this build does not compile (#if TARGET_CUDA_ARCH == 120 ... #else):
                # not rewritten (nothing would prove it) yet no less unstable where that branch is built
                use: dict[str, Any] = {"at": f"{rel}:{found.line}", "rule": found.rule.id, "api": found.rule.api,
                                       "kind": found.rule.kind.value, "stable": found.rule.stable,
                                       "approach": found.rule.way_round or found.rule.stable or ""}
                if found.line not in compiled:
                    use["compiled"] = False
                report.remaining.append(use)
            for schema, approach in (item for edit in (modules.get(path, []) if run else []) for item in edit.unsure):
                where = final.text.find(f'm.def("{schema}")')
                line = final.text.count("\n", 0, max(where, 0)) + 1
                report.remaining.append({"at": f"{rel}:{line}", "rule": "schema-mutation",
                                         "api": "the arguments a schema marks written", "kind": "judgment",
                                         "stable": None,
                                         "approach": approach})
        compiled_uses = [use for use in report.remaining
                         if use["rule"] != "schema-mutation" and use.get("compiled", True)]
        _limit_setup_py(workspace, dep, checkout, tree, rewrites, report, dry_run, len(compiled_uses))
        _package_imports(dep, checkout, tree, rewrites, report, dry_run)
        if check and not dry_run:
            report.after = _check(workspace, dep.name, note)
    report.seconds = time.monotonic() - started
    return report


def _read_source(path: Path) -> str | None:
    """A source of the fork as text; None when it cannot be read as UTF-8 (reported, never a traceback)."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _limit_setup_py(workspace: Workspace, dep: Dependency, checkout: Path, tree: Any, rewrites: RewriteSet,
                    report: MigrateReport, dry_run: bool, uses_left: int = 0) -> None:
    """The last step for a dependency with a setup.py of its own: that setup.py asks for abi3
    (migration/setup_py.py), one commit of its own; what it cannot edit safely is declined at
    its line. Without it setuptools tags the module cp3XY-cp3XY and the bundle's gate refuses it.
    Where assemble builds the dependency another way (its CMake, the helper's source lists), the
    setup.py is still what upstream ships with: it is edited when each extension it declares
    compiles only the recipe's units (literal sources), the files this migration covers
    (QuTLASS's); one that compiles anything else (FA2's, with the backward kernels) is left.
    While ``uses_left`` uses of LibTorch remain on lines the build compiles, the step waits (it
    is declined, with the count): under Py_LIMITED_API and TORCH_TARGET_VERSION they would not
    build (DeepGEMM's module, whose rewrites did not compile and were not committed)."""
    from assembler.builder.units import translation_units
    from assembler.migration.setup_py import limit_setup_py

    path = _own_setup_py(dep, checkout)
    if path is None:
        return  # a pyproject-only project, or a project-dir the manifest's checks already refused
    rel = path.relative_to(checkout.resolve()).as_posix()
    original = _read_source(path)
    if not for_dep(dep).setup_py_builds:
        covered = {unit.source for unit in translation_units(workspace, dep, checkout)}
        declared = [sources for _, sources in _setup_py_extensions(path, checkout, original or "")]
        if not declared or any(sources is None or not sources or not sources <= covered for sources in declared):
            return
    if original is None:
        report.declined.append({"at": f"{rel}:1", "rewrite": "limited-api",
                                "reason": "not UTF-8 text (or unreadable): add py_limited_api by hand"})
        return
    if uses_left:
        report.declined.append({"at": f"{rel}:1", "rewrite": "limited-api",
                                "reason": f"{uses_left} uses of LibTorch are left on lines the build compiles, which "
                                          "would not build for the limited API at the torch-target: run migrate "
                                          "again once they are migrated"})
        return
    edit = limit_setup_py(original, workspace.manifest.bundle.python_abi, dep.torch_target)
    report.declined += [{"at": f"{rel}:{line}", "rewrite": "limited-api", "reason": reason}
                        for line, reason in edit.declined]
    if edit.text is None:
        return
    result = StepResult("limited-api", "Build the extensions for the limited API (abi3)")
    result.files.append(rel)
    result.made["py-limited-api"] += len(edit.extensions) + (edit.setup_line is not None)
    if edit.targeted:
        result.made["torch-target-version"] += len(edit.targeted)
    result.diff = "".join(difflib.unified_diff(original.splitlines(True), edit.text.splitlines(True), f"a/{rel}",
                                               f"b/{rel}"))
    result.subject = _subject(result.subject, result.made)
    if not dry_run:
        _commit_step(tree, result, rewrites, result.step, {path: edit.text}, {path: original})
    report.steps.append(result)


def _own_setup_py(dep: Dependency, checkout: Path) -> Path | None:
    """The dependency's own setup.py (resolved), None when it has none inside the checkout."""
    path = (checkout / dep.build.project_dir / "setup.py").resolve()
    if not path.is_relative_to(checkout.resolve()) or not path.is_file() or path.is_symlink():
        return None
    return path


def _setup_py_extensions(path: Path, checkout: Path, text: str) -> list[tuple[str | None, set[str] | None]]:
    """Per extension the setup.py declares, (its module's last name, its sources as
    checkout-relative paths), each None where not a literal: what upstream's own build compiles
    into which Python module."""
    from assembler.migration.setup_py import extensions

    prefix = path.parent.relative_to(checkout.resolve())
    return [(None if name is None else name.rsplit(".", 1)[-1],
             None if sources is None else {posixpath.normpath((prefix / source).as_posix()) for source in sources})
            for name, sources in extensions(text)]


def _package_imports(dep: Dependency, checkout: Path, tree: Any, rewrites: RewriteSet, report: MigrateReport,
                     dry_run: bool) -> None:
    """For a dependency its own setup.py builds: the package's imports of its extension module,
    made relative where the bundle's install rules move both (migration/package_imports.py),
    one commit of its own; a form with no relative spelling is reported at its line. The
    dependency's payload is read as setuptools lays it out: project-dir's .py files at their
    paths, each extension at its dotted name."""
    from assembler.migration.package_imports import MODULE_SUFFIX, extension_names, moved_modules, relative_imports
    from assembler.wheel.merge import install_rules

    if not for_dep(dep).setup_py_builds:
        return
    root = checkout.resolve()
    project = (checkout / dep.build.project_dir).resolve()
    setup = project / "setup.py"
    if not project.is_relative_to(root) or not setup.is_file() or setup.is_symlink():
        return
    prefix = project.relative_to(root).as_posix()

    def in_checkout(path: str) -> str:
        return path if prefix == "." else f"{prefix}/{path}"

    extensions = extension_names(_read_source(setup) or "")
    python = [path.relative_to(project).as_posix() for path in sorted(project.rglob("*.py"))
              if path != setup and path.is_file() and not path.is_symlink()]
    rules = install_rules(dep.install)
    place = {path: target for path in [*python, *(name.replace(".", "/") + MODULE_SUFFIX for name in extensions)]
             for rule in rules if (target := rule.target(path)) is not None}
    if not moved_modules(python, extensions, place):
        return  # the install rules keep every module where its name finds it: nothing to read
    sources = {path: text for path in python if path in place
               and (text := _read_source(project / path)) is not None}
    unreadable = [path for path in python if path in place and path not in sources]
    report.declined += [{"at": f"{in_checkout(path)}:1", "rewrite": "package-import",
                         "reason": "not UTF-8 text (or unreadable): its imports were not read"} for path in unreadable]
    edits = relative_imports(sources, extensions, place)

    report.declined += [{"at": f"{in_checkout(path)}:{line}", "rewrite": "package-import", "reason": reason}
                        for path, line, reason in edits.declined]
    if not edits.texts:
        return
    result = StepResult("package-imports", "Import the extension module relative to its package")
    originals = {project / path: sources[path] for path in edits.texts}
    texts = {project / path: text for path, text in edits.texts.items()}
    for path, text in edits.texts.items():
        rel = in_checkout(path)
        result.files.append(rel)
        result.diff += "".join(difflib.unified_diff(sources[path].splitlines(True), text.splitlines(True),
                                                    f"a/{rel}", f"b/{rel}"))
    result.made["relative-import"] += edits.made
    result.subject = _subject(result.subject, result.made)
    if not dry_run:
        _commit_step(tree, result, rewrites, result.step, texts, originals)
    report.steps.append(result)


def _with_schemas(workspace: Workspace, dep: Dependency, rewrites: RewriteSet,
                  files: dict[Path, FileRewrite]) -> RewriteSet:
    """The dispatcher rewrites with the schemas of the ops the files name, from the build
    torch's registry, asked once (and kept in the check cache, migration/dispatcher.py); only
    where the torch-target has torch_call_dispatcher (its since), else they are declined as
    above the target with nothing asked."""
    from assembler.migration.dispatcher import schemas_for
    from assembler.migration.rewrite import _newer

    wanted = [r for r in rewrites.rewrites if r.type == "dispatcher" and not _newer(r.since, dep.torch_target)]
    codes = [blank_comments_and_strings(file.text) for file in files.values()]
    named = {op for r in wanted for op in r.ops() if any(re.search(rf"\b{op[6:]}\s*\(", code) for code in codes)}
    torch = workspace.manifest.bundle.torch
    if not named or not torch:
        return rewrites
    from assembler.cache import KINDS, cache_root
    from assembler.toolchain.torchenv import ensure_build_env

    try:
        cache: Path | None = cache_root() / KINDS["checks"]
    except OSError:
        cache = None
    schemas = schemas_for(ensure_build_env(torch).python, torch, named, cache)
    return replace(rewrites,
                   rewrites=tuple(replace(r, schemas=schemas) if r in wanted else r for r in rewrites.rewrites))


def _with_unbuilt_probe(prover: Callable[[], Any], rewrites: RewriteSet, files: dict[Path, FileRewrite], target: str,
                        summary: ProofSummary) -> RewriteSet:
    """The replace rewrites allowed on lines the build does not compile (``unbuilt``: literal
    messages), proven once: their replacement of ``UNBUILT_PROBES`` compiled under the target
    in a probe file of migrate's own. Asked only where such a line holds a match with literal
    messages; when the probe does not compile those lines stay as they are, reported as before."""
    from assembler.migration.rewrite import UNBUILT_PROBES, _line_of, _literal_messages, _newer

    codes = [(blank_comments_and_strings(file.text), file.active) for file in files.values()]
    calls: dict[str, list[str]] = {}  # rewrite id -> the probe's calls, as the rewrite writes them
    for r in rewrites.rewrites:
        if not r.unbuilt or r.pattern is None or _newer(r.since, target):
            continue
        written = [r.pattern.sub(r.replacement, call) for call in UNBUILT_PROBES]
        if any(new == old for new, old in zip(written, UNBUILT_PROBES, strict=True)):
            continue  # the probe's calls are not this rewrite's: nothing would prove it
        if any(not active[_line_of(code, found.start())] and _literal_messages(code, found.end() - 1)
               for code, active in codes for found in r.pattern.finditer(code)):
            calls[r.id] = written
    wanted = [r for r in rewrites.rewrites if r.id in calls]
    if not wanted:
        return rewrites
    includes = sorted({name for r in wanted for name in r.includes})
    source = "".join(f"#include <{name}>\n" for name in includes) + "".join(
        f"\nvoid assemble_probe_{index}(bool condition) {{\n" + "".join(f"  {call}\n" for call in calls[r.id]) + "}\n"
        for index, r in enumerate(wanted))
    compiled = prover().probe(source)
    summary.unbuilt = {"rewrites": [r.id for r in wanted], "probe": {"ok": compiled.ok, "error": compiled.first or None,
                                                                     "seconds": round(compiled.seconds, 3)},
                       "rewritten": 0}
    if not compiled.ok:
        return rewrites
    return replace(rewrites, rewrites=tuple(replace(r, unbuilt_proven=True) if r in wanted else r
                                            for r in rewrites.rewrites))


def refuse_dirty(checkout: Path, name: str) -> None:
    """Uncommitted edits in forks/DEP would be mixed into migrate's commits: refused, naming up
    to five of them, before anything else runs (WouldLoseWorkError, exit 4)."""
    from assembler.git.process import WorkTree

    if not (checkout / ".git").exists():
        return  # no checkout yet: assess makes it, clean
    dirty = WorkTree(checkout).dirty()
    if dirty:
        more = f" and {len(dirty) - 5} more" if len(dirty) > 5 else ""
        raise WouldLoseWorkError(f"{name}: forks/{name} has uncommitted edits ({', '.join(dirty[:5])}{more})",
                                 hint=f"commit them (or move them away) in forks/{name} first; migrate commits its "
                                      f"own steps there, or run `assemble migrate {name} --dry-run` to see them "
                                      "without writing")


@dataclass
class FileRun:
    """One file through every step: its text before the first and after each (formatted), what
    each step made, and the last state (declined rewrites, active lines)."""

    texts: list[str]
    made: list[Counter[str]]
    final: FileRewrite

    @property
    def changed(self) -> bool:
        return self.texts[-1] != self.texts[0]


Variants = list[tuple[str, "FileRun | None"]]  # ("drop" | "keep", run), most migrated first; None: no change
DROP, KEEP, ORIGINAL = "drop", "keep", "original"


def _variants(path: Path, file: FileRewrite, rewrites: RewriteSet, target: str, style: dict[str, str],
              modules: dict[Path, list[ModuleEdit]], needed: set[str], left: bool, checkout: Path,
              report: MigrateReport, helper: str | None = None,
              libraries: dict[Path, Library] | None = None) -> Variants:
    """The file migrated keeping its unstable includes and, when no use is left in it, also
    without them (which one is committed the compile proof decides). ``helper``: the quoted
    include of the helper header, for a file whose rewrites call it."""
    keep = _run_file(path, file, rewrites, target, style, modules, needed, True, checkout, report, helper, libraries)
    found: Variants = []
    if not left:
        drop = _run_file(path, file, rewrites, target, style, modules, needed, False, checkout, report, helper,
                         libraries)
        if drop.texts[-1] != keep.texts[-1]:
            found.append((DROP, drop))
    found.append((KEEP, keep if keep.changed else None))
    return found


def _run_file(path: Path, original: FileRewrite, rewrites: RewriteSet, target: str, style: dict[str, str],
              modules: dict[Path, list[ModuleEdit]], needed: set[str], keep_unstable: bool, checkout: Path,
              report: MigrateReport, helper: str | None = None,
              libraries: dict[Path, Library] | None = None) -> FileRun:
    """One file through every step. A rewrite keeps the line breaks, the include step and the
    formatting do not: what was declined so far is moved to the lines it is on afterwards."""
    file = FileRewrite(original.text, list(original.active), callees=original.callees, macros=original.macros,
                       own_tensor_functions=original.own_tensor_functions)
    run = FileRun([file.text], [], file)
    for step in rewrites.steps:
        before = file.text
        made_before = Counter(file.made)
        if step == "registration":
            _apply_registration(file, modules.get(path, []), (libraries or {}).get(path))
        apply_step(rewrites.of_step(step), file, target, style)
        rewritten = file.text
        if step == "headers-and-types":
            rewrite_includes(file, needed, rewrites.unstable_includes, keep_unstable, (helper,) if helper else (),
                             rewrites.replaced_includes, short=path.suffix in SOURCE_SUFFIXES)
        if file.text != before:
            _format_touched(file, before, path, checkout, report)
        if file.text != rewritten and file.declined:
            file.declined = [replace(d, line=_map_line(rewritten, file.text, d.line)) for d in file.declined]
        run.texts.append(file.text)
        run.made.append(file.made - made_before)
    return run


def _default(variants: Variants, anywhere: bool) -> FileRun | None:
    """Without a proof: the unstable includes go only when the whole dependency is clean."""
    labels = dict(variants)
    return labels[DROP] if DROP in labels and not anywhere else labels[KEEP]


def _prove(workspace: Workspace, dep: Dependency, checkout: Path, files: dict[Path, FileRewrite],
           variants: dict[Path, Variants], anywhere: bool, summary: ProofSummary,
           note: Note, include_step: int = 1, prover: Any = None) -> dict[Path, FileRun | None]:
    """Each changed file's most migrated form whose units still compile (migration/proof.py):
    every changed file written in that form, the units that prove them compiled; a unit that
    compiled before and not now first gets back the unstable includes its files dropped, then
    the files its errors are in (else all its rewritten files) go back to what they held; when
    what the unit misses is a standard library name the dropped includes gave (``stderr``,
    ``std::optional``), the file gets that standard header instead. The checkout is left as it
    was; the commits write the chosen forms step by step (``include_step``: the index of the
    step that rewrites the includes)."""
    from assembler.migration import proof

    started = time.monotonic()
    options = {path.resolve(): [*runs, (ORIGINAL, None)] for path, runs in variants.items()
               if any(run for _, run in runs)}
    summary.changed = len(options)
    if not options:
        summary.reason = "nothing to rewrite"
        return {}
    key = {path.resolve(): path for path in files}  # the proof's spelling (the checkout's real path) -> the caller's
    prover = prover or proof.Prover(workspace, dep, checkout, note)
    texts = {path.resolve(): (file.text, file.active) for path, file in files.items()}
    reads = {unit.path: proof.static_reads(unit, prover.checkout, texts.get) for unit in prover.units}
    note(f"{dep.name}: compiling the units that read the {len(options)} rewritten files, before and after")
    chosen, before = proof.baseline_cover(prover, options, reads)
    summary.compiled = True
    for path in options:
        if not chosen.proves.get(path):  # nothing can prove it: as without a proof
            default = _default(variants[key[path]], anywhere)
            options[path] = [*[(label, run) for label, run in options[path] if run is default][:1], (ORIGINAL, None)]
    level = dict.fromkeys(options, 0)
    last = {path: result for path, result in before.items() if result.ok}
    saved = {path: path.read_bytes() for path in options}
    kept: dict[Path, tuple[str, CompileError, str, FileRun | None]] = {}  # file, error, unit, the error's file's form
    std_added: dict[Path, set[str]] = {}  # the standard headers given to a file that dropped an unstable one
    failed: list[tuple[str, CompileError, str, FileRun | None]] = []

    def label(path: Path) -> str:
        return options[path][level[path]][0]

    def rewritten(paths: set[Path] | frozenset[Path]) -> set[Path]:
        """Those of ``paths`` that a proof covers and that are now in a rewritten form."""
        return {path for path in paths if path in options and chosen.proves.get(path) and label(path) != ORIGINAL}

    def outcome(unit: Path) -> proof.Compiled:
        """The unit's last compile; back to what it held before when no rewritten file is left in it."""
        return last.get(unit, before[unit]) if rewritten(reads[unit]) else before[unit]

    try:
        todo = [unit for unit in chosen.units if rewritten(reads[unit.path])]
        rounds = 0
        while todo:
            written = {path: forms[level[path]][1] for path, forms in options.items()}
            for path, run in written.items():
                _write(path, run.texts[-1] if run is not None else saved[path])
            advanced: set[Path] = set()
            rounds += 1
            for result in prover.again(todo):
                if rounds == 1 and not result.ok:
                    summary.first_errors += [{"unit": result.unit.source, "at": error.at, "error": error.text}
                                             for error in result.errors][:_FIRST_ERRORS - len(summary.first_errors)]
                last[result.unit.path] = result
                if result.ok:
                    reads[result.unit.path] = set(result.reads) | {result.unit.path}
                    continue
                mine = sorted(rewritten(reads[result.unit.path] | result.reads))
                culprits = ([path for path in mine if label(path) == DROP]
                            or [path for path in mine if result.first_in(path)] or mine)
                header = _std_header(result.errors)
                for path in culprits:
                    was = label(path)
                    advanced.add(path)
                    if was == DROP and header and len(std_added.setdefault(path, set())) < _STD_HEADERS_AT_MOST \
                            and header not in std_added[path]:
                        # the dropped header gave a standard one (FA2's utils.h read std::optional through it)
                        forms = options[path]
                        run = forms[level[path]][1]
                        assert run is not None
                        forms[level[path]] = (DROP, _with_include(run, header, include_step))
                        std_added[path].add(header)
                        continue
                    level[path] += 1
                    error = result.first_in(path) or result.errors[0]
                    entry = (key[path].relative_to(checkout).as_posix(), error, result.unit.source,
                             written.get(error.path) if error.path is not None else None)
                    if was == DROP:  # the unstable includes stay: the unit needs them
                        kept[path] = entry
                    else:
                        kept.pop(path, None)
                        failed.append(entry)
            todo = [unit for unit in chosen.units if rewritten(reads[unit.path])
                    and (reads[unit.path] & advanced or not last.get(unit.path, before[unit.path]).ok)]
            if not advanced:
                break  # a failure that no rewritten file of the unit answers for: reported as not proven
        for path, name, other in _linked(options, level, saved):  # each now left as it is
            text = (f"declares {name}() as {key[other].relative_to(checkout).as_posix()} does, whose rewrite is not "
                    "committed: left as it is, so that the two still link")
            failed.append((key[path].relative_to(checkout).as_posix(), proof.CompileError(
                key[path].relative_to(checkout).as_posix(), text, path, 0), "", None))
        after_only = _proven_after_only(prover, options, level, saved, chosen, reads, before)
    finally:
        for path, data in saved.items():
            _write(path, data)

    def where(error: CompileError, then: FileRun | None) -> str:
        """The error's place; in a file left as it was, the line the rewritten one came from
        (the include step moves lines)."""
        if error.path is None or then is None or error.path not in options or label(error.path) != ORIGINAL:
            return error.at
        line = _line_before(then.texts[0], then.texts[-1], error.line)
        return f"{key[error.path].relative_to(checkout).as_posix()}:{line}"

    summary.includes_kept = [{"file": file, "at": where(error, then), "error": error.text, "unit": unit}
                             for file, error, unit, then in kept.values()]
    summary.not_committed = [{"file": file, "at": where(error, then), "error": error.text, "unit": unit}
                             for file, error, unit, then in failed]
    summary.units = [outcome(unit.path).to_json() for unit in chosen.units]
    for path in sorted(options):
        if label(path) == ORIGINAL:
            continue
        rel = key[path].relative_to(checkout).as_posix()
        provers = chosen.proves.get(path, [])
        # proven: its units compile after as before, or (none compiled before) one reading it compiles after
        if (provers and all(outcome(unit.path).ok for unit in provers)) or path in after_only:
            summary.proven.append(rel)
        else:
            why = _unproven(path, prover.units, reads, before, chosen.unread)
            summary.not_proven.append({"file": rel, "reason": why})
    summary.seconds = time.monotonic() - started
    return {key[path]: options[path][level[path]][1] for path in options}


_FIRST_ERRORS = 50  # the first compile's errors reported at most (DeepGEMM's last four: 4)


# Standard names an unstable torch header gave through its own includes -> the header that declares them
_STD_HEADERS = {"stderr": "cstdio", "stdout": "cstdio", "printf": "cstdio", "fprintf": "cstdio",
                "snprintf": "cstdio", "optional": "optional", "nullopt": "optional", "vector": "vector",
                "string": "string", "to_string": "string", "tuple": "tuple", "tie": "tuple", "make_tuple": "tuple",
                "unique_ptr": "memory", "shared_ptr": "memory", "make_unique": "memory", "numeric_limits": "limits",
                "function": "functional", "array": "array", "runtime_error": "stdexcept", "mutex": "mutex",
                "unordered_map": "unordered_map", "map": "map", "ostringstream": "sstream", "stringstream": "sstream"}
_STD_HEADERS_AT_MOST = 4  # per file: past that, the unstable includes stay
_UNDECLARED = re.compile(r"""identifier "(\w+)" is undefined|namespace "std" has no member "(\w+)"|"""
                         r"""'(?:std::)?(\w+)' (?:is not a member of 'std'|was not declared in this scope)"""
                         r"""|'(\w+)' in namespace 'std' does not name""")


def _std_header(errors: list[CompileError]) -> str | None:
    """The standard header that declares the first undeclared standard name among ``errors``."""
    for error in errors:
        found = _UNDECLARED.search(error.text)
        name = next((group for group in found.groups() if group), None) if found else None
        if name in _STD_HEADERS:
            return _STD_HEADERS[name]
    return None


def _with_include(run: FileRun, header: str, include_step: int) -> FileRun:
    """``run`` with ``#include <header>`` before the first include of each text from the include
    step on (the texts before it are the file as it was): before the project's headers that
    read the name through the dropped one (FA2's flash_fwd_kernel.h includes utils.h)."""
    def first(text: str) -> int:
        lines = text.split("\n")
        return next((number for number, line in enumerate(lines) if line.lstrip().startswith("#include")), 0)

    texts = list(run.texts)
    for index in range(include_step + 1, len(texts)):
        lines = texts[index].split("\n")
        lines.insert(first(texts[index]), f"#include <{header}>")
        texts[index] = "\n".join(lines)
    at = first(run.final.text)
    active = [*run.final.active[:at], True, *run.final.active[at:]]
    declined = [replace(d, line=d.line + 1 if d.line > at else d.line) for d in run.final.declined]
    return FileRun(texts, run.made, replace(run.final, text=texts[-1], active=active, declined=declined))


_DECLARED = re.compile(DECLARATION_HEAD + r"(?P<name>[A-Za-z_]\w*)\s*\(")
_NOT_A_TYPE = {"return", "new", "else", "case", "throw", "delete", "co_return", "goto"}


def _declared(code: str) -> dict[str, set[str]]:
    """Each function a file declares or defines -> its parameter lists (whitespace dropped)."""
    found: dict[str, set[str]] = {}
    for match in _DECLARED.finditer(code):
        head = match.group("ret").split()
        if not head or head[-1].strip("&*") in _NOT_A_TYPE or "=" in match.group(0):
            continue
        depth, index = 1, match.end()
        while index < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[index], 0)
            index += 1
        closing = index if depth == 0 else match.end()
        found.setdefault(match.group("name"), set()).add("".join(code[match.end():closing].split()))
    return found


def _linked(options: dict[Path, list[tuple[str, FileRun | None]]], level: dict[Path, int],
            saved: dict[Path, bytes]) -> list[tuple[Path, str, Path]]:
    """The files to leave as they are because a function they declare with new parameters is
    declared or defined by a file left as it was (its rewrite did not compile): committed, the
    two would compile each and not link (FA2: the kernels' prototypes in flash_api_torch_lib.cpp,
    their definitions in flash_api.cpp). (file, function, the other file), to a fixpoint."""
    def text(path: Path, form: FileRun | None) -> str:
        return blank_comments_and_strings(form.texts[-1] if form is not None
                                          else saved[path].decode("utf-8", "replace"))

    original = {path: _declared(text(path, None)) for path in options}
    out: list[tuple[Path, str, Path]] = []
    while True:
        left = [path for path, forms in options.items() if forms[level[path]][0] == ORIGINAL
                and any(run is not None for _, run in forms)]
        more = []
        for path, forms in options.items():
            label, run = forms[level[path]]
            if label == ORIGINAL or run is None:
                continue
            now = _declared(text(path, run))
            changed = {name for name, lists in now.items() if lists != original[path].get(name, lists)}
            shared = next(((name, held) for held in left for name in sorted(changed & set(original[held]))), None)
            if shared is not None:
                more.append((path, *shared))
        if not more:
            return out
        for path, name, held in more:
            level[path] = len(options[path]) - 1
            out.append((path, name, held))


def _proven_after_only(prover: Any, options: dict[Path, list[tuple[str, FileRun | None]]], level: dict[Path, int],
                       saved: dict[Path, bytes], chosen: Any, reads: dict[Path, set[Path]],
                       before: dict[Path, Compiled]) -> set[Path]:
    """The rewritten files no unit could prove (every reader failed before the rewrite: on a CPU
    build torch, c10/cuda's generated header is missing, so FlashKDA's and FlashMLA's units
    never compiled as they were) whose first reader compiles after it, under the target, with
    every file in its chosen form. That is proof the file compiles; a reader that still fails
    proves nothing either way (the file stays not proven)."""
    from assembler.migration import proof

    readers: dict[Path, Any] = {}
    for path, forms in options.items():
        if forms[level[path]][0] == ORIGINAL or chosen.proves.get(path):
            continue
        unit = next((unit for unit in prover.units if path in reads.get(unit.path, set())
                     and unit.path in before and not before[unit.path].ok), None)
        if unit is not None:
            readers[path] = unit
    if not readers:
        return set()
    for path, forms in options.items():
        run = forms[level[path]][1]
        _write(path, run.texts[-1] if run is not None else saved[path])
    units = list({unit.path: unit for unit in readers.values()}.values())
    results = {result.unit.path: result for result in prover.compile_all([(unit, proof.TARGET) for unit in units])}
    return {path for path, unit in readers.items() if results[unit.path].ok}


def _line_before(before: str, after: str, line: int) -> int:
    """The line of ``before`` that line ``line`` of ``after`` came from (1-based)."""
    return _map_line(after, before, line)


def _map_line(old: str, new: str, line: int) -> int:
    """The line of ``new`` that line ``line`` of ``old`` became (1-based); a line that went,
    the one that took its place."""
    matcher = difflib.SequenceMatcher(a=old.splitlines(), b=new.splitlines(), autojunk=False)
    for _, i1, i2, j1, j2 in matcher.get_opcodes():
        if i1 < line <= i2 or (i1 == i2 == line - 1):
            return min(j1 + (line - 1 - i1), max(j2 - 1, j1)) + 1
    return line


def _unproven(path: Path, units: list[TranslationUnit], reads: dict[Path, set[Path]], before: dict[Path, Compiled],
              unread: list[Path]) -> str:
    """Why no compile proves ``path``: no unit reads it, or those that do did not compile before."""
    if path in unread:
        return "no unit the build compiles reads it"
    tried = [before[unit.path] for unit in units if path in reads.get(unit.path, set()) and unit.path in before]
    failed = [result for result in tried if not result.ok]
    if failed:
        return f"{failed[0].unit.source} did not compile before the rewrite either: {failed[0].first}"
    return "a unit that reads it stopped compiling for a reason outside the rewritten files"


def _commit_step(tree: Any, result: StepResult, rewrites: RewriteSet, step: str, texts: dict[Path, str],
                 originals: dict[Path, str], header: str | None = None) -> None:
    """Write the step's files and commit them; when that fails, the files get back what they
    held before the step, so no half-rewritten checkout is left behind. ``header``: the helper
    header's path, whose hunks get a review trailer."""
    from assembler.errors import AssembleError
    from assembler.git.commits import commit_paths, head_diff, reword_head

    created = {path for path in texts if not path.exists()}  # the helper header, new
    message = [result.subject, _body(result, rewrites)]
    try:
        for path, text in texts.items():
            _write(path, text)
        commit_paths(tree, result.files, message, AUTHOR)
    except AssembleError:
        for path, text in originals.items():
            if path in created:
                path.unlink(missing_ok=True)
            else:
                _write(path, text)
        raise
    trailers = _generated_trailers(head_diff(tree), header, result)
    if trailers:  # the converted modules are review's to flag: name them, so a person knows what to read
        result.commit = reword_head(tree, [*message, "\n".join(trailers)], AUTHOR)
    else:
        result.commit = tree.head()


def _format_touched(file: FileRewrite, before: str, path: Path, checkout: Path, report: MigrateReport) -> None:
    """The lines this step changed, with the lines aligned under a bracket it moved moved too
    (migration/alignment.py), in the project's clang-format style when it has one
    (migration/clangformat.py); other lines stay as they are."""
    from assembler.migration.alignment import realign
    from assembler.migration.clangformat import FormatFailed, executable, reformat, style_file, touched_lines

    file.text = realign(before, file.text)
    style = style_file(path, checkout)
    if style is None:
        return
    rel = path.relative_to(checkout).as_posix()
    binary = executable()
    if binary is None:
        _once(report.format_errors,
              f"{rel}: {style.name} found, but clang-format is not installed (pip install clang-format)")
        return
    try:
        formatted = reformat(file.text, file.active, touched_lines(before, file.text), path, style, binary)
    except FormatFailed as error:
        _once(report.format_errors, f"{rel}: {error}; left as rewritten")
        return
    file.text, file.active = formatted.text, formatted.active
    report.formatted_with = style.relative_to(checkout.resolve()).as_posix()


def _once(found: list[str], message: str) -> None:
    """A file is migrated in more than one form (with and without its unstable includes): say it once."""
    if message not in found:
        found.append(message)


def _pybind11_modules(workspace: Workspace, dep: Dependency, files: dict[Path, FileRewrite], report: MigrateReport,
                      checkout: Path, key: str, rewrites: RewriteSet, style: dict[str, str],
                      callees: dict[str, list[syntax.Parameters]]) -> dict[Path, list[ModuleEdit]]:
    """The pybind11 modules to convert, per file, each schema parsed by the build torch; a
    module with a binding that cannot be converted, or a schema torch refuses, is reported and
    left whole. A function's body is read with its data pointers as the data-ptr rewrite makes
    them (one it makes const is not a pointer the function may write through)."""
    from assembler.migration.assess import _active_only, _signature
    from assembler.migration.pybind import convert_modules, parse_schemas
    from assembler.toolchain.torchenv import ensure_build_env

    codes = {path: _active_only(blank_comments_and_strings(file.text), {i + 1 for i, f in enumerate(file.active) if f})
             for path, file in files.items()}
    # a guarded binding's function too
    every = {path: blank_comments_and_strings(file.text) for path, file in files.items()}
    namespace = re.sub(r"\W", "_", dep.name)
    # upstream's own setup.py compiles these into its Python modules: a module converted there
    # keeps its PyInit (and its functions) for that build too, whatever builds it here
    setup_py = _own_setup_py(dep, checkout)
    upstream_modules = {} if setup_py is None else {
        source: name for name, sources in _setup_py_extensions(setup_py, checkout, _read_source(setup_py) or "")
        if name is not None and name.isidentifier() for source in sources or ()}
    found: dict[Path, list[ModuleEdit]] = {}
    for path, file in files.items():
        if "PYBIND11_MODULE" not in codes[path]:
            continue
        own_pyinit = for_dep(dep).pyinit_in_sources
        resolved = path.resolve()
        upstream_module = (None if own_pyinit or not resolved.is_relative_to(checkout.resolve())
                           else upstream_modules.get(resolved.relative_to(checkout.resolve()).as_posix()))
        edits, declined = convert_modules(file.text, namespace, key, own_pyinit or upstream_module is not None,
                                          lambda name: _signature(codes, name) or _signature(every, name),
                                          lambda name: _decided_body(codes, every, name, rewrites, callees,
                                                                     dep.torch_target, style),
                                          files={other: f.text for other, f in files.items()}, root=checkout,
                                          pyinit_module=upstream_module)
        rel = path.relative_to(checkout).as_posix()
        report.declined += [{"at": f"{rel}:{line}", "rewrite": "pybind11-module", "reason": reason}
                            for line, reason in declined]
        if not edits:
            continue
        torch = workspace.manifest.bundle.torch
        python = ensure_build_env(torch).python if torch else None
        kept = []
        for edit in edits:
            refused = [] if python is None else [(s, e) for s, e in parse_schemas(python, edit.schemas)
                                                 if e is not None]
            if python is None:
                refused = [(s, "no [bundle] torch to parse the schema with") for s in edit.schemas]
            if refused:
                report.declined += [{"at": f"{rel}:{edit.line}", "rewrite": "pybind11-module",
                                     "reason": f"torch._C.parse_schema refused {schema!r}: {error}"}
                                     for schema, error in refused]
            else:
                kept.append(edit)
        for edit in kept:  # a register_apis helper in another file (a header) is edited there
            found.setdefault(path, []).append(edit)
            for other, part in edit.others:
                found.setdefault(other, []).append(part)
    return found


def _decided_body(codes: dict[Path, str], every: dict[Path, str], name: str, rewrites: RewriteSet,
                  callees: dict[str, list[syntax.Parameters]], target: str, style: dict[str, str]) -> str | None:
    """The body of ``name``'s definition with the data pointers the data-ptr rewrite makes const
    made const; read, as that rewrite reads it, with the macros it defines (FlashKDA's LAUNCH)."""
    from assembler.migration.assess import _definition_body

    body = _definition_body(codes, name, every)
    return None if body is None else with_pointers_decided(body, rewrites, callees, target,
                                                           style.get("data-ptr", "const-mutable"))


def _torch_libraries(workspace: Workspace, files: dict[Path, FileRewrite], report: MigrateReport,
                     checkout: Path, modules: dict[Path, list[ModuleEdit]]) -> dict[Path, Library]:
    """The TORCH_LIBRARY blocks to make stable, per file (migration/registration.py), every final
    schema parsed by the build torch; a file whose blocks cannot be converted, whose schema
    torch refuses, or whose edits would overlap its pybind11 module's (``modules``), is
    reported and left as it is."""
    from assembler.migration.assess import _active_only, _definition_body, _signature
    from assembler.migration.pybind import parse_schemas
    from assembler.migration.registration import convert_libraries
    from assembler.toolchain.torchenv import ensure_build_env

    codes = {path: _active_only(blank_comments_and_strings(file.text), {i + 1 for i, f in enumerate(file.active) if f})
             for path, file in files.items()}
    if not any("TORCH_LIBRARY" in code for code in codes.values()):
        return {}
    every = {path: blank_comments_and_strings(file.text) for path, file in files.items()}
    texts = {path: file.text for path, file in files.items()}
    active = {path: {i + 1 for i, flag in enumerate(file.active) if flag} for path, file in files.items()}
    found, declined = convert_libraries(texts, every, active,
                                        lambda name: _signature(codes, name) or _signature(every, name),
                                        lambda name: _definition_body(codes, name))
    # applied with the file's pybind11 modules, last first (_apply_registration): never overlapping them
    overlapping = {path for path, library in found.items()
                   if any(edit.start < module.end and module.start < edit.end
                          for edit in library.edits for module in modules.get(path, []))}
    declined += [(path, found[path].line, "its registration overlaps the pybind11 module's: convert it by hand")
                 for path in sorted(overlapping)]
    for path, line, reason in declined:
        report.declined.append({"at": f"{path.relative_to(checkout).as_posix()}:{line}", "rewrite": "torch-library",
                                "reason": reason})
    schemas = [schema for path, library in found.items() if path not in overlapping for schema in library.schemas]
    if not schemas and not overlapping:
        return found
    torch = workspace.manifest.bundle.torch
    python = ensure_build_env(torch).python if torch and schemas else None
    refused = dict(parse_schemas(python, schemas)) if python else dict.fromkeys(schemas,
                                                                                "no [bundle] torch to parse it")
    kept = {}
    for path, library in found.items():
        bad = [(schema, refused[schema]) for schema in library.schemas if refused.get(schema)]
        if path in overlapping:
            continue
        if bad:
            rel = path.relative_to(checkout).as_posix()
            report.declined += [{"at": f"{rel}:{library.line}", "rewrite": "torch-library",
                                 "reason": f"torch._C.parse_schema refused {schema!r}: {error}"}
                                 for schema, error in bad]
        else:
            kept[path] = library
    if len(kept) < len(found):  # kernels made boxable where declared: every file that declares them, or none
        kept = {path: library for path, library in kept.items() if not library.signatures}
    return kept


def _unused_headers(libraries: dict[Path, Library], files: dict[Path, FileRewrite], units: list[Path]) -> list[Path]:
    """The headers whose include the registration step removed (migration/registration.py's
    ``unused``) that no other file migrate rewrites and no unit (``units``: their sources)
    includes."""
    headers = sorted({path for library in libraries.values() for path in library.unused if path in files})
    if not headers:
        return []
    blocks = {path.resolve() for path in libraries}  # their include is the one that went
    sources = [file.text for path, file in files.items() if path.resolve() not in blocks]
    sources += [text for unit in units if unit.resolve() not in blocks and (text := _read_source(unit)) is not None]
    return [header for header in headers
            if not any(re.search(rf'#\s*include\s*"(?:[^"]*/)?{re.escape(header.name)}"', text) for text in sources)]


def _apply_registration(file: FileRewrite, modules: list[ModuleEdit], library: Library | None) -> None:
    """A file's pybind11 modules (replaced whole; their new lines compiled as the module's
    were) and its TORCH_LIBRARY blocks' edits (the last new line keeps the old tail's flag),
    together, last first: each edit's offsets are the original text's (QuTLASS's bindings.cpp
    has both; :func:`_torch_libraries` keeps no library whose edits overlap a module's)."""
    edits: list[tuple[int, int, str, bool]] = [(e.start, e.end, e.replacement, True) for e in modules]
    if library is not None:
        edits += [(e.start, e.end, e.text, False) for e in library.edits]
    for start, end, text, module in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        first = file.text.count("\n", 0, start)
        last = file.text.count("\n", 0, end)
        file.text = file.text[:start] + text + file.text[end:]
        lines = [True] * (text.count("\n") + 1)
        if not module and len(lines) > 1:
            lines[-1] = file.active[last] if last < len(file.active) else True
        file.active[first:last + 1] = lines
        if module:
            file.made["pybind11-module"] += 1
            file.includes.add("torch/csrc/stable/library.h")
            if "PyModule_Create" in text:
                file.includes.add("Python.h")
    if library is not None:
        file.made.update(library.made)
        if library.made["torch-library"]:  # not a file whose kernels' signatures alone change
            file.includes.add("torch/csrc/stable/library.h")


def _generated_trailers(diff: str, header: str | None, result: StepResult) -> list[str]:
    """``Migration-Review:`` trailers for the hunks of this step that review's token criterion
    flags, saying why each is migration work: generated code (a converted pybind11 module, the
    helper header, ``header`` its path), else what the step's rewrites moved (an argument order
    a stable function changed, ``*p`` for ``p->``)."""
    from assembler.migration.review import HunkVerdict, judge, parse_patch, vocabulary

    _, _, hunks = parse_patch(diff)
    words = vocabulary(load_rules())
    made = ", ".join(sorted(result.made))
    found = []
    for hunk in hunks:
        if any(WRAPPER_MARK in line for line in hunk.added):
            found.append(f"Migration-Review: {hunk.id} boxable wrappers, generated by assemble migrate for TORCH_BOX: "
                         "check each conversion (int64_t -> int, double -> float) and the tensors marked written")
        elif any(GENERATED_MARK in line for line in hunk.added):
            found.append(f"Migration-Review: {hunk.id} the pybind11 module, converted by assemble migrate; each schema "
                         "parsed by torch._C.parse_schema: check the names, defaults and the wrappers")
        elif header is not None and hunk.file == header:
            found.append(f"Migration-Review: {hunk.id} the helper header, generated by assemble migrate: stable API "
                         "and shim calls only (assembler/migration/helpers.py); read it once")
        else:
            judge(hunk, words)
            if hunk.verdict is not HunkVerdict.FLAGGED:
                continue
            moved = ("the stable function takes the same arguments in another order" if hunk.reordered else
                     f"{' '.join(hunk.removed_tokens) or 'nothing'} -> {' '.join(hunk.added_tokens) or 'nothing'}")
            found.append(f"Migration-Review: {hunk.id} rewritten by assemble migrate ({result.step}: {made}): {moved}")
    return found


def _callees(files: dict[Path, FileRewrite]) -> dict[str, list[syntax.Parameters]]:
    """The functions every file migrate reads declares, by name: what a call's declaration says
    of a tensor's pointer passed to it (``const void*``: read only) holds wherever it is called."""
    callees: dict[str, list[syntax.Parameters]] = {}
    for file in files.values():
        for name, declared in syntax.pointer_parameters(file.text).items():
            callees.setdefault(name, []).extend(declared)
    return callees


def _flags(path: Path, lines: set[int]) -> list[bool]:
    count = path.read_text(encoding="utf-8").count("\n") + 1
    return [number + 1 in lines for number in range(count)]


def _plan(files: dict[Path, FileRewrite], rewrites: RewriteSet, target: str, style: dict[str, str],
          ruleset: RuleSet, modules: dict[Path, list[ModuleEdit]], libraries: dict[Path, Library],
          ) -> tuple[dict[Path, set[str]], dict[Path, bool], dict[Path, set[str]]]:
    """A trial run of every step on copies: the stable headers each file will need, whether a
    use is left in it (then its unstable includes stay, so what is not yet migrated still
    compiles; without one, the proof decides whether they go), and the pieces of the helper
    header its rewrites call."""
    needed: dict[Path, set[str]] = {}
    left: dict[Path, bool] = {}
    pieces: dict[Path, set[str]] = {}
    for path, file in files.items():
        trial = FileRewrite(file.text, list(file.active), callees=file.callees, macros=file.macros,
                             own_tensor_functions=file.own_tensor_functions)
        _apply_registration(trial, modules.get(path, []), libraries.get(path))
        for step in rewrites.steps:
            apply_step(rewrites.of_step(step), trial, target, style)
        needed[path] = set(trial.includes)
        pieces[path] = set(trial.helpers)
        active = {i + 1 for i, flag in enumerate(trial.active) if flag}
        found = match_rules(ruleset, blank_comments_and_strings(trial.text), active, file.macros)
        left[path] = any(not m.rule.id.startswith("include-") for m in found)
    return needed, left, pieces


def _helper_placement(tree: Any, checkout: Path, pieces: dict[Path, set[str]]) -> helpers.Placement | None:
    """Where the helper header is (the fork's own, else beside the files that need it), when a
    file's rewrites call it."""
    users = [path for path, names in pieces.items() if names]
    if not users:
        return None
    from assembler.git.history import tracked

    names = tracked(tree, f"*{Path(helpers.NAME).stem}*.h")
    return helpers.place(checkout, users, helpers.find(checkout, names))


def _read_helper(placement: helpers.Placement) -> str | None:
    """The fork's helper header as it is, or None for a new one."""
    if not placement.existing:
        return None
    try:
        return placement.path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{placement.path}: unreadable helper header ({error})",
                         hint=f"restore it from git (git checkout -- {helpers.NAME}) and run migrate again") from None


@contextmanager
def _helper_written(placement: helpers.Placement | None, pieces: set[str]) -> Iterator[None]:
    """The helper header with every planned piece on disk while the proof compiles (the
    rewritten files include it), then the checkout as it was."""
    if placement is None or not pieces:
        yield
        return
    existing = _read_helper(placement)
    text = helpers.header_text(existing, pieces)
    if text == existing:
        yield
        return
    _write(placement.path, text)
    try:
        yield
    finally:
        if existing is None:
            placement.path.unlink(missing_ok=True)
        else:
            _write(placement.path, existing)


def _add_helper(chosen: dict[Path, FileRun | None], placement: helpers.Placement, step: int,
                checkout: Path) -> dict[Any, Any] | None:
    """The helper header as one more file of the migration, written in the step that adds the
    includes (``step``: its index), holding the pieces the chosen forms call; None when no
    chosen form calls one."""
    used = {name for run in chosen.values() if run is not None for name in run.final.helpers}
    if not used:
        return None
    existing = _read_helper(placement)
    text = helpers.header_text(existing, used)
    rel = placement.path.relative_to(checkout).as_posix()
    have = helpers.pieces_in(existing or "")
    if text != existing:
        old = existing or ""
        texts = [old] * (step + 1) + [text] * (len(next(run for run in chosen.values() if run).texts) - step - 1)
        made: list[Counter[str]] = [Counter() for _ in texts[1:]]
        made[step]["helper-header"] = 1
        key = next((path for path in chosen if path.resolve() == placement.path.resolve()), placement.path)
        chosen[key] = FileRun(texts, made, FileRewrite(text, [True] * (text.count("\n") + 1)))
    return {"path": rel, "existing": placement.existing, "pieces": sorted(used | have), "added": sorted(used - have)}


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


def _write(path: Path, text: str | bytes) -> None:
    from assembler.fsutil import atomic_write

    atomic_write(path, text)


def _check(workspace: Workspace, name: str, note: Note) -> CheckSummary:
    from assembler.check.run import CheckOptions, run_check

    report = run_check(workspace, [name], CheckOptions(), note=note)
    dep = report.deps[0]
    if dep.error is not None:
        raise dep.error
    return CheckSummary(None if dep.verdict is None else dep.verdict.value, dep.clean, dep.total)

