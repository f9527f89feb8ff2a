"""Which lines of a dependency's own files a translation unit compiles, under the build's
defines: the preprocessor decides, not a guess. Code behind ``#ifdef FLAG`` that the build does
not define is not a use.

The unit is run through the build's own preprocessor command with ``-E -fdirectives-only``:
directives are obeyed (includes followed, conditionals evaluated with every macro the torch,
CUDA and Python headers define) but macros are not expanded, and a skipped block comes out as
blank lines. The line markers then say which lines of which file survived. A header the
machine does not have is replaced by an empty stand-in and the pass repeated, as ``-MG``
does for check's scans (gcc has no ``-MG`` with ``-E``).

What one pass kept is kept in the cache (``checks/preprocess-<key>.json``, pruned with check's
results), keyed by its command, and reused while every file it read has the same size and
modification time: `assess` and the `migrate` that follows preprocess each unit once. A pass
that needed stand-ins is kept with their names, and with the stamps of the deepest directory
that exists on each path where a search could find one (every include directory the command
names, and the compiler's own), so that a header that appears there makes it stale: on a CPU
build torch every CUDA unit of FA2 needs one, and migrate preprocessed all 79 again (95 s).
assess gives every pass the compile proof's stand-in for that header from the start, so a
FA2 pass runs once instead of three times; a submodule's lines are not counted (CUTLASS's
are another project's), and a pass's output is read from line marker to line marker: a cold
assess of FA2 went from 103 s to 34 s on 2 cores with the same findings.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from assembler.check.compilers import SCAN, Pass
from assembler.check.unit_scan import C_ENV, TIMEOUT

_MARKER = re.compile(rb'^# (\d+) "((?:[^"\\]|\\.)*)"')
_MISSING = re.compile(r"fatal error: (?P<name>[^:\n]+): No such file or directory")
MAX_STAND_INS = 64
Stamps = dict[Path, list[int] | None]  # a file's [size, mtime] as first seen in one assess (None: absent)


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


def active_lines(scans: list[Pass], cwd: Path, root: Path, skip: tuple[Path, ...] = (),
                 extra: tuple[str, ...] = (), stamps: Stamps | None = None) -> ActiveLines:
    """The union over ``scans`` (a C++ unit's one pass; a CUDA unit's host and device passes)
    of the lines each keeps in files below ``root`` and not below ``skip``. ``extra``: flags
    each pass gets (the compile proof's stand-in for the header a CPU build of torch lacks,
    so that no FA2 pass stops at it and runs again). ``stamps``: a file's size and mtime as
    first seen, shared by the passes of one assess (a torch header is read by every unit)."""
    import time

    started = time.monotonic()
    result = ActiveLines()
    root = root.resolve()
    with tempfile.TemporaryDirectory(prefix="assemble-assess-") as stand_in_dir:
        for scan in scans:
            command = [*directives_only(scan), *extra]
            key = _key(command, cwd, root, skip)
            if (kept := _load(key, stamps)) is not None:
                lines_kept, stand_ins_kept = kept
                for path, numbers in lines_kept.items():
                    result.lines.setdefault(path, set()).update(numbers)
                result.stand_ins += [name for name in stand_ins_kept if name not in result.stand_ins]
                continue
            before = (len(result.stand_ins), len(result.errors))
            scanned = False
            for _ in range(MAX_STAND_INS):
                output, error = _run([*command, "-idirafter", stand_in_dir], cwd)
                missing = _MISSING.search(error)
                if missing is None or len(result.stand_ins) >= MAX_STAND_INS:
                    break
                if not scanned:  # all the missing headers at once, then one more pass
                    scanned = True
                    _stand_ins_from_scan(scan, extra, cwd, Path(stand_in_dir), result)
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
            lines: dict[Path, set[int]] = {}
            read = _collect(output, cwd, root, lines, skip)
            for path, numbers in lines.items():
                result.lines.setdefault(path, set()).update(numbers)
            if output and len(result.errors) == before[1]:
                # the stand-ins this pass read (an earlier pass may have made them) go with the pass's dir
                used = sorted(path.relative_to(stand_in_dir).as_posix() for path in read
                              if path.is_relative_to(stand_in_dir))
                read = {path for path in read if not path.is_relative_to(stand_in_dir)}
                _store(key, read | _directories(command, cwd, read) | _absent(command, cwd, used), lines, used, stamps)
    result.seconds = time.monotonic() - started
    return result


_INCLUDE_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter")


def _directories(command: list[str], cwd: Path, read: set[Path]) -> set[Path]:
    """The directories a search could find a new header in: every include directory of the
    command and every directory a read file is in (a file added there changes its mtime)."""
    found = {path.parent for path in read}
    for index, token in enumerate(command):
        if token in _INCLUDE_FLAGS and index + 1 < len(command):
            found.add(Path(os.path.normpath(cwd / command[index + 1])))
        elif token.startswith("-I") and len(token) > 2:
            found.add(Path(os.path.normpath(cwd / token[2:])))
    return {path for path in found if path.is_dir()}


SYSTEM_INCLUDE_DIRECTORIES = (Path("/usr/include"), Path("/usr/local/include"))


def _absent(command: list[str], cwd: Path, names: list[str]) -> set[Path]:
    """For each header the pass replaced by a stand-in, the deepest existing directory on its
    path below every include directory (a header made there changes that directory's mtime)."""
    if not names:
        return set()
    found: set[Path] = set()
    for directory in _directories(command, cwd, set()) | {d for d in SYSTEM_INCLUDE_DIRECTORIES if d.is_dir()}:
        for name in names:
            path = directory / name
            while not path.is_dir() and path != directory:
                path = path.parent
            found.add(path)
    return found


def _key(command: list[str], cwd: Path, root: Path, skip: tuple[Path, ...]) -> str:
    text = json.dumps([command, str(cwd.resolve()), str(root), sorted(map(str, skip)), 2])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _entry(key: str) -> Path:
    from assembler.cache import cache_root

    return cache_root() / "checks" / f"preprocess-{key}.json"


def _stamp(path: Path, stamps: Stamps | None = None) -> list[int] | None:
    if stamps is not None and path in stamps:
        return stamps[path]
    try:
        status = path.stat()
        found: list[int] | None = [status.st_size, status.st_mtime_ns]
    except OSError:
        found = None
    if stamps is not None:
        stamps[path] = found
    return found


def _load(key: str, stamps: Stamps | None = None) -> tuple[dict[Path, set[int]], list[str]] | None:
    """A kept pass whose every file is as it was (its lines, its stand-ins), else None."""
    try:
        data = json.loads(_entry(key).read_text(encoding="utf-8"))
        if any(_stamp(Path(name), stamps) != stamp for name, stamp in data["read"].items()):
            return None
        return ({Path(name): set(numbers) for name, numbers in data["lines"].items()},
                [str(name) for name in data.get("stand_ins", [])])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _store(key: str, read: set[Path], lines: dict[Path, set[int]], stand_ins: list[str],
           memo: Stamps | None = None) -> None:
    stamps = {str(path): _stamp(path, memo) for path in sorted(read)}
    if any(stamp is None for stamp in stamps.values()):
        return
    entry = _entry(key)
    entry.parent.mkdir(parents=True, exist_ok=True)
    data = {"read": stamps, "lines": {str(path): sorted(numbers) for path, numbers in lines.items()},
            "stand_ins": stand_ins}
    with tempfile.NamedTemporaryFile("w", dir=entry.parent, prefix=".tmp-", suffix=".json", delete=False) as handle:
        json.dump(data, handle)
    os.replace(handle.name, entry)


def _stand_ins_from_scan(scan: Pass, extra: tuple[str, ...], cwd: Path, stand_in_dir: Path,
                         result: ActiveLines) -> None:
    """Every header the unit names that this machine lacks, found at once by check's own
    ``-M -MG`` scan, gets its empty stand-in before the directives-only pass (one pass, not
    one retry per missing header: a real tree without its CUTLASS submodule lacks dozens)."""
    from assembler.check.unit_scan import parse_make_rule

    output, _ = _run([*scan.command, *extra, "-idirafter", str(stand_in_dir)], cwd)
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
        done = subprocess.run(command, cwd=cwd, capture_output=True, env={**os.environ, **C_ENV}, timeout=TIMEOUT,
                              check=False)
    except (OSError, subprocess.SubprocessError) as error:
        return b"", f"cannot run {command[0]}: {error}"
    return done.stdout, done.stderr.decode(errors="replace")


def _collect(output: bytes, cwd: Path, root: Path, lines: dict[Path, set[int]],
             skip: tuple[Path, ...] = ()) -> set[Path]:
    """Fold the line markers of ``output`` into ``lines``: every output line after a marker
    ``# N "file"`` is line N, N+1, ... of that file. Returns every file the markers name.
    Only the spans of the checkout's own files (not ``skip``: its submodules) are split into
    lines; the rest is passed over from marker to marker (``bytes.find``). FA2's units print
    14 MB each, mostly CUTLASS's and torch's headers: a loop over every line took 61 of
    assess's 95 s, a multi-line regex over every byte 55."""
    known: dict[bytes, set[int] | None] = {}
    read: set[Path] = set()
    current: set[int] | None = None
    number = start = 0
    at = 0 if output.startswith(b"# ") else _next_hash_line(output, 1)
    while at >= 0:
        newline = output.find(b"\n", at)
        end = len(output) if newline < 0 else newline + 1
        marker = _MARKER_AT.match(output, at)
        if marker is not None:
            if current is not None:
                _count(output[start:at], number, current)
            name = marker.group(2)
            if name not in known:
                known[name] = _inside(name, cwd, root, lines, skip)
                named = _named_file(name, cwd)
                if named is not None:
                    read.add(named)
            current, number, start = known[name], int(marker.group(1)), end
        at = _next_hash_line(output, end)
    if current is not None:
        _count(output[start:], number, current)
    return read


_MARKER_AT = re.compile(rb'# (\d+) "((?:[^"\\]|\\.)*)"')  # _MARKER at a given offset (no ``^``)


def _next_hash_line(output: bytes, line_start: int) -> int:
    """The offset of the first line at or after ``line_start`` (a line's first byte) that
    begins with ``# ``, else -1."""
    found = output.find(b"\n# ", line_start - 1)
    return -1 if found < 0 else found + 1


def _count(span: bytes, first: int, numbers: set[int]) -> None:
    """The numbers of ``span``'s non-blank lines, its first line being ``first``."""
    numbers.update(first + index for index, raw in enumerate(span.split(b"\n")) if raw.strip())


def _marker_name(name: bytes) -> str:
    """A marker's file name as the preprocessor escaped it, unescaped."""
    return name.decode(errors="replace").replace('\\"', '"').replace("\\\\", "\\")


def _inside(name: bytes, cwd: Path, root: Path, lines: dict[Path, set[int]],
            skip: tuple[Path, ...] = ()) -> set[int] | None:
    """The line set of the file a marker names, when it is one of the checkout's own."""
    path = _own_file(name, cwd, root, skip)
    return None if path is None else lines.setdefault(path, set())


@functools.lru_cache(maxsize=1 << 16)
def _named_file(name: bytes, cwd: Path) -> Path | None:
    """The file a marker names, None for the preprocessor's own (``<built-in>``)."""
    text = _marker_name(name)
    return None if text.startswith("<") else Path(os.path.normpath(cwd / text))


@functools.lru_cache(maxsize=1 << 16)
def _own_file(name: bytes, cwd: Path, root: Path, skip: tuple[Path, ...]) -> Path | None:
    """The checkout file a marker names (through a symbolic link too), None for a file outside
    it or below ``skip``. Kept per name: every unit of FA2 names the same 5,000 torch and CUDA
    headers, and resolving each again was most of a pass's reading."""
    path = _named_file(name, cwd)
    if path is None:
        return None
    if not path.is_relative_to(root):
        real = path.resolve()
        if not real.is_relative_to(root):
            return None
        path = real
    if any(path.is_relative_to(folder) for folder in skip):
        return None
    return path
