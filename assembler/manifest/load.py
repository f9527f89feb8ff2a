"""Parse and validate deps.toml in one place. Every problem becomes a ManifestError that names
file:line:column, the key and the fix; nothing downstream re-checks the manifest."""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assembler.errors import ManifestError
from assembler.manifest.flags import JOINED_FLAGS, cmake_arg_problem, flag_allowed, flag_owner
from assembler.manifest.globs import glob_problem
from assembler.manifest.model import (
    ANY,
    BACKEND_KEYS,
    BOOL,
    BUILD_TABLE,
    CUDA,
    CUDA_STANDARDS,
    CXX_STANDARDS,
    ENV_NAME_RE,
    MANIFEST_TABLE,
    NAMED,
    SIZE,
    STRING,
    STRINGS,
    TABLE,
    TABLES,
    BackendName,
    BuildRecipe,
    Bundle,
    CacheConfig,
    Dependency,
    Extension,
    Key,
    Manifest,
    Profile,
    Table,
    VerifySpec,
    parse_size,
    reserved_env,
)
from assembler.manifest.model import NAME_RE as NAME_RE  # cli/add.py checks a name before writing it
from assembler.manifest.model import PROFILE_NAME_RE as PROFILE_NAME_RE  # cli/build.py, wheel/merge.py
from assembler.manifest.model import SHA_RE as SHA_RE
from assembler.manifest.values import (
    MAX_VALUE_CHARS,
    control_character,
    file_name_problem,
    install_destination_problem,
    shown,
    text_problem,
    url_problem,
)
from assembler.series.seriesfile import parse_series

if TYPE_CHECKING:
    from assembler.manifest.positions import Positions, Spot

MANIFEST_NAME = "deps.toml"
STATE_DIR = ".assemble"  # the workspace's state directory, next to deps.toml (workspace.Workspace.state_dir)
# Set to 1 by whoever runs assemble (never by the manifest, which may come from a pull request)
# to allow a `patches` directory outside the workspace (absolute, '..', or a symlink out).
PATCHES_OUTSIDE_ENV = "ASSEMBLE_PATCHES_OUTSIDE_WORKSPACE"
# Directories of the workspace that assemble itself writes: never a patches directory.
RESERVED_DIRS = ("forks", ".assemble", ".git")
UTF8_BOM = b"\xef\xbb\xbf"
MAX_TEXT_BYTES = 16 << 20  # a manifest or series larger than this is not one


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
        for key, following in zip(keys, (*keys[1:], None), strict=True):
            path = (*path, key)
            if isinstance(key, str) and isinstance(following, str) and (*path, 0) in spots \
                    and (*path, following) not in spots:
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


