"""Run one unit's scans and read what they say: the torch headers whose Stable-ABI guard fired
(with the include chain from the unit), CPython outside the limited API, headers that could not
be found, identifiers that only exist for a newer torch-target, and any other error.

A scan is ``-E -M -MG -H``: ``-M -MG`` lists every header the unit reads, missing ones as
written in the ``#include``; ``-H`` prints the include tree; the diagnostics carry gcc's
"In file included from a:1, from b:2" chains.
"""

from __future__ import annotations

import itertools
import os
import re
import resource
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.audit.gate import Verdict, worst_source
from assembler.builder.header_diagnostics import Diagnostic, both_ways, parse_diagnostics, torch_header
from assembler.builder.units import TranslationUnit
from assembler.check.compilers import Pass

_INCLUDE = re.compile(r"""^\s*#\s*include\s*[<"](?P<name>[^>"]+)[>"]""")
# g++ (LC_ALL=C) on a name hidden behind a TORCH_FEATURE_VERSION guard.
_UNDECLARED = re.compile(
    r"'(?P<name>[A-Za-z_][\w:]*)' (?:was not declared in this scope|is not a member of '[^']+'|has not been declared"
    r"|is not a template|does not name a type)"
    r"|there are no arguments to '(?P<noargs>[A-Za-z_]\w*)'"
    r"|'[^']+' has no member named '(?P<member>[A-Za-z_]\w*)'"
)
C_ENV = {"LC_ALL": "C", "LANG": "C"}  # ASCII quotes and English messages, which the parser reads
TIMEOUT = 600.0  # seconds one compiler process of a scan may run
MEMORY = 4 << 30  # bytes of address space each compiler process of a scan may take
# What gcc, its driver and the C++ runtime print when the address-space limit stops them.
_OUT_OF_MEMORY = re.compile(r"out of memory|virtual memory exhausted|std::bad_alloc|Cannot allocate memory"
                            r"|memory exhausted")


@dataclass(frozen=True)
class Limits:
    """What one compiler process of a scan may use: a unit that reads ``/dev/zero`` or
    instantiates without end is stopped and reported INCOMPLETE with the reason, not allowed to
    take the machine."""

    seconds: float = TIMEOUT
    memory: int = MEMORY  # bytes (ulimit -v: every process the compiler starts has its own)

    def wrap(self, command: Sequence[str]) -> list[str]:
        """``command`` under ``ulimit -v`` (a shell's, not preexec_fn: the scans run on threads),
        never above the hard limit this process already has (a shell cannot raise it)."""
        kib = max(self.memory >> 10, 1)
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if hard != resource.RLIM_INFINITY:
            kib = min(kib, max(hard >> 10, 1))
        return ["/bin/sh", "-c", f'ulimit -v {kib} && exec "$@"', "sh", *command]


@dataclass
class ScanOutput:
    """What one pass printed, parsed."""

    name: str
    returncode: int
    seconds: float
    dependencies: list[str] = field(default_factory=list)  # -M, in first-read order; missing ones as written
    tree: list[tuple[int, str]] = field(default_factory=list)  # -H: (depth, path)
    errors: list[Diagnostic] = field(default_factory=list)


def run_pass(scan: Pass, cwd: Path, limits: Limits = Limits()) -> ScanOutput:
    started = time.monotonic()
    try:
        result = subprocess.run(limits.wrap(scan.command), cwd=cwd, capture_output=True, text=True, errors="replace",
                                env={**os.environ, **C_ENV}, timeout=limits.seconds, check=False)
    except subprocess.TimeoutExpired:
        output = ScanOutput(scan.name, -1, time.monotonic() - started)
        output.errors.append(Diagnostic(scan.command[-1], 0,
                                        f"the {scan.name} pass ran past its time limit of {limits.seconds:g} s "
                                        "(the unit was not checked)", ()))
        return output
    except OSError as error:
        output = ScanOutput(scan.name, -1, time.monotonic() - started)
        output.errors.append(Diagnostic(scan.command[0], 0, f"cannot run {scan.command[0]}: {error.strerror or error}",
                                        ()))
        return output
    output = ScanOutput(scan.name, result.returncode, time.monotonic() - started)
    if result.returncode != 0 and (memory := _OUT_OF_MEMORY.search(result.stderr)) is not None:
        line = next(line.strip() for line in result.stderr.splitlines() if memory.group(0) in line)
        output.errors.append(Diagnostic(scan.command[-1], 0, f"the {scan.name} pass ran out of its memory limit of "
                                        f"{limits.memory >> 20} MiB ({line}; the unit was not checked)", ()))
        return output
    output.dependencies = parse_make_rule(result.stdout)
    output.tree, output.errors = parse_diagnostics(result.stderr)
    if result.returncode != 0 and not output.errors:  # a failure that printed no "error:" line
        last = next((line for line in reversed(result.stderr.splitlines()) if line.strip()),
                    f"exit status {result.returncode}")
        output.errors.append(Diagnostic(scan.command[0], 0, last.strip(), ()))
    return output


