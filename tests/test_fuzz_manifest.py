"""Fuzzing deps.toml values and series files through the real CLI, in process.

Every example copies a scratch git workspace, writes one hostile manifest or series, and runs
``assembler.cli.main`` for ``deps``, ``patches --offline`` and ``checkout``. It asserts:
- the exit code is one of the documented ones (assembler.errors.ExitCode);
- no exception but SystemExit leaves main, and nothing on stderr looks like a traceback;
- no file appears outside the scratch workspace and the cache (the parent directory and the
  current directory are snapshotted before and after);
- no process was started from a value: the hostile values carry ``touch MARK`` payloads in
  every shape (options, shell syntax, transports), and MARK must never exist.

Deterministic (hypothesis derandomize=True, no example database). ASSEMBLE_FUZZ_EXAMPLES sets
the number of examples per test (default 25: the file takes well under a minute); raise it
to fuzz longer. Each test records how many cases it ran in CASES (printed at the end).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tomllib
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assembler.errors import ExitCode
from tests.conftest import make_git_workspace
from tests.fuzzing import fuzz_examples, fuzz_settings

EXAMPLES = fuzz_examples(25)
ALLOWED_EXITS = {int(code) for code in ExitCode} - {int(ExitCode.INTERNAL)}  # INTERNAL is a bug
CASES: dict[str, int] = {}
FUZZ = fuzz_settings(EXAMPLES)


class Scratch:
    """One workspace prepared once (checked out, so the mirror is fetched) and copied per case."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mark = root / "pwned"
        ws = make_git_workspace(root / "base")
        self.base = ws.root
        self.cache = root / "base" / "cache"
        self.elsewhere = root / "cwd"
        self.elsewhere.mkdir()
        self.manifest = tomllib.loads((self.base / "deps.toml").read_text())
        with _env(ASSEMBLE_CACHE=str(self.cache)), contextlib.redirect_stdout(io.StringIO()):
            from assembler.cli import main

            assert main(["-C", str(self.base), "checkout"]) == 0
        self.counter = 0

    def payloads(self) -> list[str]:
        """Values that start a process if anything hands them to a shell, to git as an option,
        or to a helper transport."""
        touch = f"touch {self.mark}"
        return [
            f"--upload-pack={touch};git-upload-pack", f"-c core.sshCommand={touch}", f"$({touch})", f"`{touch}`",
            f"; {touch}", f"ext::sh -c {touch.replace(' ', '% ')}",
            f"ssh://-oProxyCommand={touch.replace(' ', '%20')}/x",
            f"-oProxyCommand={touch}@host:x", f"main\n[alias]\n\tx = !{touch}", f"--output={self.mark}",
            f"--exec={touch}", f"-o{self.mark}",
        ]

    @contextlib.contextmanager
    def case(self) -> Iterator[Path]:
        self.counter += 1
        case = self.root / f"case-{self.counter}"
        shutil.copytree(self.base, case, symlinks=True, ignore=shutil.ignore_patterns("forks", ".assemble"))
        try:
            yield case
        finally:
            shutil.rmtree(case, ignore_errors=True)


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scratch]:
    yield Scratch(tmp_path_factory.mktemp("fuzz"))
    print(f"\nfuzz cases run: {CASES} (total {sum(CASES.values())})")


def _snapshot(scratch: Scratch, case: Path) -> set[str]:
    """Every path under the scratch root and the current directory, except the case itself
    and the cache (assemble's own, where new mirrors may appear)."""
    skip = (str(case), str(scratch.cache))
    paths = {str(p) for p in scratch.root.rglob("*") if not str(p).startswith(skip)}
    return paths | {str(p) for p in Path.cwd().iterdir()}


def _run(scratch: Scratch, case: Path, *args: str) -> None:
    """assemble ARGS on ``case``, in process, with every invariant checked."""
    from assembler.cli import main

    before = _snapshot(scratch, case)
    stderr, stdout = io.StringIO(), io.StringIO()
    code: int | None = None
    with (_env(ASSEMBLE_CACHE=str(scratch.cache), ASSEMBLE_LOCK_TIMEOUT="5", COLUMNS="200"),
          contextlib.chdir(scratch.elsewhere), contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout)):
        try:
            code = main(["-C", str(case), *args])
        except SystemExit as exit_:  # argparse
            code = exit_.code if isinstance(exit_.code, int) else 2
        except BaseException:
            pytest.fail(f"assemble {' '.join(args)} "
                        f"raised:\n{traceback.format_exc()}\nmanifest:\n{_text(case / 'deps.toml')}")
    err = stderr.getvalue()
    assert code in ALLOWED_EXITS, (args, code, err)
    assert "Traceback" not in err, err
    if code != 0:
        assert err.strip(), f"assemble {' '.join(args)} exited {code} without saying why"
    assert not scratch.mark.exists(), f"a value started a process: {args}\n{_text(case / 'deps.toml')}"
    after = _snapshot(scratch, case)
    assert after <= before, f"written outside the workspace: {sorted(after - before)[:5]}"
    CASES[f"{args[0]} -> {code}"] = CASES.get(f"{args[0]} -> {code}", 0) + 1


