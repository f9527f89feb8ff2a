"""`assemble review`: each hunk of a migration patch, judged by a token criterion. Take the lines
a hunk removes and the lines it adds; drop comments; if the tokens are then equal, the hunk
only reformats or edits comments. Otherwise remove the torch API vocabulary (namespaces,
LibTorch and Stable-ABI names, the punctuation a method-to-function rewrite moves, torch and
pybind11 includes) from both sides: if the identifiers, literals and operators left are equal
in order, the hunk is API-only; else it is FLAGGED, with the tokens that differ, for a person
to read. A flagged hunk is acknowledged by a ``Migration-Review: FILE#N reason`` trailer in the
patch's message (N: the hunk's number within that file, from 1; ``FILE:LINE``, the new side's
first line, also names it).

Tokens do not say whether a hunk compiles (``x.contiguous()`` for ``torch::stable::contiguous(x)``
is API-only and does not). So the series' result, forks/DEP at the pin plus the series, is
compiled too (:mod:`assembler.migration.proof`: each unit that reads a touched file, once, in
the build's compile model) and each error is put on the hunk that wrote its line (``git
blame``: the series' commit, then the hunk whose new side holds the line); an error on a line
the series did not write goes to the first hunk of the last patch that touched its file (an
include it removed, say). Such a hunk is FLAGGED with the compiler's message."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assembler.errors import InputError
from assembler.migration.helpers import INCLUDE as HELPER_INCLUDE
from assembler.migration.lexer import strip_comments, tokens
from assembler.migration.rules import RuleSet, load_rules

if TYPE_CHECKING:
    from assembler.manifest import Dependency
    from assembler.migration.proof import Compiled, CompileError
    from assembler.workspace import Workspace

TRAILER = "Migration-Review"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"](?:torch/|ATen/|c10/|pybind11/|Python\.h|cuda_runtime)")
# the using-declarations migrate writes for the short stable names (rewrite.SHORT_NAMES): part of the API move
_USING_STABLE = re.compile(r"^\s*using\s+(?:torch::stable::Tensor|torch::headeronly::ScalarType)\s*;\s*$")
CODE_SUFFIXES = frozenset({".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx", ".inl"})

# The torch API vocabulary: removed from both sides before they are compared. Namespaces and
# the names of the unstable and the stable API (the rules' equivalents add theirs), and the
# punctuation that moving a receiver into an argument list shifts (t.view(s) -> view(t, s)).
VOCABULARY = frozenset({
    "at", "c10", "torch", "stable", "headeronly", "detail", "accelerator", "std", "py", "pybind11", "cuda",
    "Tensor", "TensorOptions", "ScalarType", "Layout", "Device", "DeviceType", "DeviceIndex", "IntArrayRef",
    "IntHeaderOnlyArrayRef", "HeaderOnlyArrayRef", "optional", "nullopt", "StableIValue",
    "TORCH_CHECK", "STD_TORCH_CHECK", "TORCH_INTERNAL_ASSERT", "TORCH_LIBRARY", "TORCH_LIBRARY_IMPL",
    "TORCH_LIBRARY_FRAGMENT",
    "STABLE_TORCH_LIBRARY", "STABLE_TORCH_LIBRARY_IMPL", "STABLE_TORCH_LIBRARY_FRAGMENT", "TORCH_BOX",
    "PYBIND11_MODULE",
    "TORCH_EXTENSION_NAME", "TORCH_FN", "arg", "def", "impl", "doc",
    "contiguous", "view", "reshape", "transpose", "clone", "zero_", "fill_", "narrow", "select", "flatten", "squeeze",
    "unsqueeze", "copy_", "to", "pad", "amax", "sum", "sum_out", "empty", "empty_like", "new_empty", "zeros",
    "new_zeros",
    "full", "from_blob", "matmul", "subtract", "data_ptr", "const_data_ptr", "mutable_data_ptr", "options", "dtype",
    "device", "layout", "get_device", "get_device_index", "DeviceGuard", "OptionalDeviceGuard", "CUDAGuard",
    "OptionalCUDAGuard", "getCurrentCUDAStream", "get_current_cuda_stream", "aoti_torch_get_current_cuda_stream",
    "torch_call_dispatcher", "aoti_torch_call_dispatcher", "from", "kCPU", "kCUDA", "CPU", "CUDA",
    "::", ".", "->", ",", "(", ")",
})
_DTYPES = re.compile(r"^k?(?:Float|Float32|Half|Float16|BFloat16|Double|Float64|Int|Int32|Long|Int64|Short|Int16"
                     r"|Char|Int8|Byte|UInt8|Bool|ComplexFloat|ComplexDouble|Float8_\w+)$")


class HunkVerdict(StrEnum):
    FORMAT = "format-only"  # comments or whitespace only
    API = "api-only"  # torch API vocabulary only
    FLAGGED = "flagged"  # something else changed: a person reads it

    @property
    def words(self) -> str:
        return {"format-only": "format/comment only", "api-only": "API-only", "flagged": "FLAGGED"}[self.value]


@dataclass
class Hunk:
    file: str
    number: int  # within its file, from 1
    old_start: int
    new_start: int
    header: str
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    verdict: HunkVerdict = HunkVerdict.API
    removed_tokens: list[str] = field(default_factory=list)  # left after the vocabulary, on the old side only
    added_tokens: list[str] = field(default_factory=list)
    acknowledged: str | None = None  # the trailer's reason
    compile_error: str | None = None  # the first error the series' result has on this hunk's lines ("file:line: text")
    new_lines: int = 1  # how many lines its new side spans (the header's count)

    @property
    def id(self) -> str:
        return f"{self.file}#{self.number}"

    @property
    def reordered(self) -> bool:
        """A flagged hunk whose differing tokens are the same on both sides, moved (an argument
        order a stable function changed, or an unrelated swap: a person tells which)."""
        return self.verdict is HunkVerdict.FLAGGED and sorted(self.removed_tokens) == sorted(self.added_tokens)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "file": self.file, "number": self.number, "old_start": self.old_start,
                "new_start": self.new_start,
                "header": self.header, "verdict": self.verdict.value, "removed_tokens": self.removed_tokens,
                "added_tokens": self.added_tokens, "reordered": self.reordered, "acknowledged": self.acknowledged,
                "compile_error": self.compile_error, "removed_lines": len(self.removed), "added_lines": len(self.added)}


@dataclass
class PatchReview:
    patch: str
    subject: str
    hunks: list[Hunk] = field(default_factory=list)
    unknown_acknowledgements: list[str] = field(default_factory=list)  # trailers naming no hunk

    @property
    def unacknowledged(self) -> list[Hunk]:
        return [h for h in self.hunks if h.verdict is HunkVerdict.FLAGGED and h.acknowledged is None]

    def to_json(self) -> dict[str, Any]:
        counts = {verdict.value: sum(1 for h in self.hunks if h.verdict is verdict) for verdict in HunkVerdict}
        return {"patch": self.patch, "subject": self.subject, "counts": counts,
                "unacknowledged": len(self.unacknowledged),
                "unknown_acknowledgements": self.unknown_acknowledgements, "hunks": [h.to_json() for h in self.hunks]}


@dataclass
class SeriesCompile:
    """The series' result compiled: which units, and what no hunk answers for."""

    compiled: bool = False
    reason: str | None = None  # why it was not compiled (no checkout, not the pin plus the series, edits)
    units: list[dict[str, Any]] = field(default_factory=list)
    not_proven: list[dict[str, str]] = field(default_factory=list)  # {"unit", "error"}: a header this machine lacks
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"compiled": self.compiled, "reason": self.reason, "units": self.units, "not_proven": self.not_proven,
                "seconds": round(self.seconds, 3)}