def parse_make_rule(text: str) -> list[str]:
    """The prerequisites of the make rule ``-M`` prints (escaped spaces and ``$$`` undone)."""
    joined = text.replace("\\\n", " ")
    _, _, prerequisites = joined.partition(": ")
    found: list[str] = []
    for token in re.split(r"(?<!\\)\s+", prerequisites.strip()):
        if token:
            found.append(token.replace("\\ ", " ").replace("$$", "$").replace("\\#", "#"))
    return found


@dataclass
class UnitResult:
    """The verdict on one translation unit and everything that led to it."""

    source: str
    language: str
    extension: str | None
    origin: str
    verdict: Verdict = Verdict.CLEAN
    passes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    unstable: list[dict[str, Any]] = field(default_factory=list)  # {"header", "chain", "pass"}
    symbols: list[dict[str, Any]] = field(default_factory=list)  # {"symbol", "at", "since"}
    not_limited: list[dict[str, Any]] = field(default_factory=list)  # {"header", "reason", "chain"}
    missing: list[dict[str, Any]] = field(default_factory=list)  # {"header", "included_from"}
    errors: list[str] = field(default_factory=list)  # any other error, "file:line: text"
    scanned_as: str | None = None  # the unit whose scans answered for this one (check.share); None: its own

    def decide(self) -> None:
        """The worst of what was found (:func:`assembler.audit.gate.worst_source`)."""
        found = ((Verdict.UNSTABLE, self.unstable or self.symbols), (Verdict.NOT_LIMITED, self.not_limited),
                 (Verdict.INCOMPLETE, self.missing or self.errors))
        self.verdict = worst_source(verdict for verdict, proof in found if proof)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "language": self.language, "extension": self.extension, "origin": self.origin,
            "verdict": self.verdict.value, "passes": self.passes, "seconds": round(self.seconds, 3),
            "unstable": self.unstable, "symbols": self.symbols, "not_limited": self.not_limited,
            "missing": self.missing, "errors": self.errors, "scanned_as": self.scanned_as,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UnitResult:
        fields = {k: data[k] for k in ("source", "language", "extension", "origin", "passes", "seconds",
                                       "unstable", "symbols", "not_limited", "missing", "errors")}
        return cls(verdict=Verdict(data["verdict"]), scanned_as=data.get("scanned_as"), **fields)

    def lines(self) -> list[str]:
        """The findings in words, one per line."""
        out = [f"<{item['header']}> is outside the Stable ABI (its TORCH_TARGET_VERSION guard fired), included from "
               f"{' > '.join(item['chain']) or self.source}" for item in self.unstable]
        out += [f"{item['symbol']} is declared only for a newer torch-target"
                + (f" (shim symbol of torch {item['since']})" if item.get("since") else "") + f": {item['at']}"
                for item in self.symbols]
        out += [f"{item['reason']}: <{item['header']}> via {' > '.join(item['chain']) or self.source}"
                for item in self.not_limited]
        out += [f"header not found: <{item['header']}>" + (f" from {', '.join(item['included_from'])}"
                                                           if item["included_from"] else "")
                for item in self.missing]
        out += [f"error: {text}" for text in self.errors]
        return out