def _text(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_bytes().decode("utf-8", "replace")[:2000]
    return "(unreadable)"


# -- writing TOML with any value -------------------------------------------------------------------

def _toml_string(value: str) -> str:
    out = []
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_string(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def _toml(data: dict[str, Any]) -> str:
    """Tables as [a."b"] headers, everything else inline: enough for a deps.toml."""
    lines: list[str] = []

    def table(path: list[str], body: dict[str, Any]) -> None:
        scalars = {k: v for k, v in body.items() if not isinstance(v, dict) or not v
                   or not all(isinstance(x, dict) for x in v.values())}
        nested = {k: v for k, v in body.items() if k not in scalars}
        if path:
            lines.append("[" + ".".join(_toml_string(p) for p in path) + "]")
        lines.extend(f"{_toml_string(k)} = {_toml_value(v)}" for k, v in scalars.items())
        for key, sub in nested.items():
            table([*path, key], sub)

    table([], data)
    return "\n".join(lines) + "\n"


# -- strategies ------------------------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
DEP_STRING_KEYS = ["upstream", "source", "commit", "track", "torch-target", "patches"]
BUNDLE_STRING_KEYS = ["name", "version", "python-abi", "torch-target", "torch"]
BUILD_KEYS = ["extensions", "python-packages", "data", "cmake-dir", "cmake-args", "cuda-archs", "backend",
              "project-dir", "sources", "include-dirs", "defines", "build-env"]
BUILD_LIST_KEYS = {"python-packages", "data", "cmake-args", "cuda-archs", "sources", "include-dirs", "defines",
                   "extensions"}


def hostile_strings(scratch: Scratch) -> st.SearchStrategy[str]:
    fixed = [
        "", "-", "--", "-x", "..", "../..", "../../../../etc", "/", "/etc/passwd", "/dev/zero", ".", "a\nb", "a\rb",
        "a\x00b", "\x7f", "\ufeffmain", "main\n", " main", "HEAD", "@{-1}", "main:refs/heads/x", "[z-a]*", "**/../x",
        "patches/../../x", "forks/kern", ".assemble", "x" * 5000, "é" * 300, "0" * 40, "f" * 39, "C:\\x", "~root",
        "file:///etc", "https://git.invalid/kern\n", "git@host:-x", "%2e%2e/x", "patches/kern/series",
    ]
    return st.one_of(st.sampled_from(fixed + scratch.payloads()), TEXT,
                     st.builds(lambda p, s: p + s, st.sampled_from(["-", "/", "../", "\n", "x" * 70000]), TEXT))


def other_values() -> st.SearchStrategy[Any]:
    return st.one_of(st.integers(-2, 2**40), st.booleans(), st.lists(TEXT, max_size=3),
                     st.dictionaries(TEXT, TEXT, max_size=2))


def _mutated_manifest(scratch: Scratch, draw: Any) -> bytes:
    data: dict[str, Any] = tomllib.loads(_toml(scratch.manifest))
    target = draw(st.sampled_from(["dep", "bundle", "mirror", "install", "submodules", "list", "newkey",
                                   "build", "extension", "verify", "budget", "cache"]))
    value: Any = draw(st.one_of(hostile_strings(scratch), other_values()) if draw(st.integers(0, 4)) == 0
                      else hostile_strings(scratch))
    dep = data["deps"]["kern"]
    if target == "dep":
        dep[draw(st.sampled_from(DEP_STRING_KEYS))] = value
    elif target == "bundle":
        data["bundle"][draw(st.sampled_from(BUNDLE_STRING_KEYS))] = value
    elif target == "mirror":
        data["mirrors"] = {"https://git.invalid/": value} if draw(st.booleans()) else {str(value): "remotes/"}
    elif target == "install":
        dep["install"] = {str(value): "pkg/"} if draw(st.booleans()) else {"**": value}
    elif target == "submodules":
        dep["submodules"] = [value]
    elif target == "list":
        data["bundle"][draw(st.sampled_from(["cuda-archs", "verify-torch"]))] = [value]
    elif target == "build":
        key = draw(st.sampled_from(BUILD_KEYS))
        dep["build"] = {key: [value] if key in BUILD_LIST_KEYS else {str(value): "1"} if key == "build-env" else value}
        if key in ("cmake-dir", "cmake-args") or draw(st.booleans()):
            dep["build"].setdefault("backend", draw(st.sampled_from(["cmake", "setuptools", "helper"])))
    elif target == "extension":
        key = draw(st.sampled_from(["name", "sources", "language", "include-dirs", "defines", "libraries"]))
        extension: dict[str, Any] = {"name": "_k_C", "sources": ["csrc/kern.cpp"]}
        extension[key] = value if key in ("name", "language") else [value]
        dep["build"] = {"extensions": [extension]}
    elif target == "verify":
        dep["verify"] = {draw(st.sampled_from(["ops", "smoke", "requires-cuda"])): value}
    elif target == "budget":
        (dep if draw(st.booleans()) else data["bundle"])["max-size" if draw(st.booleans())
                                                         else "max-wheel-size"] = value
    elif target == "cache":
        data["cache"] = {draw(st.sampled_from(["compiler", "remote", "artifacts", "s3-endpoint"])): value}
    else:
        dep[str(value)] = "x"
    raw = _toml(data).encode()
    if draw(st.integers(0, 19)) == 0:  # nesting that recurses in the parser
        depth = draw(st.sampled_from([50, 5000, 200_000]))
        raw += b"\n[zz]\nx = " + b"[" * depth + b"]" * depth + b"\n"
    if draw(st.integers(0, 9)) == 0:  # not UTF-8, or a BOM, somewhere
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xef\xbb\xbf", b"\x00", b"\xed\xa0\x80"])) + raw[at:]
    return raw


@st.composite
def manifests(draw: Any, scratch: Scratch) -> bytes:
    return _mutated_manifest(scratch, draw)


SERIES_LINES = [
    "0001-Use-stable-tensor-type.patch", "0002-Register-with-STABLE_TORCH_LIBRARY.patch", "# comment", "",
    "../../../../q.patch", "/etc/passwd", "-p1", "0001-Use-stable-tensor-type.patch -p1", "..", ".", "series",
    "x/../0001-Use-stable-tensor-type.patch", "\ufeff0001-Use-stable-tensor-type.patch", "a\tb.patch", "missing.patch",
    ".hidden.patch", "0001-Use-stable-tensor-type.patch\r", "x" * 300 + ".patch",
]


@st.composite
def series_cases(draw: Any, scratch: Scratch) -> dict[str, Any]:
    lines = draw(st.lists(st.one_of(st.sampled_from(SERIES_LINES), TEXT.filter(lambda s: "\n" not in s)), max_size=6))
    raw = "\n".join(lines).encode()
    if draw(st.integers(0, 5)) == 0:
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b"\xff\xfe", b"\xef\xbb\xbf", b"\x80"])) + raw[at:]
    return {
        "series": raw,
        "shape": draw(st.sampled_from(["file", "file", "file", "directory", "fifo", "symlink-out", "absent",
                                       "patches-is-file"])),
        "patch": draw(st.sampled_from(["keep", "keep", "empty", "garbage", "binary"])),
    }