@dataclass
class ReviewReport:
    dep: str
    rules_version: str
    patches: list[PatchReview] = field(default_factory=list)
    compile: SeriesCompile = field(default_factory=SeriesCompile)

    @property
    def exit_code(self) -> int:
        return 1 if any(p.unacknowledged or p.unknown_acknowledgements for p in self.patches) else 0

    def to_json(self) -> dict[str, Any]:
        return {"dep": self.dep, "rules_version": self.rules_version,
                "flagged": sum(len(p.unacknowledged) for p in self.patches),
                "acknowledged": sum(1 for p in self.patches for h in p.hunks if h.acknowledged is not None),
                "not_compiling": sum(1 for p in self.patches for h in p.hunks if h.compile_error is not None),
                "compile": self.compile.to_json(), "patches": [p.to_json() for p in self.patches]}


def vocabulary(ruleset: RuleSet) -> frozenset[str]:
    """VOCABULARY plus every identifier the rules' APIs and equivalents name."""
    words = set(VOCABULARY)
    for rule in ruleset.rules:
        for text in (rule.api, rule.stable or ""):
            words.update(re.findall(r"[A-Za-z_]\w*", text))
    words -= {"t", "sizes", "a", "b", "dim", "op", "fn", "X", "or", "and", "the", "with", "an", "in", "of", "its",
              "name",
              "argument", "operator", "schema", "string", "takes", "index", "stream", "self", "limited"}
    return frozenset(words)