class _Validator:
    """Errors at their position: ``fail`` names file:line:column, the key, what is wrong and the fix."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.locator = _Locator(path, text)

    def fail(self, keys: Keys, message: str, fix: str) -> ManifestError:
        dotted = _dotted(keys)
        return ManifestError(f"{self.locator.where(keys)}: {dotted}: {message}", hint=fix)

    def table(self, value: Any, keys: Keys, allowed: set[str]) -> dict[str, Any]:
        """``value`` as a table of only the ``allowed`` keys (an unknown one: the closest name)."""
        if not isinstance(value, dict):
            raise self.fail(keys, f"expected a table, got {type(value).__name__}",
                            f"write [{_dotted(keys)}] as a table")
        for key in value:
            if key not in allowed:
                import difflib

                close = difflib.get_close_matches(key, sorted(allowed), n=1)
                fix = f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(sorted(allowed))}"
                raise self.fail((*keys, key), "unknown key", fix)
        return dict(value)

    def check(self, ok: bool, keys: Keys, message: str, fix: str) -> None:
        if not ok:
            raise self.fail(keys, message, fix)


def read_utf8(path: Path, what: str) -> str:
    """The text of ``path``; a file that is not a regular UTF-8 text file (a directory, a BOM,
    a byte that is not UTF-8) is a ManifestError naming the file and the line."""
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise ManifestError(f"{path}: is a directory, not {what}",
                                hint=f"move the directory away; {path.name} must be a text file")
        if not stat.S_ISREG(mode):  # a FIFO or a device would block or never end
            raise ManifestError(f"{path}: is not a regular file", hint=f"replace it with {what} text file")
        if path.stat().st_size > MAX_TEXT_BYTES:
            raise ManifestError(f"{path}: larger than {MAX_TEXT_BYTES >> 20} MiB, not {what}",
                                hint=f"check {path.name}")
        data = path.read_bytes()
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such file", hint=f"create {path.name} or fix the path") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read ({exc.strerror or exc})",
                            hint="check the file's permissions") from None
    if data.startswith(UTF8_BOM):
        raise ManifestError(f"{path}:1:1: starts with a UTF-8 byte-order mark (BOM)",
                            hint=f"save {path.name} as UTF-8 without BOM")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ManifestError(f"{path}:{line}:{col}: not UTF-8 text ({exc.reason})",
                            hint=f"save {path.name} as UTF-8") from None


def _parse_text(path: Path) -> tuple[str, dict[str, Any]]:
    """(the text, its parse). Parsed on every run: a stored parse saved ~6 ms of tomllib
    (benchmarks/startup.py), under the 10 ms a start-up shortcut must save to be kept."""
    if not path.exists() and not path.is_symlink():
        raise ManifestError(f"{path}: no such manifest", hint="create deps.toml or pass --workspace DIR")
    text = read_utf8(path, "a manifest")
    _bound_shape(path, text)
    import tomllib

    try:
        # Reading uses the stdlib parser (several times faster than tomlkit, which keeps
        # formatting we only need when editing: see manifest/edit.py).
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(path, text, str(exc)) from None
    except RecursionError:  # tomllib recurses per nested array or inline table
        raise ManifestError(f"{path}: TOML nested too deeply",
                            hint="a deps.toml needs a few levels of nesting, not thousands") from None
    return text, data


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
    return ManifestError(f"{path}:{line}:{col}: TOML syntax error: {reason}",
                         hint="fix the TOML syntax at that position")


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
                raise ManifestError(f"{path}:{line}: TOML nested too deeply (arrays or inline tables more than "
                                    f"{MAX_NESTING} deep)",
                                    hint="a deps.toml needs a few levels of nesting; fix that line")
        elif char in "]}":
            depth = max(depth - 1, 0)
        elif char == "\n":
            line += 1


class _Values(dict[str, Any]):
    """A table converted by _convert: each key's value by its record field (defaults filled in),
    and which keys the table wrote (``written``: a backend's keys are checked by them)."""

    written: frozenset[str] = frozenset()


def _convert(v: _Validator, spec: Table, raw: Any, keys: Keys) -> _Values:
    """The one converter from a TOML table to the model: a table, no unknown key (the closest
    one suggested), each key of ``spec`` typed, required or defaulted, its values held to the
    Key's pattern, choices and check, nested tables converted the same way; every error at its
    position. What is left is a rule between keys (the callers')."""
    table = v.table(raw, keys, spec.names)
    values = _Values()
    values.written = frozenset(table)
    for key in spec.keys:
        values[key.field] = _convert_key(v, key, table.get(key.name), (*keys, key.name))
    return values


def _convert_key(v: _Validator, key: Key, raw: Any, keys: Keys) -> Any:
    if raw is None:
        if key.required:
            if key.kind == TABLE:
                raise v.fail(keys, f"missing [{_dotted(keys)}] table", key.fix or f"add [{_dotted(keys)}]")
            example = '["..."]' if key.kind == STRINGS else '"..."'
            raise v.fail(keys, "missing required key", f"add {key.name} = {example}")
        if key.kind != TABLE:
            return key.default
        raw = {}  # a table not written: its keys' defaults
    if key.kind == STRING:
        if not isinstance(raw, str) or not raw:
            raise v.fail(keys, f"expected a non-empty string, got {raw!r}", f'write {key.name} = "..."')
        _check_item(v, key, raw, keys)
        return raw
    if key.kind == STRINGS:
        if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
            raise v.fail(keys, f"expected a list of strings, got {raw!r}", f'write {key.name} = ["..."]')
        for index, item in enumerate(raw):  # an item is named at its own position
            _check_item(v, key, item, (*keys, index))
        if key.unique and len(set(raw)) != len(raw):
            index = next(index for index, item in enumerate(raw) if raw.index(item) < index)
            raise v.fail((*keys, index), f"{shown(raw[index])} is listed twice", "list each once")
        return tuple(raw)
    if key.kind == BOOL:
        if not isinstance(raw, bool):
            raise v.fail(keys, f"expected true or false, got {raw!r}", key.fix or f"write {key.name} = true")
        return raw
    if key.kind == SIZE:
        try:
            return parse_size(raw)
        except ValueError as exc:
            raise v.fail(keys, str(exc), f'write {key.name} = "400MB" (kB, MB, GB, KiB, MiB, GiB or bytes)') from None
    assert key.table is not None or key.kind == ANY
    if key.kind == TABLE and key.table is not None:
        return _convert(v, key.table, raw, keys)
    if key.kind == TABLES and key.table is not None:
        if not isinstance(raw, list):
            raise v.fail(keys, "expected an array of tables", f"write [[{_dotted(keys)}]] blocks")
        return tuple(_convert(v, key.table, item, (*keys, index)) for index, item in enumerate(raw))
    if key.kind == NAMED and key.table is not None:
        if not isinstance(raw, dict):
            raise v.fail(keys, f"expected a table of {key.table.title.rsplit('.', 1)[-1]} tables",
                         f"write [{_dotted(keys)}.NAME] tables")
        named = {}
        for name, item in raw.items():
            _check_item(v, key, name, (*keys, name))
            named[name] = _convert(v, key.table, item, (*keys, name))
        return named
    return raw  # ANY: read by the caller's own rules


def _check_item(v: _Validator, key: Key, value: str, keys: Keys) -> None:
    """A value (an item of an array, a name of a NAMED table) against the Key's rules."""
    mismatch = key.pattern is not None and bool(key.bad) and not key.pattern.fullmatch(value)
    if mismatch or (key.choices and value not in key.choices):
        fix = key.fix
        if key.choices:
            import difflib

            close = difflib.get_close_matches(value, key.choices, n=1)
            fix = f"did you mean '{close[0]}'? {fix}" if close else fix
        raise v.fail(keys, key.bad.format(value=shown(value)), fix)
    if key.check is not None and (problem := key.check(value)) is not None:
        raise v.fail(keys, *problem)


def load_manifest(path: Path) -> Manifest:
    """Read, validate and type ``path``; raises ManifestError on the first problem found."""
    text, data = _parse_text(path)
    v = _Validator(path, text)
    top = _convert(v, MANIFEST_TABLE, data, ())
    values = top["bundle"]
    bundle = Bundle(**{**values, "cuda_components": tuple(sorted(values["cuda_components"]))})
    mirrors = _mirrors(v, top["mirrors"])
    deps = {name: _dependency(v, path.parent, name, values, bundle) for name, values in top["deps"].items()}
    return Manifest(path=path, bundle=bundle, mirrors=mirrors, deps=deps, cache=CacheConfig(**top["cache"]))


def _mirrors(v: _Validator, raw: Any) -> dict[str, str]:
    v.check(isinstance(raw, dict), ("mirrors",), "expected a table of URL prefix = replacement",
            'write "https://github.com/" = "/srv/git-mirrors/"')
    for prefix, target in raw.items():
        v.check(isinstance(target, str) and bool(target), ("mirrors", prefix),
                f"replacement must be a non-empty string, got {target!r}", f'write "{prefix}" = "/path/to/mirrors/"')
        for value in (prefix, target):
            problem = url_problem(value, prefix=True)
            if problem is not None:
                where = v.locator.where(("mirrors", prefix))
                raise ManifestError(f"{where}: mirrors: {shown(value)} is not a repository URL prefix: {problem}",
                                    hint='write e.g. "https://github.com/" = "/srv/git-mirrors/"')
    return {str(k): str(val) for k, val in raw.items()}


def _dependency(v: _Validator, root: Path, name: str, values: _Values, bundle: Bundle) -> Dependency:
    """Rules between a dependency's keys: a repository to fetch, the series on disk."""
    key = ("deps", name)
    upstream = values["upstream"]
    source = values["source"] or upstream
    if source is None:
        raise v.fail(key, "neither source nor upstream is set",
                     'add upstream = "https://..." (and source = "..." for a fork)')
    patches_dir = _patches_dir(v, root, (*key, "patches"), values["patches"], name)
    build = _build(v, values["build"], (*key, "build"))
    return Dependency(
        name=name, upstream=upstream, source=source, commit=values["commit"], track=values["track"],
        submodules=values["submodules"], torch_target=values["torch_target"] or bundle.torch_target,
        patches_dir=patches_dir,
        series=_series(v, (*key, "patches"), patches_dir, explicit="patches" in values.written, root=root),
        build=build, install=_install(v, values["install"], (*key, "install")), verify=VerifySpec(**values["verify"]),
        max_size=values["max_size"],
        cuda_components=tuple(sorted({*bundle.cuda_components, *values["cuda_components"]})),
        profiles=_profiles(v, values["profiles"], (*key, "profiles"), build),
    )


def _profiles(v: _Validator, profiles: dict[str, _Values], keys: Keys, recipe: BuildRecipe) -> tuple[Profile, ...]:
    """[deps.X.profiles.NAME]: reduced configurations of the recipe. Each must change something,
    and reduce only what the recipe has: its sources are entries of the recipe's sources (of an
    extension's, for the helper), build-env is for the backends that read one."""
    made = []
    for name, values in profiles.items():
        where = (*keys, name)
        v.check(bool(values.written - {"description"}), where, "the profile changes nothing",
                "add defines, build-env, sources or cuda-archs to it, or remove it")
        helper = recipe.backend == BackendName.HELPER  # backend question: does it run a build of its own?
        if helper and "build-env" in values.written:
            raise v.fail((*where, "build-env"),
                         "the helper backend runs no build of the dependency's own to give an environment to",
                         "use defines, sources or cuda-archs for a helper recipe")
        sources = values["sources"]
        if sources is not None:
            recipe_sources = [s for ext in recipe.extensions for s in ext.sources] if helper else list(recipe.sources)
            for index, source in enumerate(sources):
                v.check(source in recipe_sources, (*where, "sources", index),
                        f"{shown(source)} is not one of the recipe's sources",
                        f"list entries of [{_dotted(keys[:-1])}.build]"
                        + (" extensions' sources" if helper else " sources")
                        + ", written the same way (a profile builds a subset of the units the build files know)")
            v.check(bool(sources), (*where, "sources"), "a profile of no units builds nothing",
                    "list the sources to keep, or drop the key to keep every unit")
        v.check(values["cuda_archs"] is None or bool(values["cuda_archs"]), (*where, "cuda-archs"),
                "a profile of no CUDA architecture", 'name at least one, e.g. cuda-archs = ["9.0a"]')
        build_env = _build_env(v, values["build_env"], (*where, "build-env"))
        made.append(Profile(**{**values, "name": name, "build_env": build_env}))
    return tuple(made)


def _patches_dir(v: _Validator, root: Path, keys: Keys, value: Any, name: str) -> Path:
    """Where the series lives: below the workspace (not in forks/ or .assemble/), unless whoever
    runs assemble sets ASSEMBLE_PATCHES_OUTSIDE_WORKSPACE=1."""
    if value is not None and (not isinstance(value, str) or not value):
        raise v.fail(keys, f"expected a non-empty string, got {value!r}", f'write patches = "patches/{name}"')
    rel = value if value is not None else f"patches/{name}"
    if (char := control_character(rel)) is not None or len(rel) > MAX_VALUE_CHARS:
        raise v.fail(keys, f"{shown(rel)} is not a directory path ({f'it contains {char}' if char else 'too long'})",
                     f'write patches = "patches/{name}"')
    root = root.resolve()
    try:
        patches_dir = (root / rel).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise v.fail(keys, f"{shown(rel)} cannot be resolved ({exc})", f'write patches = "patches/{name}"') from None
    if os.environ.get(PATCHES_OUTSIDE_ENV) == "1":
        return patches_dir
    inside = patches_dir.is_relative_to(root) and patches_dir != root
    first = patches_dir.relative_to(root).parts[0] if inside else ""
    if not inside or first in RESERVED_DIRS:
        where = ("is the workspace itself" if patches_dir == root
                 else f"is inside {first}/, which assemble writes" if inside else "leaves the workspace")
        raise v.fail(keys, f"{shown(rel)} {where} ({patches_dir})",
                     f"keep the series below the workspace, e.g. patches = \"patches/{name}\" (or set "
                     f"{PATCHES_OUTSIDE_ENV}=1 to allow a directory outside it)")
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


def _series(v: _Validator, keys: Keys, patches_dir: Path, *, explicit: bool,
            root: Path | None = None) -> tuple[str, ...]:
    """The series must name exactly the *.patch files present: a missing file or an orphan
    patch is the classic way a series silently loses a change. Entries are plain file names in
    ``patches_dir``. A missing directory is an empty series only when ``patches`` is not set."""
    dotted = _dotted(keys)
    try:
        mode = patches_dir.stat().st_mode
    except FileNotFoundError:
        backup = patches_dir.with_name(f".{patches_dir.name}.old")
        if backup.is_dir():
            raise ManifestError(f"{patches_dir}: {dotted}: missing, but {backup} holds the series of an "
                                "interrupted export",
                                hint=f"move it back: mv {backup} {patches_dir}") from None
        if explicit:
            raise v.fail(keys, f"{patches_dir} does not exist",
                         "fix the path, or create the directory (an empty series needs no file)") from None
        return ()
    except OSError as exc:
        raise ManifestError(f"{patches_dir}: {dotted}: cannot read ({exc.strerror or exc})",
                            hint="check the directory's permissions") from None
    if not stat.S_ISDIR(mode):
        raise ManifestError(f"{patches_dir}: {dotted}: not a directory (the series and its *.patch files live in a "
                            "directory)",
                            hint=f"move the file away and put the series in {patches_dir}/series")
    series_file = patches_dir / "series"
    listed_file = series_file.exists() or series_file.is_symlink()
    outside_hint = (f"copy the file into {patches_dir} instead of linking it (or set {PATCHES_OUTSIDE_ENV}=1 to "
                    "allow it)")
    if root is not None and (target := _link_out_of(root, series_file)) is not None:
        raise ManifestError(f"{series_file}: {dotted}: the series is a symbolic link out of the workspace ({target})",
                            hint=outside_hint)
    entries = parse_series(read_utf8(series_file, "a series")) if listed_file else []
    for number, entry in entries:
        if (problem := file_name_problem(entry)) is not None:
            raise ManifestError(f"{series_file}:{number}:1: {dotted}: series entry {shown(entry)}: {problem}",
                                hint=f"list plain file names of patches in {patches_dir}")
        if not (patches_dir / entry).is_file():
            raise ManifestError(
                f"{series_file}:{number}:1: {dotted}: series names {entry}, which does not exist",
                hint=f"restore {patches_dir / entry} or remove the line from the series",
            )
        if root is not None and (target := _link_out_of(root, patches_dir / entry)) is not None:
            raise ManifestError(f"{series_file}:{number}:1: {dotted}: {entry} is a symbolic link out of the workspace "
                                f"({target})",
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


def _build(v: _Validator, values: _Values, keys: Keys) -> BuildRecipe:
    """Rules between a recipe's keys: its backend's keys only, paths inside the checkout, flags."""
    extensions = tuple(_extension(v, ext, (*keys, "extensions", index))
                       for index, ext in enumerate(values["extensions"]))
    default = BackendName.CMAKE if values["cmake_dir"] is not None else BackendName.HELPER
    backend = BackendName(values["backend"] or default)
    _backend_keys(v, values.written, keys, backend)
    for key in ("cmake-dir", "project-dir"):
        if key in values.written:
            _relative_path(v, (*keys, key), values[key.replace("-", "_")])
    for key in ("sources", "include-dirs", "python-packages", "data"):
        for index, item in enumerate(values[key.replace("-", "_")]):
            _relative_path(v, (*keys, key, index), item)
    return BuildRecipe(**{
        **values, "extensions": extensions, "backend": backend,
        "cmake_args": _cmake_args(v, values["cmake_args"], (*keys, "cmake-args")),
        "build_env": _build_env(v, values["build_env"], (*keys, "build-env")),
    })


def _extension(v: _Validator, values: _Values, keys: Keys) -> Extension:
    """Rules between an extension's keys: sources inside the checkout, flags and standards its
    language's compiler takes."""
    v.check(bool(values["sources"]), (*keys, "sources"), f"extension #{int(keys[-1]) + 1} has no sources",
            'write sources = ["csrc/op.cpp"]')
    for key in ("sources", "include-dirs"):
        for index, item in enumerate(values[key.replace("-", "_")]):
            _relative_path(v, (*keys, key, index), item)
    language, name = values["language"], values["name"]
    cuda_flags = _compiler_flags(v, values["cuda_flags"], keys, "cuda-flags")
    cxx_std = _standard(v, values["cxx_std"], keys, "cxx-std", CXX_STANDARDS)
    cuda_std = _standard(v, values["cuda_std"], keys, "cuda-std", CUDA_STANDARDS)
    if language != CUDA:
        for key, given in (("cuda-flags", cuda_flags), ("cuda-std", cuda_std), ("ptx", "ptx" in values.written)):
            if given:
                raise v.fail((*keys, key), f"extension {name} is not a CUDA extension (language = {language!r})",
                             f'remove {key}, or set language = "cuda"')
    elif cuda_std is None and cxx_std is not None and cxx_std not in CUDA_STANDARDS:
        raise v.fail((*keys, "cxx-std"), f"the CUDA units follow cxx-std, and nvcc knows no C++{cxx_std}",
                     f'add cuda-std = "{CUDA_STANDARDS[-1]}" (one of {", ".join(CUDA_STANDARDS)})')
    return Extension(**{**values, "cxx_flags": _compiler_flags(v, values["cxx_flags"], keys, "cxx-flags"),
                        "cuda_flags": cuda_flags, "cxx_std": cxx_std, "cuda_std": cuda_std})


def _standard(v: _Validator, value: Any, keys: Keys, key: str, allowed: tuple[str, ...]) -> str | None:
    """cxx-std / cuda-std: 17, 20 (a number or a string; "c++20" too) -> "20"."""
    if value is None:
        return None
    text = (str(value).removeprefix("c++").removeprefix("gnu++")
            if isinstance(value, (int, str)) and not isinstance(value, bool) else "")
    if text not in allowed:
        raise v.fail((*keys, key), f"{value!r} is not a C++ standard this key accepts",
                     f"write {key} = {allowed[-1]} (one of {', '.join(allowed)})")
    return text


def _compiler_flags(v: _Validator, flags: tuple[str, ...], keys: Keys, key: str) -> tuple[str, ...]:
    """cxx-flags / cuda-flags: single compiler options (-O3, --use_fast_math, -Xptxas=-v). Never
    an output, a mode, another program, or what another key says (-std, -D, -I, -l, -gencode)."""
    for index, flag in enumerate(flags):
        problem = text_problem(flag, limit=1000)
        found = (
            (f"is not one compiler option ({problem or 'options start with - and hold no space'})",
             f'write one option per string, e.g. {key} = ["-O3", "-Xptxas=-v"]')
            if problem is not None or not flag.startswith("-") or any(c.isspace() for c in flag)
            else (f"is what {owner} says", f"use {owner} instead of the flag")
            if (owner := flag_owner(flag)) is not None
            else ("needs its value in the same string", f'write {flag}=VALUE, e.g. "{flag}=-v"')
            if flag in JOINED_FLAGS
            else ("is not allowed: it changes what the build runs or writes, or is not an option shape assemble "
                  "knows",
                  "pass only options that change how a unit compiles (-O, -g, -f, -m, -W; nvcc's --use_fast_math, "
                  "-Xptxas=..., -Xcompiler=...); see assembler/manifest/flags.py")
            if not flag_allowed(flag, "nvcc" if key == "cuda-flags" else "c++") else None
        )
        if found is not None:
            raise v.fail((*keys, key, index), f"{shown(flag)} {found[0]}", found[1])
    return flags


def _backend_keys(v: _Validator, written: frozenset[str], keys: Keys, backend: BackendName) -> None:
    """The recipe's keys (``written``) are the ones its backend reads (model.BACKEND_KEYS)."""
    if backend == BackendName.HELPER and "ptx" in written:  # backend question: PTX per extension
        raise v.fail((*keys, "ptx"), "the helper backend asks for PTX per extension",
                     f"move ptx = true into the [[{_dotted(keys)}.extensions]] that needs it")
    for key in (key.name for key in BUILD_TABLE.keys if key.name in written):
        if key not in BACKEND_KEYS.get(backend, BUILD_TABLE.names):
            users = [name for name, allowed in BACKEND_KEYS.items() if key in allowed]
            raise v.fail((*keys, key), f"not used by the '{backend}' backend (only by {', '.join(users)})",
                         f"remove {key}, or set backend = '{users[0]}'")
    if backend == BackendName.CMAKE and "cmake-dir" not in written:  # backend question: needs cmake-dir
        raise v.fail((*keys, "backend"),
                     "the cmake backend builds the dependency's own CMakeLists.txt, but cmake-dir is not set",
                     'add cmake-dir = "." (the directory holding CMakeLists.txt, relative to the checkout)')


def _relative_path(v: _Validator, keys: Keys, value: str) -> None:
    """A recipe path is data inside the checkout: never absolute, never climbing out of it, and
    never CMake syntax (``;`` splits a list, ``$`` expands a variable: ``a;/etc`` is two paths)."""
    v.check(bool(value) and not value.startswith("/") and ".." not in Path(value).parts, keys,
            f"{value!r} leaves the checkout", "use a path relative to the checkout, without '..'")
    v.check(not any(c in value for c in ';$"\\\n\r'), keys,
            f"{value!r} holds ; $ \" \\ or a line break, which CMake reads as syntax",
            "rename the file or directory, or name it with a glob")


def _cmake_args(v: _Validator, args: tuple[str, ...], keys: Keys) -> tuple[str, ...]:
    """cmake-args: the project's own cache definitions (flags.cmake_arg_problem), as data."""
    for index, arg in enumerate(args):
        problem = text_problem(arg, limit=1000)
        found = (f"is not one argument ({problem})",
                 "write one argument per string") if problem else cmake_arg_problem(arg)
        if found is not None:
            raise v.fail((*keys, index), f"{shown(arg)} {found[0]}", found[1])
    return args


def _build_env(v: _Validator, raw: Any, keys: Keys) -> tuple[tuple[str, str], ...]:
    v.check(isinstance(raw, dict), keys, "expected a table of NAME = value", f'write {keys[-1]} = {{ MY_FLAG = "1" }}')
    for name, value in raw.items():
        problem = (
            (f"{name!r} is not an environment variable name of the form [A-Z][A-Z0-9_]*",
             "use upper-case letters, digits and '_', starting with a letter") if not ENV_NAME_RE.match(name)
            else (f"{name} is set by assemble itself (toolchain, flags, parallelism)",
                  "remove it; use defines for -D flags, cuda-archs for architectures, --jobs for parallelism")
            if reserved_env(name)
            else (f"expected a string value, got {value!r}", f'write {name} = "{value}"') if not isinstance(value, str)
            else None
        )
        if problem is not None:
            where = v.locator.where((*keys, name))
            raise ManifestError(f"{where}: {_dotted((*keys, name))}: {problem[0]}", hint=problem[1])
    return tuple(sorted((str(name), str(value)) for name, value in raw.items()))


def _install(v: _Validator, raw: Any, keys: Keys) -> dict[str, str]:
    v.check(isinstance(raw, dict), keys, "expected a table of pattern = destination",
            f'write [{_dotted(keys)}] with "_x_C*.so" = "pkg/"')
    for pattern, dest in raw.items():
        if (problem := glob_problem(pattern)) is not None:
            where = v.locator.where((*keys, pattern))
            raise ManifestError(f"{where}: {_dotted(keys)}: {shown(pattern)}: {problem}",
                                hint='write a glob such as "pkg/*.so" ([a-z] ranges go low to high; "**" spans '
                                     'directories)')
        v.check(isinstance(dest, str), (*keys, pattern), f"destination must be a string, got {dest!r}",
                f'write "{pattern}" = "pkg/"')
        problem = install_destination_problem(str(dest))
        v.check(problem is None, (*keys, pattern), f"destination {shown(str(dest))}: {problem}",
                'install under a package directory inside the wheel, e.g. "pkg/" or "pkg/lib/"')
    return {str(k): str(val) for k, val in raw.items()}


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
    raise ManifestError(f"no {MANIFEST_NAME} in {start} or any parent directory",
                        hint="run inside a workspace or pass --workspace DIR")


