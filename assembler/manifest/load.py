"""Parse and validate deps.toml in one place. Every problem becomes a ManifestError that names
file:line:column, the key and the fix; nothing downstream re-checks the manifest."""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assembler import jsonfile
from assembler.errors import ManifestError
from assembler.manifest.flags import JOINED_FLAGS, cmake_arg_problem, flag_allowed, flag_owner
from assembler.manifest.globs import glob_problem
from assembler.manifest.model import (
    BACKENDS,
    CUDA,
    CUDA_COMPONENTS,
    CXX,
    LANGUAGES,
    BackendName,
    BuildRecipe,
    Bundle,
    CacheConfig,
    Dependency,
    Extension,
    Manifest,
    Profile,
    VerifySpec,
    parse_size,
    reserved_env,
)
from assembler.manifest.refname import branch_problem
from assembler.manifest.values import (
    MAX_VALUE_CHARS,
    control_character,
    file_name_problem,
    install_destination_problem,
    relative_path_problem,
    text_problem,
    torch_release_problem,
    url_problem,
)
from assembler.series.seriesfile import parse_series

if TYPE_CHECKING:
    from assembler.manifest.positions import Positions, Spot

MANIFEST_NAME = "deps.toml"
STATE_DIR = ".assemble"  # the workspace's state directory, next to deps.toml (workspace.Workspace.state_dir)
PARSED_DIR = "manifests"  # in the user cache: <digest of the text>.json, a parse of deps.toml with its text (_parse_text)
PARSED_FORMAT = 1
PARSED_KEPT = 64  # parses kept in the cache, the most recently written (one per distinct deps.toml text)
# Set to 1 by whoever runs assemble (never by the manifest, which may come from a pull request)
# to allow a `patches` directory outside the workspace (absolute, '..', or a symlink out).
PATCHES_OUTSIDE_ENV = "ASSEMBLE_PATCHES_OUTSIDE_WORKSPACE"
# Directories of the workspace that assemble itself writes: never a patches directory.
RESERVED_DIRS = ("forks", ".assemble", ".git")
UTF8_BOM = b"\xef\xbb\xbf"
MAX_TEXT_BYTES = 16 << 20  # a manifest or series larger than this is not one
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
TORCH_TARGET_RE = re.compile(r"^\d+\.\d+$")
ARCH_RE = re.compile(r"^\d+\.\d+[af]?$")

BUNDLE_KEYS = {"name", "version", "python-abi", "torch-target", "torch", "cuda-archs", "verify-torch", "max-wheel-size",
               "cuda-components"}
DEP_KEYS = {
    "upstream", "source", "commit", "track", "submodules", "torch-target", "patches",
    "build", "install", "verify", "max-size", "cuda-components", "profiles",
}
BUILD_KEYS = {
    "extensions", "python-packages", "data", "cmake-dir", "cmake-args", "cuda-archs",
    "backend", "project-dir", "sources", "include-dirs", "defines", "build-env", "ptx",
}
EXTENSION_KEYS = {"name", "sources", "language", "include-dirs", "defines", "libraries",
                  "cxx-flags", "cuda-flags", "cxx-std", "cuda-std", "ptx"}
CXX_STANDARDS = ("17", "20", "23")  # what cxx-std accepts (gcc and CMake know them all)
CUDA_STANDARDS = ("17", "20")  # what nvcc 12 and 13 accept as -std=c++N
LIBRARY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")  # a name for -l / find_library, never a path or a flag
VERIFY_KEYS = {"ops", "smoke", "requires-cuda"}
PROFILE_KEYS = {"description", "defines", "build-env", "sources", "cuda-archs"}  # [deps.X.profiles.NAME]
PROFILE_NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,31}$")  # a PEP 440 local version segment: +cu132.smoke
TOP_KEYS = {"bundle", "mirrors", "deps", "cache"}
CACHE_KEYS = {"compiler", "remote", "artifacts", "s3-endpoint"}
ENV_NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
DEFINE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(=[^;$\r\n]*)?$")  # no ; or $: CMake would split or expand them


Keys = tuple[str | int, ...]  # a path in the manifest: keys, and the index of an [[array of tables]] block


def _dotted(keys: Keys) -> str:
    """A path as errors name it: deps.x.build.extensions.name (the block is in the position)."""
    return ".".join(key for key in keys if isinstance(key, str))


class _Locator:
    """Maps a key path to file:line:column. The text is scanned by TOML's own grammar
    (manifest/positions.py: a ``[`` inside a string is no header) on the first error only: a
    valid manifest never pays for it."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text
        self._positions: Positions | None = None

    @property
    def positions(self) -> Positions:
        if self._positions is None:
            from assembler.manifest.positions import Positions, Unclosed

            self._positions = Positions(self.text)
            with contextlib.suppress(Unclosed):  # tomllib read the text whole: nothing is left open
                self._positions.scan()
        return self._positions

    def _path(self, keys: tuple[str | int, ...]) -> tuple[str | int, ...]:
        """``keys`` with the first block of each array of tables it names without an index."""
        spots = self.positions.spots
        path: tuple[str | int, ...] = ()
        for number, key in enumerate(keys):
            path = (*path, key)
            if (*path, 0) in spots and isinstance(key, str) and number + 1 < len(keys) and isinstance(keys[number + 1], str) \
                    and (*path, keys[number + 1]) not in spots:
                path = (*path, 0)
        return path

    def _at(self, spot: Spot) -> str:
        return f"{self.path}:{spot.line}:{spot.column}"

    def where(self, keys: tuple[str | int, ...]) -> str:
        """Best position for ``keys``: the key's own, else its nearest table's, else the file's first line."""
        return self._at(self.positions.find(self._path(keys)))

    def where_value(self, keys: tuple[str, ...], value: str, index: int | None = None) -> str:
        """Position of the string ``value`` in the array at ``keys`` (the line a missing path is
        named on); ``index`` picks the n-th ``[[table]]`` of an array of tables (keys[:-1])."""
        path: tuple[str | int, ...] = self._path(keys) if index is None else (*keys[:-1], index, keys[-1])
        return self._at(self.positions.find_string(path, value))

    def where_in_array(self, table: tuple[str, ...], index: int, key: str) -> str:
        """Position of ``key`` in the ``index``-th ``[[table]]`` block (0-based)."""
        return self.where((*table, index, key))

    def where_entry(self, keys: tuple[str, ...], name: str) -> str:
        """Position of ``name = ...`` inside the table at ``keys``, written inline or not."""
        return self.where((*keys, name))


