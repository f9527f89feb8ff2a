"""The mechanical rewrites of `assemble migrate` (``assembler/data/migration_rewrites.json``),
applied to one file's text: only on the lines the build compiles, never inside comments or
strings, never producing an API newer than the dependency's torch-target or a known hazard.
What a rewrite declines is returned as a finding by line, with the reason, never half-done.
Rewrites never add or remove a line break, so line numbers hold until the include step."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.errors import InputError
from assembler.migration.lexer import blank_comments_and_strings

REWRITES_FILE = Path(__file__).resolve().parent.parent / "data" / "migration_rewrites.json"
SKIP = "\x00"  # marks a declined method call until the step ends (no regex matches across it)
STYLE_KEYS = {"data-ptr": ("const-mutable", "mutable")}


@dataclass(frozen=True)
class Rewrite:
    id: str
    step: str
    type: str
    since: str
    includes: tuple[str, ...]
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    mapping: dict[str, str] = field(default_factory=dict)
    method: str = ""
    function: str = ""
    max_args: int | None = None
    refuse_braced: bool = False


@dataclass(frozen=True)
class RewriteSet:
    version: str
    steps: dict[str, str]  # step -> commit subject
    unstable_includes: tuple[str, ...]
    rewrites: tuple[Rewrite, ...]

    def of_step(self, step: str) -> list[Rewrite]:
        return [r for r in self.rewrites if r.step == step]


def load_rewrites(path: Path = REWRITES_FILE) -> RewriteSet:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        steps = dict(data["steps"])
        rewrites = []
        for raw in data["rewrites"]:
            if raw["step"] not in steps or raw["type"] not in ("replace", "method", "call", "data-ptr"):
                raise ValueError(f"rewrite {raw.get('id')!r}: unknown step or type")
            rewrites.append(Rewrite(
                id=raw["id"], step=raw["step"], type=raw["type"], since=raw["since"], includes=tuple(raw.get("includes", ())),
                pattern=re.compile(raw["pattern"]) if "pattern" in raw else None, replacement=raw.get("replacement", ""),
                mapping=dict(raw.get("map", {})), method=raw.get("method", ""), function=raw.get("function", ""),
                max_args=raw.get("max_args"), refuse_braced=bool(raw.get("refuse_braced", False)),
            ))
        return RewriteSet(str(data["version"]), steps, tuple(data["unstable_includes"]), tuple(rewrites))
    except (OSError, ValueError, KeyError, TypeError, re.error) as error:
        raise InputError(f"{path}: unreadable migration rewrites ({error})", hint="reinstall assembler, or fix the file") from None


@dataclass(frozen=True)
class Declined:
    """A rewrite that was not made, and why."""

    line: int
    rewrite: str
    reason: str


@dataclass
class FileRewrite:
    """One file through one step."""

    text: str
    active: list[bool]  # per line (0-based): does the build compile it
    made: Counter[str] = field(default_factory=Counter)
    declined: list[Declined] = field(default_factory=list)
    includes: set[str] = field(default_factory=set)


def _newer(version: str, target: str) -> bool:
    def key(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.split(".")[:2])
    return key(version) > key(target)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset)  # 0-based


def apply_step(rewrites: list[Rewrite], file: FileRewrite, torch_target: str, style: dict[str, str]) -> None:
    """Apply ``rewrites`` (one step's) to ``file`` in place."""
    for rewrite in rewrites:
        if rewrite.type == "replace":
            _replace(rewrite, file, torch_target)
        elif rewrite.type == "method":
            _method(rewrite, file, torch_target)
        elif rewrite.type == "call":
            _call(rewrite, file, torch_target)
        else:
            _data_ptr(rewrite, file, torch_target, style.get("data-ptr", "const-mutable"))
    file.text = file.text.replace(SKIP, "")


def _eligible(rewrite: Rewrite, file: FileRewrite, line: int, torch_target: str) -> bool:
    if not file.active[line]:
        return False
    if _newer(rewrite.since, torch_target):
        file.declined.append(Declined(line + 1, rewrite.id, f"needs torch {rewrite.since}, above torch-target {torch_target} "
                                                            "(raise torch-target to allow it)"))
        return False
    return True


def _replace(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    assert rewrite.pattern is not None
    code = blank_comments_and_strings(file.text)
    pieces: list[str] = []
    last = 0
    for found in rewrite.pattern.finditer(code):
        if not _eligible(rewrite, file, _line_of(code, found.start()), torch_target):
            continue
        original = rewrite.pattern.match(file.text, found.start())  # not fullmatch: a lookahead reads past the end
        if original is None or original.end() != found.end():  # it depends on a string's contents: read the original
            continue
        new = original.expand(rewrite.replacement)
        if rewrite.mapping:
            new = new.replace(original.group(1), rewrite.mapping.get(original.group(1), original.group(1)))
        pieces += [file.text[last:found.start()], new]
        last = found.end()
        file.made[rewrite.id] += 1
        file.includes.update(rewrite.includes)
    file.text = "".join(pieces) + file.text[last:]


def _close_paren(code: str, opening: int) -> int | None:
    """The index of the ``)`` matching ``code[opening] == '('``."""
    depth = 0
    for index in range(opening, len(code)):
        char = code[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return index if char == ")" else None
    return None


def _receiver_start(code: str, end: int) -> int | None:
    """Where the postfix expression ending just before ``end`` starts: identifiers joined by
    ``.``/``::`` and calls or subscripts (``a``, ``t.contiguous()``, ``ns::f(x)[0]``); None when
    there is none on that line."""
    index = end
    while True:
        while index > 0 and code[index - 1] in " \t":
            index -= 1
        if index > 0 and code[index - 1] in ")]":
            closing = code[index - 1]
            opening = "(" if closing == ")" else "["
            depth = 0
            while index > 0:
                index -= 1
                if code[index] == closing:
                    depth += 1
                elif code[index] == opening:
                    depth -= 1
                    if depth == 0:
                        break
                elif code[index] == "\n":
                    return None
            else:
                return None
            continue  # the callee or the subscripted expression comes before
        start = index
        while index > 0 and (code[index - 1].isalnum() or code[index - 1] == "_"):
            index -= 1
        if index == start:
            return None if index == end else start
        if index >= 2 and code[index - 2:index] == "::":
            index -= 2
            continue
        if index >= 1 and code[index - 1] == "." and not (index >= 2 and code[index - 2] == "."):
            index -= 1
            continue
        return index


def _arguments(code: str, opening: int, closing: int) -> int:
    inner = code[opening + 1:closing]
    if not inner.strip():
        return 0
    depth, count = 0, 1
    for char in inner:
        if char in "([{<":
            depth += 1
        elif char in ")]}>":
            depth -= 1
        elif char == "," and depth == 0:
            count += 1
    return count


def _method(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    """RECEIVER.method(ARGS) -> function(RECEIVER, ARGS), one at a time, rescanning, so a chain
    (a.contiguous().view(s)) nests."""
    pattern = re.compile(rf"(\.|->)\s*{re.escape(rewrite.method)}\s*\(")
    for _ in range(100000):
        code = blank_comments_and_strings(file.text)
        found = next((m for m in pattern.finditer(code) if file.active[_line_of(code, m.start())]), None)
        if found is None:
            return
        line = _line_of(code, found.start())
        opening = found.end() - 1
        closing = _close_paren(code, opening)
        start = _receiver_start(code, found.start())
        reason = None
        if found.group(1) == "->":
            reason = "called through a pointer: write the receiver as *p yourself"
        elif closing is None or start is None:
            reason = "no receiver expression on this line"
        elif rewrite.max_args is not None and _arguments(code, opening, closing) > rewrite.max_args:
            reason = f"takes more than {rewrite.max_args} arguments here (an overload without a stable equivalent)"
        elif not _eligible(rewrite, file, line, torch_target):
            reason = ""
        if reason is not None or closing is None or start is None:
            if reason:
                file.declined.append(Declined(line + 1, rewrite.id, reason))
            file.text = file.text[:found.start() + len(found.group(1))] + SKIP + file.text[found.start() + len(found.group(1)):]
            continue
        receiver = file.text[start:found.start()].strip()
        arguments = file.text[opening + 1:closing]
        joined = f"{receiver}, {arguments.strip()}" if arguments.strip() else receiver
        file.text = file.text[:start] + f"{rewrite.function}({joined})" + file.text[closing + 1:]
        file.made[rewrite.id] += 1
        file.includes.update(rewrite.includes)


def _call(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    assert rewrite.pattern is not None
    code = blank_comments_and_strings(file.text)
    edits: list[tuple[int, int, str]] = []
    for found in rewrite.pattern.finditer(code):
        line = _line_of(code, found.start())
        if not file.active[line]:
            continue
        opening = code.index("(", found.end())
        closing = _close_paren(code, opening)
        if closing is None:
            file.declined.append(Declined(line + 1, rewrite.id, "unbalanced call"))
            continue
        if rewrite.refuse_braced and "{" in code[opening + 1:closing]:
            file.declined.append(Declined(line + 1, rewrite.id, "a braced literal would bind to std::optional<IntHeaderOnlyArrayRef> "
                                                                "and dangle: name a std::vector first, then rewrite"))
            continue
        if rewrite.max_args is not None and _arguments(code, opening, closing) > rewrite.max_args:
            file.declined.append(Declined(line + 1, rewrite.id, f"takes more than {rewrite.max_args} arguments here (TensorOptions?): "
                                                                "pass dtype and device to the stable function yourself"))
            continue
        if not _eligible(rewrite, file, line, torch_target):
            continue
        edits.append((found.start(), found.end(), rewrite.function))
    for start, end, new in reversed(edits):
        file.text = file.text[:start] + new + file.text[end:]
        file.made[rewrite.id] += 1
        file.includes.update(rewrite.includes)


_DATA_PTR = re.compile(r"\.\s*data_ptr\s*<")
_CONST_DECLARATION = re.compile(r"\bconst\s+[\w:]+\s*\*\s*(?:const\s+)?\w+\s*=\s*[\w.]*$")


def _data_ptr(rewrite: Rewrite, file: FileRewrite, torch_target: str, style: str) -> None:
    code = blank_comments_and_strings(file.text)
    edits: list[tuple[int, int, str]] = []
    for found in _DATA_PTR.finditer(code):
        line = _line_of(code, found.start())
        if not _eligible(rewrite, file, line, torch_target):
            continue
        line_start = code.rfind("\n", 0, found.start()) + 1
        const = style != "mutable" and _CONST_DECLARATION.search(code[line_start:found.start()]) is not None
        edits.append((found.start(), found.end(), ".const_data_ptr<" if const else ".mutable_data_ptr<"))
    for start, end, new in reversed(edits):
        file.text = file.text[:start] + new + file.text[end:]
        file.made[rewrite.id] += 1
        file.includes.update(rewrite.includes)


_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"].*$", re.M)


def rewrite_includes(file: FileRewrite, needed: set[str], unstable: tuple[str, ...], keep_unstable: bool) -> None:
    """Put the stable headers ``needed`` where the file's first unstable include was (else
    after its last include, else at the top) and, unless ``keep_unstable`` (uses remain that
    need them), drop its unstable includes. Lines that name neither stay as they are."""
    lines = file.text.split("\n")
    flags = list(file.active)
    present = {m.group(1) for m in _INCLUDE.finditer(file.text)}
    missing = sorted(needed - present)
    unstable_at = [i for i, line in enumerate(lines) if (m := _INCLUDE.match(line)) and m.group(1) in unstable and flags[i]]
    if not missing and (keep_unstable or not unstable_at):
        return
    includes = [f"#include <{name}>" for name in missing]
    if unstable_at and not keep_unstable:
        first = unstable_at[0]
        for index in reversed(unstable_at[1:]):
            del lines[index]
            del flags[index]
        lines[first:first + 1] = includes
        flags[first:first + 1] = [True] * len(includes)
        file.made["include"] += len(unstable_at)
    else:
        at = max((i + 1 for i, line in enumerate(lines) if _INCLUDE.match(line) and flags[i]), default=0)
        lines[at:at] = includes
        flags[at:at] = [True] * len(includes)
    file.made["stable-include"] += len(includes)
    file.text = "\n".join(lines)
    file.active = flags


def as_json(declined: Declined, path: str) -> dict[str, Any]:
    return {"at": f"{path}:{declined.line}", "rewrite": declined.rewrite, "reason": declined.reason}