def _kept(lines: list[str], words: frozenset[str]) -> list[str]:
    code = strip_comments("\n".join(line for line in lines
                                     if not _INCLUDE.match(line) and not HELPER_INCLUDE.match(line)
                                     and not _USING_STABLE.match(line)))
    return [t for t in tokens(code) if t not in words and not _DTYPES.match(t)]


def judge(hunk: Hunk, words: frozenset[str]) -> None:
    """Set the hunk's verdict and, when FLAGGED, the tokens that differ."""
    old = tokens(strip_comments("\n".join(hunk.removed)))
    new = tokens(strip_comments("\n".join(hunk.added)))
    if old == new:
        hunk.verdict = HunkVerdict.FORMAT
        return
    old_kept, new_kept = _kept(hunk.removed, words), _kept(hunk.added, words)
    if old_kept == new_kept:
        hunk.verdict = HunkVerdict.API
        return
    hunk.verdict = HunkVerdict.FLAGGED
    matcher = difflib.SequenceMatcher(a=old_kept, b=new_kept, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            hunk.removed_tokens += old_kept[i1:i2]
            hunk.added_tokens += new_kept[j1:j2]


def parse_patch(text: str) -> tuple[str, list[str], list[Hunk]]:
    """A format-patch file's subject, its ``Migration-Review`` trailers and the hunks of its
    C/C++/CUDA files (other files, Python or build scripts, are not reviewed by this criterion)."""
    subject, acks, hunks = "", [], []
    lines = text.splitlines()
    index = 0
    while index < len(lines) and not lines[index].startswith("diff --git "):
        line = lines[index]
        if line.startswith("Subject:"):
            subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", line.split(":", 1)[1].strip())
            while index + 1 < len(lines) and lines[index + 1][:1] in (" ", "\t") and lines[index + 1].strip():
                index += 1
                subject += " " + lines[index].strip()
        elif line.startswith(f"{TRAILER}:"):
            acks.append(line.split(":", 1)[1].strip())
        index += 1
    file: str | None = None
    counts: dict[str, int] = {}
    current: Hunk | None = None
    old_left = new_left = 0  # lines the hunk header says are still to come on each side
    for line in lines[index:]:
        if old_left > 0 or new_left > 0:  # inside a hunk: its header's counts say where it ends
            if line.startswith("\\"):  # "\ No newline at end of file"
                continue
            kind, body = line[:1], line[1:]
            if kind == "-":
                old_left -= 1
            elif kind == "+":
                new_left -= 1
            else:
                old_left, new_left = old_left - 1, new_left - 1
            if current is not None and kind == "-":
                current.removed.append(body)
            elif current is not None and kind == "+":
                current.added.append(body)
            continue
        if line.startswith("diff --git "):
            file, current = None, None
        elif line.startswith("+++ "):
            name = line[4:].strip()
            file = name[2:] if name.startswith("b/") else (None if name == "/dev/null" else name)
        elif (match := _HUNK.match(line)) and file is not None:
            old_left = 1 if match[2] is None else int(match[2])
            new_left = 1 if match[4] is None else int(match[4])
            current = None
            if Path(file).suffix in CODE_SUFFIXES:
                counts[file] = counts.get(file, 0) + 1
                current = Hunk(file, counts[file], int(match[1]), int(match[3]), line, new_lines=new_left)
                hunks.append(current)
    return subject, acks, hunks


def review_patch(path: Path, words: frozenset[str]) -> PatchReview:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise InputError(f"{path}: cannot read the patch ({error.strerror or error})", hint="check the path") from None
    subject, acks, hunks = parse_patch(text)
    review = PatchReview(path.name, subject, hunks)
    for hunk in hunks:
        judge(hunk, words)
    by_name = {h.id: h for h in hunks} | {f"{h.file}:{h.new_start}": h for h in hunks}
    for ack in acks:
        name, _, reason = ack.partition(" ")
        named = by_name.get(name)
        if named is None:
            review.unknown_acknowledgements.append(ack)
        else:
            named.acknowledged = reason.strip() or "acknowledged"
    return review


def run_review(dep_name: str, patches_dir: Path, series: tuple[str, ...], names: list[str]) -> ReviewReport:
    """Review ``names`` (patch files of the series, or paths), else every patch of the series."""
    ruleset = load_rules()
    words = vocabulary(ruleset)
    report = ReviewReport(dep_name, ruleset.version)
    chosen: list[Path] = []
    from assembler.series.seriesfile import find_patch

    for name in names or list(series):
        found = find_patch(series, name)  # its file name, its number (0002) or a part only it has, as `show` takes
        if found is not None:
            chosen.append(patches_dir / found)
        elif Path(name).is_file():
            chosen.append(Path(name))
        else:
            raise InputError(f"{name}: not a patch of {dep_name}'s series ({patches_dir}/series) nor a file",
                             hint=f"name one of: {', '.join(series) or '(the series is empty)'}")
    for path in chosen:
        report.patches.append(review_patch(path, words))
    return report


def compile_series(report: ReviewReport, workspace: Workspace, dep: Dependency,
                   note: Callable[[str], None] = lambda _: None) -> None:
    """Compile the series' result (forks/DEP, exactly the pin plus the series) once per unit
    that reads a touched file, and flag each hunk an error lands on (module docstring)."""
    import time

    from assembler.git.process import WorkTree
    from assembler.git.state import pinned_state, read_head
    from assembler.migration import proof

    started = time.monotonic()
    check = report.compile
    checkout = workspace.fork_path(dep)
    with workspace.lock():
        if not (checkout / ".git").exists():
            check.reason = f"no checkout of {dep.name} to compile (`assemble checkout {dep.name}` makes one)"
            return
        state = pinned_state(checkout, dep)
        if state is None or read_head(checkout) != state.head:
            check.reason = (f"forks/{dep.name} is not the pinned commit plus this series (`assemble checkout "
                            f"{dep.name}`, or `assemble export {dep.name}` for commits of your own)")
            return
        tree = WorkTree(checkout)
        dirty = tree.dirty()
        if dirty:
            check.reason = f"forks/{dep.name} has uncommitted edits ({', '.join(dirty[:5])}): commit and export them"
            return
        root = checkout.resolve()
        touched = {root / hunk.file for patch in report.patches for hunk in patch.hunks if (root / hunk.file).is_file()}
        if not touched:
            check.reason = "the series touches no C/C++/CUDA file of the checkout"
            return
        prover = proof.Prover(workspace, dep, checkout, note)
        reads = {unit.path: proof.static_reads(unit, prover.checkout, proof.read_file) for unit in prover.units}
        chosen = proof.cover(touched, prover.units, reads)
        note(f"{dep.name}: compiling {len(chosen.units)} units of the series' result")
        results = prover.once(chosen.units)
        check.compiled = True
        check.units = [result.to_json() for result in results]
        blame = _Blame(tree, state.applied, {patch.patch: patch for patch in report.patches}, report.patches)
        for result in results:
            if not result.ok:
                _flag(result, blame, root, touched, check)
    check.seconds = time.monotonic() - started


def _flag(result: Compiled, blame: _Blame, root: Path, touched: set[Path], check: SeriesCompile) -> None:
    """Each error of a unit on the hunk that wrote its line; a header this machine lacks, named
    on no line the series wrote, proves nothing either way."""
    reads = sorted(path for path in touched if path in result.reads or path == result.unit.path)
    for error in result.errors:
        hunk = blame.hunk(error)
        if hunk is None and error.missing_header:
            check.not_proven.append({"unit": result.unit.source, "error": str(error)})
            return
        if hunk is None:  # a line the series did not write: the last patch that touched the file, or the unit
            for path in ([error.path] if error.path in touched else []) + [result.unit.path, *reads]:
                hunk = blame.last_hunk(path.relative_to(root).as_posix()) if path is not None else None
                if hunk is not None:
                    break
        if hunk is not None and hunk.compile_error is None:
            hunk.compile_error = str(error)
            hunk.verdict = HunkVerdict.FLAGGED


class _Blame:
    """Which hunk of the reviewed patches wrote a line of the series' result."""

    def __init__(self, tree: Any, applied: dict[str, str], by_patch: dict[str, PatchReview],
                 order: list[PatchReview]) -> None:
        self.tree = tree
        self.applied = applied  # commit -> its patch file
        self.by_patch = by_patch
        self.order = order
        self.files: dict[str, dict[int, tuple[str, int]]] = {}

    def lines(self, rel: str) -> dict[int, tuple[str, int]]:
        """``git blame --porcelain`` of one file: final line -> (commit, its line in that commit)."""
        if rel not in self.files:
            from assembler.git.history import blame_lines

            self.files[rel] = blame_lines(self.tree, rel)
        return self.files[rel]

    def hunk(self, error: CompileError) -> Hunk | None:
        if error.path is None or not error.line:
            return None
        rel = error.path.relative_to(self.tree.path.resolve()).as_posix()
        commit, line = self.lines(rel).get(error.line, ("", 0))
        patch = self.by_patch.get(Path(self.applied.get(commit, "")).name)
        if patch is None:
            return None
        return next((h for h in patch.hunks
                     if h.file == rel and h.new_start <= line < h.new_start + max(h.new_lines, 1)), None)

    def last_hunk(self, rel: str) -> Hunk | None:
        for patch in reversed(self.order):
            found = next((h for h in patch.hunks if h.file == rel), None)
            if found is not None:
                return found
        return None