class _Validator:
    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.locator = _Locator(path, text)

    def fail(self, keys: Keys, message: str, fix: str) -> ManifestError:
        dotted = _dotted(keys)
        return ManifestError(f"{self.locator.where(keys)}: {dotted}: {message}", hint=fix)

    def table(self, value: Any, keys: Keys, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(keys, f"expected a table, got {type(value).__name__}", f"write [{_dotted(keys)}] as a table")
        for key in value:
            if key not in allowed:
                import difflib

                close = difflib.get_close_matches(key, sorted(allowed), n=1)
                fix = f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(sorted(allowed))}"
                raise self.fail((*keys, key), "unknown key", fix)
        return dict(value)

    def string(self, table: dict[str, Any], keys: Keys, default: str | None = None, *, required: bool = False) -> str | None:
        value = table.get(str(keys[-1]))
        if value is None:
            if required:
                raise self.fail(keys, "missing required key", f'add {keys[-1]} = "..."')
            return default
        if not isinstance(value, str) or not value:
            raise self.fail(keys, f"expected a non-empty string, got {value!r}", f'write {keys[-1]} = "..."')
        return str(value)

    def strings(self, table: dict[str, Any], keys: Keys) -> tuple[str, ...]:
        value = table.get(str(keys[-1]), [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(keys, f"expected a list of strings, got {value!r}", f'write {keys[-1]} = ["..."]')
        return tuple(str(v) for v in value)

    def check(self, ok: bool, keys: Keys, message: str, fix: str) -> None:
        if not ok:
            raise self.fail(keys, message, fix)


def read_utf8(path: Path, what: str) -> str:
    """The text of ``path``; a file that is not a regular UTF-8 text file (a directory, a BOM,
    a byte that is not UTF-8) is a ManifestError naming the file and the line."""
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise ManifestError(f"{path}: is a directory, not {what}", hint=f"move the directory away; {path.name} must be a text file")
        if not stat.S_ISREG(mode):  # a FIFO or a device would block or never end
            raise ManifestError(f"{path}: is not a regular file", hint=f"replace it with {what} text file")
        if path.stat().st_size > MAX_TEXT_BYTES:
            raise ManifestError(f"{path}: larger than {MAX_TEXT_BYTES >> 20} MiB, not {what}", hint=f"check {path.name}")
        data = path.read_bytes()
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such file", hint=f"create {path.name} or fix the path") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read ({exc.strerror or exc})", hint="check the file's permissions") from None
    if data.startswith(UTF8_BOM):
        raise ManifestError(f"{path}:1:1: starts with a UTF-8 byte-order mark (BOM)", hint=f"save {path.name} as UTF-8 without BOM")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ManifestError(f"{path}:{line}:{col}: not UTF-8 text ({exc.reason})", hint=f"save {path.name} as UTF-8") from None


def _parse_text(path: Path) -> tuple[str, dict[str, Any], bool]:
    """(the text, its parse, whether the parse is the stored one)."""
    if not path.exists() and not path.is_symlink():
        raise ManifestError(f"{path}: no such manifest", hint="create deps.toml or pass --workspace DIR")
    text = read_utf8(path, "a manifest")
    _bound_shape(path, text)
    stored = _stored_parse(text)
    if stored is not None:
        return text, stored, True
    import tomllib

    try:
        # Reading uses the stdlib parser (several times faster than tomlkit, which keeps
        # formatting we only need when editing: see manifest/edit.py).
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(path, text, str(exc)) from None
    except RecursionError:  # tomllib recurses per nested array or inline table
        raise ManifestError(f"{path}: TOML nested too deeply", hint="a deps.toml needs a few levels of nesting, not thousands") from None
    return text, data, False


def _syntax_error(path: Path, text: str, reason: str) -> ManifestError:
    """tomllib's complaint at file:line:column; a string, array or inline table left open is
    named where it opens (tomllib reports the line break after it, or the end of the document)."""
    from assembler.manifest.positions import unclosed_problem

    match = re.search(r"\(at line (\d+), column (\d+)\)$", reason)
    line, col = (int(match[1]), int(match[2])) if match else (text.count("\n") + 1, 1)  # else "at end of document"
    reason = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)$", "", reason)
    found = unclosed_problem(text)
    if found is not None and found[0].line <= line:
        spot, problem, fix = found
        return ManifestError(f"{path}:{spot.line}:{spot.column}: TOML syntax error: {problem}", hint=fix)
    return ManifestError(f"{path}:{line}:{col}: TOML syntax error: {reason}", hint="fix the TOML syntax at that position")


MAX_KEY_PARTS = 64  # parts of one dotted key or table header (deps.x.build.extensions is 4)
MAX_NESTING = 32  # arrays and inline tables inside each other
_SHAPE_CHAR = re.compile(r"[\"'#.\[\]{}=,\n]")  # what the shape bound stops at
_BASIC_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')


def _bound_shape(path: Path, text: str) -> None:
    """Refuse a dotted key or header of more than MAX_KEY_PARTS parts, or values nested deeper
    than MAX_NESTING, before any parser runs: tomllib (and the position locator) take time
    quadratic in a key's parts (40,000 parts in 88 KB: minutes and gigabytes). One pass over
    the text, strings and comments skipped whole; an unterminated one ends it (tomllib then
    says where)."""
    parts = depth = 0
    line = 1
    at = 0
    while (found := _SHAPE_CHAR.search(text, at)) is not None:
        char, at = found.group(), found.end()
        if char in "\"'":
            triple = text.startswith(char * 3, found.start())
            if triple:
                end = text.find(char * 3, at + 2)
                end = -1 if end < 0 else end + 3
            elif char == "'":
                end = text.find("'", at)
                end = -1 if end < 0 or "\n" in text[at:end] else end + 1
            else:
                basic = _BASIC_STRING.match(text, found.start())
                end = -1 if basic is None else basic.end()
            if end < 0:
                return
            line += text.count("\n", at, end)
            at, parts = end, 0
            continue
        if char == "#":
            at = text.find("\n", at)
            if at < 0:
                return
            continue
        if char == ".":
            parts += 1
            if parts >= MAX_KEY_PARTS:
                raise ManifestError(f"{path}:{line}: a key of more than {MAX_KEY_PARTS} dotted parts",
                                    hint="a deps.toml key has a few parts ([deps.NAME.build]); fix that line")
            continue
        parts = 0
        if char in "[{":
            depth += 1
            if depth > MAX_NESTING:
                raise ManifestError(f"{path}:{line}: TOML nested too deeply (arrays or inline tables more than {MAX_NESTING} deep)",
                                    hint="a deps.toml needs a few levels of nesting; fix that line")
        elif char in "]}":
            depth = max(depth - 1, 0)
        elif char == "\n":
            line += 1