def _write_series(case: Path, scratch: Scratch, spec: dict[str, Any]) -> None:
    patches = case / "patches" / "kern"
    series = patches / "series"
    series.unlink()
    shape = spec["shape"]
    if shape == "file":
        series.write_bytes(spec["series"])
    elif shape == "directory":
        series.mkdir()
    elif shape == "fifo":
        os.mkfifo(series)
    elif shape == "symlink-out":
        outside = scratch.root / "outside-series"
        outside.write_bytes(spec["series"])
        series.symlink_to(outside)
    elif shape == "patches-is-file":
        shutil.rmtree(patches)
        patches.write_bytes(spec["series"])
        return
    first = sorted(patches.glob("*.patch"))[0]
    if spec["patch"] == "empty":
        first.write_bytes(b"")
    elif spec["patch"] == "garbage":
        first.write_text("From nobody\nSubject: [PATCH] x\n\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    elif spec["patch"] == "binary":
        first.write_bytes(bytes(range(256)))


# -- the tests -------------------------------------------------------------------------------------

@pytest.mark.parametrize("command",
                         [("deps", "--json"), ("patches", "--offline", "--format", "json"), ("checkout", "--json")])
def test_fuzz_manifest_values(scratch: Scratch, command: tuple[str, ...]) -> None:
    @FUZZ
    @given(st.data())
    def run(data: st.DataObject) -> None:
        raw = data.draw(manifests(scratch))
        with scratch.case() as case:
            (case / "deps.toml").write_bytes(raw)
            _run(scratch, case, *command)

    run()


@pytest.mark.parametrize("command",
                         [("deps", "--json"), ("patches", "--offline", "--format", "json"), ("checkout", "--json")])
def test_fuzz_series_files(scratch: Scratch, command: tuple[str, ...]) -> None:
    @FUZZ
    @given(st.data())
    def run(data: st.DataObject) -> None:
        spec = data.draw(series_cases(scratch))
        with scratch.case() as case:
            _write_series(case, scratch, spec)
            _run(scratch, case, *command)

    run()


def test_fuzz_command_line_values(scratch: Scratch) -> None:
    """Hostile DEP names and --onto values on the command line."""
    @FUZZ
    @given(hostile_strings(scratch), st.sampled_from(["deps", "patches", "checkout", "rebase"]))
    def run(value: str, command: str) -> None:
        args = [command, "--dry-run", "--onto", value, "kern"] if command == "rebase" else [command, value]
        if command == "patches":
            args.append("--offline")
        with scratch.case() as case:
            _run(scratch, case, *args)

    run()
