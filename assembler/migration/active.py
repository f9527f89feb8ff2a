"""Which lines of a dependency's own files a translation unit compiles, under the build's
defines: the preprocessor decides, not a guess. Code behind ``#ifdef FLAG`` that the build does
not define is not a use.

The unit is run through the build's own preprocessor command with ``-E -fdirectives-only``:
directives are obeyed (includes followed, conditionals evaluated with every macro the torch,
CUDA and Python headers define) but macros are not expanded, and a skipped block comes out as
blank lines. The line markers then say which lines of which file survived. A header the
machine does not have is replaced by an empty stand-in and the pass repeated, as ``-MG``
does for check's scans (gcc has no ``-MG`` with ``-E``).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from assembler.check.compilers import SCAN, Pass
from assembler.check.scan import C_ENV, TIMEOUT

_MARKER = re.compile(rb'^# (\d+) "((?:[^"\\]|\\.)*)"')
_MISSING = re.compile(r"fatal error: (?P<name>[^:\n]+): No such file or directory")
MAX_STAND_INS = 64


@dataclass
class ActiveLines:
    """What one unit's passes kept, per file inside the checkout (1-based line numbers)."""

    lines: dict[Path, set[int]] = field(default_factory=dict)
    stand_ins: list[str] = field(default_factory=list)  # headers the machine lacks, replaced by empty files
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


def directives_only(scan: Pass) -> list[str]:
    """Check's scan command (``-E -M -MG -H``) as a directives-only preprocessing to stdout."""
    command = [token for token in scan.command if token not in SCAN]
    return [command[0], "-E", "-fdirectives-only", "-dI", *command[1:]]


def active_lines(scans: list[Pass], cwd: Path, root: Path) -> ActiveLines:
    """The union over ``scans`` (a C++ unit's one pass; a CUDA unit's host and device passes)
    of the lines each keeps in files below ``root``."""
    import time

    started = time.monotonic()
    result = ActiveLines()
    root = root.resolve()
    with tempfile.TemporaryDirectory(prefix="assemble-assess-") as stand_in_dir:
        for scan in scans:
            command = directives_only(scan)
            scanned = False
            for _ in range(MAX_STAND_INS):
                output, error = _run([*command, "-idirafter", stand_in_dir], cwd)
                missing = _MISSING.search(error)
                if missing is None or len(result.stand_ins) >= MAX_STAND_INS:
                    break
                if not scanned:  # all the missing headers at once, then one more pass
                    scanned = True
                    _stand_ins_from_scan(scan, cwd, Path(stand_in_dir), result)
                    if missing["name"].strip() in result.stand_ins:
                        continue
                name = missing["name"].strip()
                stand_in = Path(stand_in_dir) / name
                if ".." in Path(name).parts or Path(name).is_absolute() or stand_in.exists():
                    result.errors.append(f"{scan.name}: {missing.group(0)}")
                    output = b""
                    break
                stand_in.parent.mkdir(parents=True, exist_ok=True)
                stand_in.write_text("")
                result.stand_ins.append(name)
            else:
                output = b""
            _collect(output, cwd, root, result.lines)
    result.seconds = time.monotonic() - started
    return result


def _stand_ins_from_scan(scan: Pass, cwd: Path, stand_in_dir: Path, result: ActiveLines) -> None:
    """Every header the unit names that this machine lacks, found at once by check's own
    ``-M -MG`` scan, gets its empty stand-in before the directives-only pass (one pass, not
    one retry per missing header: a real tree without its CUTLASS submodule lacks dozens)."""
    from assembler.check.scan import parse_make_rule

    output, _ = _run([*scan.command, "-idirafter", str(stand_in_dir)], cwd)
    for name in parse_make_rule(output.decode(errors="replace")):
        path = Path(name)
        if path.is_absolute() or (cwd / path).exists() or ".." in path.parts or len(result.stand_ins) >= MAX_STAND_INS:
            continue
        stand_in = stand_in_dir / path
        if not stand_in.exists():
            stand_in.parent.mkdir(parents=True, exist_ok=True)
            stand_in.write_text("")
            result.stand_ins.append(name)


def _run(command: list[str], cwd: Path) -> tuple[bytes, str]:
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, env={**os.environ, **C_ENV}, timeout=TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as error:
        return b"", f"cannot run {command[0]}: {error}"
    return done.stdout, done.stderr.decode(errors="replace")


def _collect(output: bytes, cwd: Path, root: Path, lines: dict[Path, set[int]]) -> None:
    """Fold the line markers of ``output`` into ``lines``: every output line after a marker
    ``# N "file"`` is line N, N+1, ... of that file."""
    current: set[int] | None = None
    number = 0
    known: dict[bytes, set[int] | None] = {}
    for raw in output.split(b"\n"):
        if raw.startswith(b"# "):
            marker = _MARKER.match(raw)
            if marker:
                name = marker.group(2)
                if name not in known:
                    known[name] = _inside(name, cwd, root, lines)
                current, number = known[name], int(marker.group(1))
                continue
        if current is not None and raw.strip():
            current.add(number)
        number += 1


def _inside(name: bytes, cwd: Path, root: Path, lines: dict[Path, set[int]]) -> set[int] | None:
    text = name.decode(errors="replace").replace('\\"', '"').replace("\\\\", "\\")
    if text.startswith("<"):
        return None
    path = Path(os.path.normpath(cwd / text))
    if not path.is_relative_to(root):
        real = path.resolve()
        if not real.is_relative_to(root):
            return None
        path = real
    return lines.setdefault(path, set())