def _parse_record(text: str, create: bool = False) -> Path:
    """Where the parse of ``text`` is kept: the user cache (trusted, like the mirrors), keyed by
    the text's digest; never the workspace, whose files may come from a pull request (a stored
    parse there could say what no reviewer sees in deps.toml). OSError when there is no cache."""
    from assembler.cache import cache_root
    from assembler.fsutil import sha256

    digest = sha256(f"{PARSED_FORMAT}\0{sys.version}\0{text}".encode()).hexdigest()
    return cache_root(create) / PARSED_DIR / f"{digest}.json"


def _stored_parse(text: str) -> dict[str, Any] | None:
    """The parse of deps.toml kept by an earlier run, when it was of exactly this text: every
    command reads the manifest, and tomllib's import alone is ~7 ms of the 100 ms start-up
    budget (benchmarks/startup.py), where reading back its JSON costs well under one. The text
    is compared whole, so an edit is never missed, whatever the file's times say."""
    try:
        record = jsonfile.load(_parse_record(text))
    except (OSError, ValueError):
        return None
    if (isinstance(record, dict) and record.get("format") == PARSED_FORMAT and record.get("python") == sys.version
            and record.get("text") == text and isinstance(record.get("data"), dict)):
        return record["data"]  # type: ignore[no-any-return]
    return None