class Reader:
    """Turns a pass's paths into what the report names: paths in the checkout relative to it,
    torch's headers as they are included (ATen/ATen.h), anything else absolute."""

    def __init__(self, checkout: Path, torch_roots: Sequence[Path], python_include: Path) -> None:
        self.checkout = checkout.resolve()
        self.torch_roots = both_ways(torch_roots)
        self.python_include = python_include.resolve()
        self._texts: dict[Path, list[str]] = {}
        # a scan's dependency, absolute and there (the same for every unit of a run)
        self._present: dict[str, bool] = {}
        self.known_present = self._present  # read directly by the hot loops (a dict lookup, no call)

    def present(self, written: str) -> bool:
        """Whether a dependency a scan listed is a file that exists (else it is missing, as written)."""
        found = self._present.get(written)
        if found is None:
            path = Path(written)
            found = self._present[written] = path.is_absolute() and path.exists()
        return found

    def absolute(self, file: str, cwd: Path) -> Path:
        path = Path(file)
        return Path(os.path.normpath(path if path.is_absolute() else cwd / path))

    def name(self, path: Path | str) -> str:
        normal = Path(os.path.normpath(path))
        inside = self.in_checkout(normal)
        if inside is not None:
            return inside.relative_to(self.checkout).as_posix()
        torch = self.torch_header(normal)
        return torch if torch is not None else str(normal)

    def in_checkout(self, path: Path) -> Path | None:
        """``path`` spelt under the checkout's real path, when it is in the checkout."""
        if path.is_relative_to(self.checkout):
            return path
        real = path.resolve()
        return real if real.is_relative_to(self.checkout) else None

    def torch_header(self, path: Path) -> str | None:
        return torch_header(path, self.torch_roots)

    def include_line(self, parent: Path, child: Path) -> int | None:
        """The line of ``parent`` whose #include names ``child``."""
        lines = self._texts.get(parent)
        if lines is None:
            try:
                lines = parent.read_text(errors="replace").splitlines()
            except OSError:
                lines = []
            self._texts[parent] = lines
        child_text = child.as_posix()
        for number, line in enumerate(lines, 1):
            match = _INCLUDE.match(line)
            if match and (child_text.endswith("/" + match["name"]) or child_text == match["name"]):
                return number
        return None


def classify(unit: TranslationUnit, outputs: Sequence[ScanOutput], reader: Reader, result: UnitResult) -> None:
    """Fill ``result`` from the preprocessor passes of ``unit``."""
    cwd = reader.checkout  # where the passes run
    seen_guards: set[tuple[str, tuple[str, ...]]] = set()
    if not outputs:
        result.errors.append("no preprocessor pass ran for this unit (nothing was checked)")
    for output in outputs:
        result.passes.append(output.name)
        result.seconds += output.seconds
        if output.returncode == 0 and not _read_unit(output, unit, reader):
            result.errors.append(f"the {output.name} pass printed no dependency list that starts with {unit.source}: "
                                 "the compiler did not preprocess it (an option that prints and exits, such as "
                                 "-dumpversion?), "
                                 "so nothing was checked")
        for error in output.errors:
            erring = reader.absolute(error.file, cwd)
            header = reader.torch_header(erring)
            if header is not None and error.is_stable_guard:
                chain = tuple(f"{reader.name(reader.absolute(f, cwd))}:{line}" for f, line in reversed(error.chain))
                if (header, chain) not in seen_guards:
                    seen_guards.add((header, chain))
                    result.unstable.append({"header": header, "chain": list(chain), "pass": output.name})
            else:
                text = f"{reader.name(erring)}:{error.line}: {error.text}" if error.line else error.text
                if text not in result.errors:
                    result.errors.append(text)
    for output in outputs:
        _not_limited(unit, output, reader, result)
        _missing(unit, output, reader, result)
        if result.not_limited:
            break


def _read_unit(output: ScanOutput, unit: TranslationUnit, reader: Reader) -> bool:
    """Whether the pass really preprocessed ``unit``: ``-M`` lists the source first. A compiler
    told to print and exit (-dumpversion, --version, -###) succeeds with no rule at all, and a
    scan that read nothing must never count as CLEAN."""
    if not output.dependencies:
        return False
    first = reader.absolute(output.dependencies[0], reader.checkout)
    return first == Path(os.path.normpath(unit.path)) or os.path.realpath(first) == os.path.realpath(unit.path)