def _store_parse(text: str, data: dict[str, Any]) -> None:
    """Keep ``data`` for _stored_parse, once it proved a valid manifest (a command that fails
    writes nothing), when JSON holds it exactly (TOML dates do not round-trip) and the cache
    can be written (best effort: without one, every run parses); the oldest records beyond
    PARSED_KEPT are removed."""
    try:
        encoded = json.dumps({"format": PARSED_FORMAT, "python": sys.version, "text": text, "data": data})
        if json.loads(encoded)["data"] != data:
            return
    except (TypeError, ValueError):
        return
    from assembler.fsutil import atomic_write_if_changed

    with contextlib.suppress(OSError):
        record = _parse_record(text, create=True)
        record.parent.mkdir(exist_ok=True)
        atomic_write_if_changed(record, encoded)
        kept = sorted(record.parent.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[PARSED_KEPT:]:
            old.unlink(missing_ok=True)


def load_manifest(path: Path) -> Manifest:
    """Read, validate and type ``path``; raises ManifestError on the first problem found."""
    text, data, stored = _parse_text(path)
    v = _Validator(path, text)
    top = v.table(data, (), TOP_KEYS)
    bundle = _bundle(v, top.get("bundle"))
    mirrors = _mirrors(v, top.get("mirrors", {}))
    deps_table = top.get("deps", {})
    v.check(isinstance(deps_table, dict), ("deps",), "expected a table of dependencies", "write [deps.<name>] tables")
    deps: dict[str, Dependency] = {}
    for name, raw in deps_table.items():
        deps[name] = _dependency(v, path.parent, name, raw, bundle)
    manifest = Manifest(path=path, bundle=bundle, mirrors=mirrors, deps=deps, cache=_cache(v, top.get("cache", {})))
    if not stored:
        _store_parse(text, data)
    return manifest


def _torch_target(v: _Validator, table: dict[str, Any], keys: tuple[str, ...], default: str | None) -> str:
    value = v.string(table, keys, default, required=default is None)
    assert value is not None
    v.check(bool(TORCH_TARGET_RE.match(value)), keys, f"{value!r} is not a MAJOR.MINOR torch version", 'write e.g. torch-target = "2.10"')
    return value


def _torch_release(v: _Validator, keys: tuple[str, ...], value: str) -> None:
    """A torch release, X.Y.Z: the rule of --torch too (values.torch_release_problem)."""
    problem = torch_release_problem(value)
    if problem is not None:
        raise v.fail(keys, *problem)


def _version(v: _Validator, keys: tuple[str, ...], value: str) -> None:
    """A PEP 440 version. Plain release numbers (``1.2.3``, the usual case) are valid PEP 440
    as they stand; packaging is imported only for anything else (its import and patterns are
    ~3 ms of the start-up budget every command pays, benchmarks/startup.py)."""
    if value and all(part.isdigit() and part.isascii() for part in value.split(".")):
        return
    from packaging.version import InvalidVersion, Version

    try:
        Version(value)
    except InvalidVersion:
        raise v.fail(keys, f"{value!r} is not a PEP 440 version", 'write e.g. "2.13.0"') from None


def _bundle(v: _Validator, raw: Any) -> Bundle:
    if raw is None:
        raise v.fail(("bundle",), "missing [bundle] table", 'add [bundle] with name, version and python-abi')
    table = v.table(raw, ("bundle",), BUNDLE_KEYS)
    key = ("bundle",)
    name = v.string(table, (*key, "name"), required=True)
    assert name is not None
    v.check(bool(re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", name)), (*key, "name"), f"{name!r} is not a valid distribution name", "use letters, digits, '.', '-' and '_'")
    version = v.string(table, (*key, "version"), required=True)
    assert version is not None
    _version(v, (*key, "version"), version)
    v.check("+" not in version, (*key, "version"), "a local version label is added at build time (+cuXYZ)", "drop the '+...' part")
    python_abi = v.string(table, (*key, "python-abi"), "3.9")
    assert python_abi is not None
    v.check(bool(re.match(r"^3\.\d+$", python_abi)), (*key, "python-abi"), f"{python_abi!r} is not a Python 3 MAJOR.MINOR version", 'write e.g. python-abi = "3.9"')
    torch_target = _torch_target(v, table, (*key, "torch-target"), "2.10")
    torch = v.string(table, (*key, "torch"))
    if torch is not None:
        _torch_release(v, (*key, "torch"), torch)
    archs = v.strings(table, (*key, "cuda-archs"))
    for arch in archs:
        v.check(bool(ARCH_RE.match(arch)), (*key, "cuda-archs"), f"{arch!r} is not a CUDA architecture", 'write e.g. cuda-archs = ["9.0a"]')
    verify_torch = v.strings(table, (*key, "verify-torch"))
    for item in verify_torch:
        _torch_release(v, (*key, "verify-torch"), item)
    return Bundle(name, version, python_abi, torch_target, torch, archs, verify_torch,
                  max_wheel_size=_size(v, table, (*key, "max-wheel-size")),
                  cuda_components=_cuda_components(v, table, (*key, "cuda-components")))


def _cuda_components(v: _Validator, table: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, ...]:
    """cuda-components = ["curand", ...]: toolkit libraries beyond nvcc, CCCL and the runtime,
    installed into the hermetic toolkit from NVIDIA's wheels (names as the cuda-toolkit wheel's extras)."""
    components = v.strings(table, keys)
    for component in components:
        if component not in CUDA_COMPONENTS:
            import difflib

            close = difflib.get_close_matches(component, CUDA_COMPONENTS, n=1)
            base = " (part of every toolkit already)" if component in ("nvcc", "cccl", "cudart", "crt", "nvvm") else ""
            raise v.fail(keys, f"{_shown(component)} is not a CUDA toolkit component{base}",
                         (f"did you mean '{close[0]}'? " if close else "") + f"known: {', '.join(CUDA_COMPONENTS)}")
    v.check(len(set(components)) == len(components), keys, "a component is listed twice", "list each component once")
    return tuple(sorted(components))


def _size(v: _Validator, table: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    """A size budget ("400MB", "321MiB", or bytes); `assemble build` fails when the wheel exceeds it."""
    value = table.get(keys[-1])
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise v.fail(keys, str(exc), f'write {keys[-1]} = "400MB" (kB, MB, GB, KiB, MiB, GiB or bytes)') from None


def _cache(v: _Validator, raw: Any) -> CacheConfig:
    """[cache]: compiler = "sccache" | "none", remote = "redis://HOST:PORT/DB", artifacts =
    "file:///DIR" | "s3://BUCKET/PREFIX", s3-endpoint = "http://HOST:PORT"."""
    key = ("cache",)
    table = v.table(raw, key, CACHE_KEYS)
    compiler = v.string(table, (*key, "compiler"), "sccache") or "sccache"
    v.check(compiler in ("sccache", "none"), (*key, "compiler"), f"expected \"sccache\" or \"none\", got {compiler!r}",
            'write compiler = "sccache" (the default) or compiler = "none"')
    remote = v.string(table, (*key, "remote"))
    if remote is not None:
        v.check(re.fullmatch(r"rediss?://[^\s/]+(/\d+)?/?", remote) is not None, (*key, "remote"),
                f"{_shown(remote)} is not a Redis URL", 'write remote = "redis://HOST:PORT/DB" (S3, GCS, WebDAV: sccache\'s own SCCACHE_* variables)')
    artifacts = v.string(table, (*key, "artifacts"))
    if artifacts is not None:
        v.check(re.fullmatch(r"file:///\S*|s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/\S*)?", artifacts) is not None
                and "/../" not in f"{artifacts}/", (*key, "artifacts"),
                f"{_shown(artifacts)} is not a file:/// or s3:// store", 'write artifacts = "file:///shared/dir" or "s3://bucket/prefix"')
    endpoint = v.string(table, (*key, "s3-endpoint"))
    if endpoint is not None:
        v.check(re.fullmatch(r"https?://[^\s/]+/?", endpoint) is not None, (*key, "s3-endpoint"),
                f"{_shown(endpoint)} is not an http(s)://HOST[:PORT] endpoint", 'write s3-endpoint = "http://127.0.0.1:9000"')
    return CacheConfig(compiler=compiler, remote=remote, artifacts=artifacts, s3_endpoint=endpoint)


def _mirrors(v: _Validator, raw: Any) -> dict[str, str]:
    v.check(isinstance(raw, dict), ("mirrors",), "expected a table of URL prefix = replacement", 'write "https://github.com/" = "/srv/git-mirrors/"')
    for prefix, target in raw.items():
        v.check(isinstance(target, str) and bool(target), ("mirrors", prefix), f"replacement must be a non-empty string, got {target!r}", f'write "{prefix}" = "/path/to/mirrors/"')
        for value in (prefix, target):
            problem = url_problem(value, prefix=True)
            if problem is not None:
                where = v.locator.where_entry(("mirrors",), prefix)
                raise ManifestError(f"{where}: mirrors: {_shown(value)} is not a repository URL prefix: {problem}",
                                    hint='write e.g. "https://github.com/" = "/srv/git-mirrors/"')
    return {str(k): str(val) for k, val in raw.items()}


def _dependency(v: _Validator, root: Path, name: str, raw: Any, bundle: Bundle) -> Dependency:
    key = ("deps", name)
    v.check(bool(NAME_RE.match(name)) and len(name) <= 100 and branch_problem(name) is None, key,  # the branch assemble/NAME
            f"{name[:100]!r} is not a valid dependency name" + (f" ({problem})" if (problem := branch_problem(name)) else ""),
            "use at most 100 lowercase letters, digits, '.', '-' and '_' (no '..', not ending in '.' or '.lock')")
    table = v.table(raw, key, DEP_KEYS)
    upstream = v.string(table, (*key, "upstream"))
    source = v.string(table, (*key, "source"), upstream)
    if source is None:
        raise v.fail(key, "neither source nor upstream is set", 'add upstream = "https://..." (and source = "..." for a fork)')
    for url_key in ("upstream", "source"):
        if url_key in table:
            _url(v, (*key, url_key), str(table[url_key]))
    commit = v.string(table, (*key, "commit"), required=True)
    assert commit is not None
    v.check(
        bool(SHA_RE.match(commit)), (*key, "commit"),
        f"{commit!r} is not a full 40-hex commit SHA",
        "pin the full SHA (git rev-parse <ref>); branches, tags and short SHAs move or collide",
    )
    track = v.string(table, (*key, "track"), "main")
    assert track is not None
    problem = branch_problem(track) if len(track) <= MAX_VALUE_CHARS else f"it is longer than {MAX_VALUE_CHARS} characters"
    if problem is not None:
        raise v.fail((*key, "track"), f"{_shown(track)} is not a valid branch name: {problem}",
                     'name the upstream branch to follow, e.g. track = "main" (git check-ref-format --branch rules)')
    submodules = v.strings(table, (*key, "submodules"))
    for sub in submodules:
        if (problem := relative_path_problem(sub)) is not None:
            raise v.fail((*key, "submodules"), f"{_shown(sub)} is not a submodule path: {problem}", "use the path from .gitmodules, relative to the checkout")
    torch_target = _torch_target(v, table, (*key, "torch-target"), bundle.torch_target)
    patches_dir = _patches_dir(v, root, (*key, "patches"), table.get("patches"), name)
    series = _series(v, (*key, "patches"), patches_dir, explicit="patches" in table, root=root)
    build = _build(v, table.get("build", {}), (*key, "build"))
    install = _install(v, table.get("install", {}), (*key, "install"))
    verify = _verify(v, table.get("verify", {}), (*key, "verify"))
    return Dependency(
        name=name, upstream=upstream, source=source, commit=commit, track=track,
        submodules=submodules, torch_target=torch_target, patches_dir=patches_dir,
        series=series, build=build, install=install, verify=verify, max_size=_size(v, table, (*key, "max-size")),
        cuda_components=tuple(sorted({*bundle.cuda_components, *_cuda_components(v, table, (*key, "cuda-components"))})),
        profiles=_profiles(v, table.get("profiles", {}), (*key, "profiles"), build),
    )


def _profiles(v: _Validator, raw: Any, keys: tuple[str, ...], recipe: BuildRecipe) -> tuple[Profile, ...]:
    """[deps.X.profiles.NAME]: reduced configurations of the recipe. Each must change something,
    and reduce only what the recipe has: its sources are entries of the recipe's sources (of an
    extension's, for the helper), build-env is for the backends that read one."""
    v.check(isinstance(raw, dict), keys, "expected a table of profiles", f"write [{'.'.join(keys)}.smoke] tables")
    profiles = []
    for name, item in raw.items():
        where = (*keys, name)
        v.check(isinstance(name, str) and bool(PROFILE_NAME_RE.match(name)), where,
                f"{name!r} is not a profile name (it becomes a segment of the wheel's local version, +cu132.NAME)",
                "use 1 to 32 lowercase letters and digits, starting with a letter, e.g. smoke")
        table = v.table(item, where, PROFILE_KEYS)
        v.check(bool(set(table) - {"description"}), where, "the profile changes nothing",
                "add defines, build-env, sources or cuda-archs to it, or remove it")
        helper = recipe.backend == "helper"
        if helper and "build-env" in table:
            raise v.fail((*where, "build-env"), "the helper backend runs no build of the dependency's own to give an environment to",
                         "use defines, sources or cuda-archs for a helper recipe")
        sources = v.strings(table, (*where, "sources")) if "sources" in table else None
        if sources is not None:
            recipe_sources = [s for ext in recipe.extensions for s in ext.sources] if helper else list(recipe.sources)
            for source in sources:
                v.check(source in recipe_sources, (*where, "sources"),
                        f"{_shown(source)} is not one of the recipe's sources",
                        f"list entries of [{'.'.join(keys[:-1])}.build]" + (" extensions' sources" if helper else " sources")
                        + ", written the same way (a profile builds a subset of the units the build files know)")
            v.check(bool(sources), (*where, "sources"), "a profile of no units builds nothing",
                    "list the sources to keep, or drop the key to keep every unit")
        archs = v.strings(table, (*where, "cuda-archs")) if "cuda-archs" in table else None
        for arch in archs or ():
            v.check(bool(ARCH_RE.match(arch)), (*where, "cuda-archs"), f"{arch!r} is not a CUDA architecture",
                    'write e.g. cuda-archs = ["9.0a"]')
        v.check(archs is None or bool(archs), (*where, "cuda-archs"), "a profile of no CUDA architecture",
                'name at least one, e.g. cuda-archs = ["9.0a"]')
        profiles.append(Profile(
            name=name, description=v.string(table, (*where, "description")),
            defines=_defines(v, table, (*where, "defines")),
            build_env=_build_env(v, table.get("build-env", {}), (*where, "build-env")),
            sources=tuple(sources) if sources is not None else None, cuda_archs=tuple(archs) if archs is not None else None,
        ))
    return tuple(profiles)


def _shown(value: str) -> str:
    """A value as an error message shows it: escaped (no newline reaches the terminal), cut short."""
    return repr(value if len(value) <= 80 else value[:80] + "...")


def _url(v: _Validator, keys: tuple[str, ...], url: str) -> None:
    problem = url_problem(url)
    if problem is not None:
        raise v.fail(keys, f"{_shown(url)} is not a repository URL: {problem}",
                     "use an https://, http://, ssh://, git:// or file:// URL, user@host:path, or a local path")


def _patches_dir(v: _Validator, root: Path, keys: tuple[str, ...], value: Any, name: str) -> Path:
    """Where the series lives: below the workspace (not in forks/ or .assemble/), unless whoever
    runs assemble sets ASSEMBLE_PATCHES_OUTSIDE_WORKSPACE=1."""
    if value is not None and (not isinstance(value, str) or not value):
        raise v.fail(keys, f"expected a non-empty string, got {value!r}", f'write patches = "patches/{name}"')
    rel = value if value is not None else f"patches/{name}"
    if (char := control_character(rel)) is not None or len(rel) > MAX_VALUE_CHARS:
        raise v.fail(keys, f"{_shown(rel)} is not a directory path ({f'it contains {char}' if char else 'too long'})", f'write patches = "patches/{name}"')
    root = root.resolve()
    try:
        patches_dir = (root / rel).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise v.fail(keys, f"{_shown(rel)} cannot be resolved ({exc})", f'write patches = "patches/{name}"') from None
    if os.environ.get(PATCHES_OUTSIDE_ENV) == "1":
        return patches_dir
    inside = patches_dir.is_relative_to(root) and patches_dir != root
    first = patches_dir.relative_to(root).parts[0] if inside else ""
    if not inside or first in RESERVED_DIRS:
        where = "is the workspace itself" if patches_dir == root else f"is inside {first}/, which assemble writes" if inside else "leaves the workspace"
        raise v.fail(keys, f"{_shown(rel)} {where} ({patches_dir})",
                     f"keep the series below the workspace, e.g. patches = \"patches/{name}\" (or set {PATCHES_OUTSIDE_ENV}=1 to allow a directory outside it)")
    return patches_dir


def _link_out_of(root: Path, path: Path) -> Path | None:
    """Where ``path`` leads when it is a symbolic link out of the workspace ``root`` (or into
    a directory assemble writes), unless ASSEMBLE_PATCHES_OUTSIDE_WORKSPACE=1; else None. A
    series or patch file is read like the directory that holds it: a link must not reach a
    file of the machine that no reviewer of the workspace sees."""
    if not path.is_symlink() or os.environ.get(PATCHES_OUTSIDE_ENV) == "1":
        return None
    root = root.resolve()
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None  # a dangling link or a loop: reported as missing or unreadable where it is read
    inside = target.is_relative_to(root) and target != root
    return None if inside and target.relative_to(root).parts[0] not in RESERVED_DIRS else target


def _series(v: _Validator, keys: tuple[str, ...], patches_dir: Path, *, explicit: bool, root: Path | None = None) -> tuple[str, ...]:
    """The series must name exactly the *.patch files present: a missing file or an orphan
    patch is the classic way a series silently loses a change. Entries are plain file names in
    ``patches_dir``. A missing directory is an empty series only when ``patches`` is not set."""
    dotted = ".".join(keys)
    try:
        mode = patches_dir.stat().st_mode
    except FileNotFoundError:
        backup = patches_dir.with_name(f".{patches_dir.name}.old")
        if backup.is_dir():
            raise ManifestError(f"{patches_dir}: {dotted}: missing, but {backup} holds the series of an interrupted export",
                                hint=f"move it back: mv {backup} {patches_dir}") from None
        if explicit:
            raise v.fail(keys, f"{patches_dir} does not exist", "fix the path, or create the directory (an empty series needs no file)") from None
        return ()
    except OSError as exc:
        raise ManifestError(f"{patches_dir}: {dotted}: cannot read ({exc.strerror or exc})", hint="check the directory's permissions") from None
    if not stat.S_ISDIR(mode):
        raise ManifestError(f"{patches_dir}: {dotted}: not a directory (the series and its *.patch files live in a directory)",
                            hint=f"move the file away and put the series in {patches_dir}/series")
    series_file = patches_dir / "series"
    listed_file = series_file.exists() or series_file.is_symlink()
    outside_hint = f"copy the file into {patches_dir} instead of linking it (or set {PATCHES_OUTSIDE_ENV}=1 to allow it)"
    if root is not None and (target := _link_out_of(root, series_file)) is not None:
        raise ManifestError(f"{series_file}: {dotted}: the series is a symbolic link out of the workspace ({target})", hint=outside_hint)
    entries = parse_series(read_utf8(series_file, "a series")) if listed_file else []
    for number, entry in entries:
        if (problem := file_name_problem(entry)) is not None:
            raise ManifestError(f"{series_file}:{number}:1: {dotted}: series entry {_shown(entry)}: {problem}",
                                hint=f"list plain file names of patches in {patches_dir}")
        if not (patches_dir / entry).is_file():
            raise ManifestError(
                f"{series_file}:{number}:1: {dotted}: series names {entry}, which does not exist",
                hint=f"restore {patches_dir / entry} or remove the line from the series",
            )
        if root is not None and (target := _link_out_of(root, patches_dir / entry)) is not None:
            raise ManifestError(f"{series_file}:{number}:1: {dotted}: {entry} is a symbolic link out of the workspace ({target})",
                                hint=outside_hint)
    listed = {entry for _, entry in entries}
    for orphan in sorted(p.name for p in patches_dir.glob("*.patch")):
        if orphan not in listed:
            where = f"{series_file}:{len(entries) + 1}:1" if listed_file else str(patches_dir / orphan)
            raise ManifestError(
                f"{where}: {dotted}: {orphan} is not in the series",
                hint=f"add '{orphan}' to {series_file} or delete the file",
            )
    names = [entry for _, entry in entries]
    seen: set[str] = set()
    for number, entry in entries:
        if entry in seen:
            raise ManifestError(f"{series_file}:{number}:1: series lists {entry} twice", hint="keep one line per patch")
        seen.add(entry)
    return tuple(names)


def _build(v: _Validator, raw: Any, keys: tuple[str, ...]) -> BuildRecipe:
    table = v.table(raw, keys, BUILD_KEYS)
    extensions_raw = table.get("extensions", [])
    v.check(isinstance(extensions_raw, list), (*keys, "extensions"), "expected an array of tables", f"write [[{'.'.join(keys)}.extensions]] blocks")
    extensions = []
    for index, item in enumerate(extensions_raw):
        ext_keys: Keys = (*keys, "extensions", index)
        ext = v.table(item, ext_keys, EXTENSION_KEYS)
        ext_name = v.string(ext, (*ext_keys, "name"), required=True)
        assert ext_name is not None
        v.check(bool(re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", ext_name)), (*ext_keys, "name"), f"{ext_name!r} is not a valid module name", "use a C identifier")
        sources = v.strings(ext, (*ext_keys, "sources"))
        v.check(bool(sources), (*ext_keys, "sources"), f"extension #{index + 1} has no sources", 'write sources = ["csrc/op.cpp"]')
        ext_include_dirs = v.strings(ext, (*ext_keys, "include-dirs"))
        for key, paths in (("sources", sources), ("include-dirs", ext_include_dirs)):
            for item in paths:
                _relative_path(v, (*ext_keys, key), item)
        language = v.string(ext, (*ext_keys, "language"), CXX)
        assert language is not None
        v.check(language in LANGUAGES, (*ext_keys, "language"), f"{language!r} is not a known language", 'write language = "cxx" or "cuda"')
        libraries = v.strings(ext, (*ext_keys, "libraries"))
        for library in libraries:
            if not LIBRARY_RE.match(library) or library.startswith("-"):
                raise ManifestError(f"{v.locator.where((*ext_keys, 'libraries'))}: {_dotted(ext_keys)}.libraries: "
                                    f"{_shown(library)} is not a library name", hint='write the name without lib and .so, e.g. libraries = ["cuda"]')
        cuda_flags = _compiler_flags(v, ext, ext_keys, "cuda-flags")
        cxx_std = _standard(v, ext, ext_keys, "cxx-std", CXX_STANDARDS)
        cuda_std = _standard(v, ext, ext_keys, "cuda-std", CUDA_STANDARDS)
        if language != CUDA:
            for key, given in (("cuda-flags", cuda_flags), ("cuda-std", cuda_std), ("ptx", "ptx" in ext)):
                if given:
                    raise ManifestError(f"{v.locator.where((*ext_keys, key))}: {_dotted(ext_keys)}.{key}: "
                                        f"extension {ext_name} is not a CUDA extension (language = {language!r})",
                                        hint=f'remove {key}, or set language = "cuda"')
        elif cuda_std is None and cxx_std is not None and cxx_std not in CUDA_STANDARDS:
            raise ManifestError(f"{v.locator.where((*ext_keys, 'cxx-std'))}: {_dotted(ext_keys)}.cxx-std: "
                                f"the CUDA units follow cxx-std, and nvcc knows no C++{cxx_std}",
                                hint=f'add cuda-std = "{CUDA_STANDARDS[-1]}" (one of {", ".join(CUDA_STANDARDS)})')
        ptx = ext.get("ptx", False)
        if not isinstance(ptx, bool):
            raise ManifestError(f"{v.locator.where((*ext_keys, 'ptx'))}: {_dotted(ext_keys)}.ptx: expected true or false, "
                                f"got {ptx!r}", hint="write ptx = true to ship PTX next to the SASS of arch-specific targets")
        extensions.append(Extension(
            name=ext_name, sources=sources, language=language,
            include_dirs=ext_include_dirs,
            defines=_defines(v, ext, (*ext_keys, "defines")),
            libraries=libraries,
            cxx_flags=_compiler_flags(v, ext, ext_keys, "cxx-flags"),
            cuda_flags=cuda_flags,
            cxx_std=cxx_std,
            cuda_std=cuda_std,
            ptx=ptx,
        ))
    archs = table.get("cuda-archs")
    cuda_archs = v.strings(table, (*keys, "cuda-archs")) if archs is not None else None
    for arch in cuda_archs or ():
        v.check(bool(ARCH_RE.match(arch)), (*keys, "cuda-archs"), f"{arch!r} is not a CUDA architecture", 'write e.g. cuda-archs = ["9.0a"]')
    cmake_dir = v.string(table, (*keys, "cmake-dir"))
    backend = v.string(table, (*keys, "backend"), "cmake" if cmake_dir is not None else "helper")
    assert backend is not None
    v.check(backend in BACKENDS, (*keys, "backend"), f"{backend!r} is not a build backend", f"write backend = one of {', '.join(map(repr, BACKENDS))}")
    backend_name = BackendName(backend) if backend in BACKENDS else BackendName.HELPER  # refused above when not
    _backend_keys(v, table, keys, backend)
    project_dir = v.string(table, (*keys, "project-dir"), ".")
    assert project_dir is not None
    for key in ("cmake-dir", "project-dir"):
        if key in table:
            _relative_path(v, (*keys, key), str(table[key]))
    sources = v.strings(table, (*keys, "sources"))
    include_dirs = v.strings(table, (*keys, "include-dirs"))
    for key, paths in (("sources", sources), ("include-dirs", include_dirs), ("python-packages", v.strings(table, (*keys, "python-packages"))), ("data", v.strings(table, (*keys, "data")))):
        for item in paths:
            _relative_path(v, (*keys, key), item)
    defines = _defines(v, table, (*keys, "defines"))
    ptx = table.get("ptx", False)
    v.check(isinstance(ptx, bool), (*keys, "ptx"), f"expected true or false, got {ptx!r}",
            "write ptx = true to ship PTX next to the SASS of arch-specific targets")
    return BuildRecipe(
        extensions=tuple(extensions),
        python_packages=v.strings(table, (*keys, "python-packages")),
        data=v.strings(table, (*keys, "data")),
        cmake_dir=cmake_dir,
        cmake_args=_cmake_args(v, table, (*keys, "cmake-args")),
        cuda_archs=cuda_archs,
        backend=backend_name,
        project_dir=project_dir,
        sources=sources,
        include_dirs=include_dirs,
        defines=defines,
        build_env=_build_env(v, table.get("build-env", {}), (*keys, "build-env")),
        ptx=ptx,
    )


def _standard(v: _Validator, ext: dict[str, Any], keys: Keys, key: str, allowed: tuple[str, ...]) -> str | None:
    """cxx-std / cuda-std: 17, 20 (a number or a string; "c++20" too) -> "20"."""
    value = ext.get(key)
    if value is None:
        return None
    text = str(value).removeprefix("c++").removeprefix("gnu++") if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    if text not in allowed:
        raise ManifestError(f"{v.locator.where((*keys, key))}: {_dotted(keys)}.{key}: {value!r} is not a C++ standard "
                            f"this key accepts", hint=f"write {key} = {allowed[-1]} (one of {', '.join(allowed)})")
    return text


def _compiler_flags(v: _Validator, ext: dict[str, Any], keys: Keys, key: str) -> tuple[str, ...]:
    """cxx-flags / cuda-flags: single compiler options (-O3, --use_fast_math, -Xptxas=-v). Never
    an output, a mode, another program, or what another key says (-std, -D, -I, -l, -gencode)."""
    flags = v.strings(ext, (*keys, key))
    for flag in flags:
        where = f"{v.locator.where((*keys, key))}: {_dotted(keys)}.{key}: {_shown(flag)}"
        problem = text_problem(flag, limit=1000)
        if problem is not None or not flag.startswith("-") or any(c.isspace() for c in flag):
            raise ManifestError(f"{where} is not one compiler option ({problem or 'options start with - and hold no space'})",
                                hint=f'write one option per string, e.g. {key} = ["-O3", "-Xptxas=-v"]')
        owner = flag_owner(flag)
        if owner is not None:
            raise ManifestError(f"{where} is what {owner} says", hint=f"use {owner} instead of the flag")
        if flag in JOINED_FLAGS:
            raise ManifestError(f"{where} needs its value in the same string", hint=f'write {flag}=VALUE, e.g. "{flag}=-v"')
        if not flag_allowed(flag, "nvcc" if key == "cuda-flags" else "c++"):
            raise ManifestError(
                f"{where} is not allowed: it changes what the build runs or writes, or is not an option shape assemble knows",
                hint="pass only options that change how a unit compiles (-O, -g, -f, -m, -W; nvcc's --use_fast_math, "
                     "-Xptxas=..., -Xcompiler=...); see assembler/manifest/flags.py")
    return flags


# Which recipe keys each backend reads; any other is a mistake worth an error, not a silent no-op.
BACKEND_KEYS = {
    "helper": {"extensions", "python-packages", "data", "cmake-args", "cuda-archs", "backend"},
    "cmake": {"cmake-dir", "cmake-args", "python-packages", "data", "cuda-archs", "backend", "sources", "include-dirs", "defines", "build-env",
              "ptx"},
    "setuptools": {"project-dir", "cuda-archs", "backend", "sources", "include-dirs", "defines", "build-env", "ptx"},
}


def _backend_keys(v: _Validator, table: dict[str, Any], keys: tuple[str, ...], backend: str) -> None:
    if backend == "helper" and "ptx" in table:
        raise v.fail((*keys, "ptx"), "the helper backend asks for PTX per extension",
                     f"move ptx = true into the [[{'.'.join(keys)}.extensions]] that needs it")
    for key in table:
        if key not in BACKEND_KEYS[backend]:
            users = [name for name, allowed in BACKEND_KEYS.items() if key in allowed]
            raise v.fail((*keys, key), f"not used by the {backend!r} backend (only by {', '.join(users)})",
                         f"remove {key}, or set backend = {users[0]!r}")
    if backend == "cmake" and "cmake-dir" not in table:
        raise v.fail((*keys, "backend"), "the cmake backend builds the dependency's own CMakeLists.txt, but cmake-dir is not set",
                     'add cmake-dir = "." (the directory holding CMakeLists.txt, relative to the checkout)')


def _relative_path(v: _Validator, keys: Keys, value: str) -> None:
    """A recipe path is data inside the checkout: never absolute, never climbing out of it, and
    never CMake syntax (``;`` splits a list, ``$`` expands a variable: ``a;/etc`` is two paths)."""
    v.check(bool(value) and not value.startswith("/") and ".." not in Path(value).parts, keys,
            f"{value!r} leaves the checkout", "use a path relative to the checkout, without '..'")
    v.check(not any(c in value for c in ';$"\\\n\r'), keys, f"{value!r} holds ; $ \" \\ or a line break, which CMake reads as syntax",
            "rename the file or directory, or name it with a glob")


def _defines(v: _Validator, table: dict[str, Any], keys: Keys) -> tuple[str, ...]:
    defines = v.strings(table, keys)
    for define in defines:
        v.check(bool(DEFINE_RE.match(define)), keys, f"{define!r} is not a NAME or NAME=VALUE define (without ; or $)",
                'write e.g. defines = ["MY_FLAG=1"]')
    return defines


def _cmake_args(v: _Validator, table: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, ...]:
    """cmake-args: the project's own cache definitions (flags.cmake_arg_problem), as data."""
    args = v.strings(table, keys)
    for arg in args:
        problem = text_problem(arg, limit=1000)
        found = (f"is not one argument ({problem})", "write one argument per string") if problem else cmake_arg_problem(arg)
        if found is not None:
            raise v.fail(keys, f"{_shown(arg)} {found[0]}", found[1])
    return args


def _build_env(v: _Validator, raw: Any, keys: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    v.check(isinstance(raw, dict), keys, "expected a table of NAME = value", f'write {keys[-1]} = {{ MY_FLAG = "1" }}')
    for name, value in raw.items():
        problem = (
            (f"{name!r} is not an environment variable name of the form [A-Z][A-Z0-9_]*",
             "use upper-case letters, digits and '_', starting with a letter") if not ENV_NAME_RE.match(name)
            else (f"{name} is set by assemble itself (toolchain, flags, parallelism)",
                  "remove it; use defines for -D flags, cuda-archs for architectures, --jobs for parallelism") if reserved_env(name)
            else (f"expected a string value, got {value!r}", f'write {name} = "{value}"') if not isinstance(value, str)
            else None
        )
        if problem is not None:
            where = v.locator.where_entry(keys, name)
            raise ManifestError(f"{where}: {'.'.join((*keys, name))}: {problem[0]}", hint=problem[1])
    return tuple(sorted((str(name), str(value)) for name, value in raw.items()))


def _install(v: _Validator, raw: Any, keys: tuple[str, ...]) -> dict[str, str]:
    v.check(isinstance(raw, dict), keys, "expected a table of pattern = destination", f'write [{".".join(keys)}] with "_x_C*.so" = "pkg/"')
    for pattern, dest in raw.items():
        if (problem := glob_problem(pattern)) is not None:
            where = v.locator.where_entry(keys, pattern)
            raise ManifestError(f"{where}: {'.'.join(keys)}: {_shown(pattern)}: {problem}",
                                hint='write a glob such as "pkg/*.so" ([a-z] ranges go low to high; "**" spans directories)')
        v.check(isinstance(dest, str), (*keys, pattern), f"destination must be a string, got {dest!r}", f'write "{pattern}" = "pkg/"')
        problem = install_destination_problem(str(dest))
        v.check(problem is None, (*keys, pattern), f"destination {_shown(str(dest))}: {problem}",
                'install under a package directory inside the wheel, e.g. "pkg/" or "pkg/lib/"')
    return {str(k): str(val) for k, val in raw.items()}


def _verify(v: _Validator, raw: Any, keys: tuple[str, ...]) -> VerifySpec:
    table = v.table(raw, keys, VERIFY_KEYS)
    requires_cuda = table.get("requires-cuda", False)
    v.check(isinstance(requires_cuda, bool), (*keys, "requires-cuda"), f"expected true or false, got {requires_cuda!r}", "write requires-cuda = true")
    return VerifySpec(
        ops=v.strings(table, (*keys, "ops")),
        smoke=v.string(table, (*keys, "smoke")),
        requires_cuda=bool(requires_cuda),
    )


def value_position(path: Path, keys: tuple[str, ...], value: str | None = None, index: int | None = None) -> str:
    """``file:line:col`` of the string ``value`` in the array at ``keys`` of the manifest at
    ``path`` (of the key itself when ``value`` is None; ``index``: the n-th ``[[table]]``), for
    problems found after loading, such as a recipe path missing from the checkout."""
    try:
        locator = _Locator(path, path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return str(path)
    return locator.where(keys) if value is None else locator.where_value(keys, value, index)


def find_workspace(start: Path) -> Path:
    """Nearest directory upward from ``start`` that holds deps.toml (like git finding .git)."""
    start = start.resolve()
    for candidate in (start, *start.parents):
        if (candidate / MANIFEST_NAME).is_file():
            return candidate
    raise ManifestError(f"no {MANIFEST_NAME} in {start} or any parent directory", hint="run inside a workspace or pass --workspace DIR")