def _not_limited(unit: TranslationUnit, output: ScanOutput, reader: Reader, result: UnitResult) -> None:
    """pybind11 (which cannot be built with Py_LIMITED_API), or Python.h read without the limited
    API: Python.h includes cpython/object.h only when Py_LIMITED_API is not defined."""
    cpython_object = reader.python_include / "cpython" / "object.h"
    cpython_spelled = str(cpython_object)
    for depth_path in output.tree:
        raw = depth_path[1]
        if "pybind11" not in raw and "object.h" not in raw:  # neither, before any normpath (thousands a unit):
            continue  # normpath only drops components, so a name absent from the raw path is absent after it
        normal = os.path.normpath(raw)
        if "pybind11" not in normal and normal != cpython_spelled:
            continue
        path = Path(normal)
        if "pybind11" in path.parts:
            reason = "includes pybind11, which cannot be built with Py_LIMITED_API"
        elif path == cpython_object:
            reason = "reads Python.h without Py_LIMITED_API"
        else:
            continue
        chain = _tree_chain(unit, output.tree, depth_path, reader)
        if path == cpython_object:  # name the Python.h the dependency's code includes, not Python's internals
            python_h = str(reader.python_include / "Python.h")
            at = next((i for i, step in enumerate(chain) if step.rsplit(":", 1)[0] == python_h), len(chain))
            header, chain = "Python.h", chain[:at]
        else:
            header = _include_spelling(path, reader)
        result.not_limited.append({"header": header, "reason": reason, "chain": chain})
        return


def _include_spelling(path: Path, reader: Reader) -> str:
    torch = reader.torch_header(path)
    if torch is not None:
        return torch
    if path.is_relative_to(reader.python_include):
        return path.relative_to(reader.python_include).as_posix()
    parts = path.parts
    if "pybind11" in parts:
        return Path(*parts[parts.index("pybind11"):]).as_posix()
    return reader.name(path)


def _tree_chain(unit: TranslationUnit, tree: list[tuple[int, str]], target: tuple[int, str],
                reader: Reader) -> list[str]:
    """file:line steps from the unit to ``target`` in the -H tree (its ancestors, outermost first)."""
    ancestors: list[Path] = [unit.path]
    stack: list[Path] = []
    for depth, path in tree:
        del stack[depth - 1:]
        stack.append(Path(os.path.normpath(path)))
        if (depth, path) == target:
            ancestors += stack
            break
    steps = []
    for parent, child in itertools.pairwise(ancestors):
        line = reader.include_line(parent, child)
        steps.append(f"{reader.name(parent)}:{line}" if line else reader.name(parent))
    return steps


def _missing(unit: TranslationUnit, output: ScanOutput, reader: Reader, result: UnitResult) -> None:
    known = {item["header"] for item in result.missing}
    known_present = reader.known_present
    absent = [written for written in output.dependencies if not (known_present.get(written) or reader.present(written))]
    if not absent:
        return
    present = [Path(p) for p in output.dependencies if reader.present(p)]
    own = [p for p in present if reader.in_checkout(p) is not None]
    for written in absent:
        path = Path(written)
        if written in known:
            continue
        known.add(written)
        found_in = []
        for candidate in own:
            line = reader.include_line(candidate, path)
            if line is not None:
                found_in.append(f"{reader.name(candidate)}:{line}")
                break
        result.missing.append({"header": written, "included_from": found_in})


def undeclared(output: ScanOutput, reader: Reader, cwd: Path) -> list[dict[str, Any]]:
    """The names a syntax-only pass could not find, where the dependency's own code uses them."""
    from assembler.audit.torchdata import format_version, load_table

    table = load_table()
    found: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for error in output.errors:
        match = _UNDECLARED.search(error.text)
        if not match:
            continue
        name = match["name"] or match["noargs"] or match["member"]
        at = f"{reader.name(reader.absolute(error.file, cwd))}:{error.line}"
        if (name, at) in seen:
            continue
        seen.add((name, at))
        since = table.version_of(name.split("::")[-1])
        found.append({"symbol": name, "at": at, "since": format_version(since) if since else None})
    return found
