"""Python imports that still find the extension module once the bundle's install rules move it.

A dependency's own wheel has its extension at the top (``flash_kda_C.abi3.so``) or in its
package (``normkit/_C.abi3.so``), and its package imports it by that absolute name. The bundle
installs both below another package (``[deps.X.install]``: ``vllm/third_party/flash_kda/``),
where the absolute name finds nothing: ``import flash_kda`` fails with "No module named
'flash_kda_C'" (seen on FlashKDA in `verify`'s window). A person makes the import relative;
so does this, where the install rules say where both files land:

- ``from flash_kda_C import fwd`` in ``flash_kda/__init__.py`` -> ``from .flash_kda_C import fwd``
- ``from normkit import _C`` in ``normkit/__init__.py`` -> ``from . import _C``

An import whose module lands where its absolute name still finds it is left alone. A form with
no relative spelling (``import flash_kda_C`` used as ``flash_kda_C.fwd``) is reported at its
line. Files are read with :mod:`ast` and edited at the statement's module name only, and the
result is compiled before it is returned."""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

EXTENSION_CALLS = frozenset({"CppExtension", "CUDAExtension", "Extension", "SyclExtension"})
MODULE_SUFFIX = ".abi3.so"  # what setup.py builds once it asks for abi3 (setup_py.py)


@dataclass
class ImportEdits:
    """The new text of each payload .py file that changed, and what was left for a person."""

    texts: dict[str, str] = field(default_factory=dict)  # payload path -> new text
    made: int = 0
    declined: list[tuple[str, int, str]] = field(default_factory=list)  # (payload path, line, reason)


def extension_names(setup_text: str) -> list[str]:
    """The dotted names of the extensions a setup.py builds (a string literal as the first
    argument or ``name=``); others (computed names) are not known here."""
    try:
        tree = ast.parse(setup_text)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if called not in EXTENSION_CALLS:
            continue
        named = next((k.value for k in node.keywords if k.arg == "name"), node.args[0] if node.args else None)
        if isinstance(named, ast.Constant) and isinstance(named.value, str):
            names.append(named.value)
    return names


def _module_name(payload_path: str) -> str:
    """``a/b/__init__.py`` -> ``a.b``; ``a/b.py`` -> ``a.b``; ``a/_C.abi3.so`` -> ``a._C``."""
    path = payload_path.removesuffix(MODULE_SUFFIX).removesuffix(".py")
    path = path.removesuffix("/__init__")
    return path.replace("/", ".")


def moved_modules(python_paths: Iterable[str], extensions: Sequence[str],
                  place: Mapping[str, str]) -> dict[str, str]:
    """Module name -> its name in the bundle, for each module (a payload .py file or an
    extension) that the install rules ``place`` put somewhere its own name does not find it.
    Empty: no import can break, and no file needs reading."""
    originals = {_module_name(path): path for path in python_paths}
    originals.update({name: name.replace(".", "/") + MODULE_SUFFIX for name in extensions})
    return {name: _module_name(place[path]) for name, path in originals.items()
            if path in place and _module_name(place[path]) != name}


def relative_imports(python_files: Mapping[str, str], extensions: Sequence[str],
                     place: Mapping[str, str]) -> ImportEdits:
    """``python_files``: payload path -> text of the package's .py files; ``extensions``: the
    dotted extension names; ``place``: payload path -> wheel path under the install rules (a
    file missing from it is not shipped). Returns the files whose imports had to change."""
    moved = moved_modules(python_files, extensions, place)
    result = ImportEdits()
    for path, text in sorted(python_files.items()):
        if path not in place or not moved:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            result.declined.append((path, exc.lineno or 1, f"does not parse: {exc.msg}"))
            continue
        wheel_path = place[path]
        package = _module_name(posixpath.dirname(wheel_path) + "/__init__.py") if "/" in wheel_path else ""
        lines = text.splitlines(keepends=True)
        edits: list[tuple[int, str, str]] = []  # (line, old module spelling, new)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                target = _bundle_name(node.module, moved)
                if target is None:
                    continue
                relative = _relative(package, target)
                if relative is None:
                    result.declined.append((path, node.lineno, f"{node.module} lands at {target}, outside this "
                                            f"package ({package or 'the wheel root'}): import it by that name"))
                    continue
                edits.append((node.lineno, node.module, relative))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    target = _bundle_name(alias.name, moved)
                    if target is not None:
                        result.declined.append((path, node.lineno, f"import {alias.name}: it lands at {target}; "
                                                f"write `from . import ...` relative to {package or 'the root'}"))
        if not edits:
            continue
        for line, old, new in sorted(edits, reverse=True):
            at = line - 1
            lines[at], count = re.subn(rf"^(\s*from\s+){re.escape(old)}(?=\s+import\b)", rf"\g<1>{new}", lines[at],
                                       count=1)
            if count != 1:  # the module name is not on the statement's first line (a backslash): a person's
                result.declined.append((path, line, f"from {old} import ...: write it as from {new} import ..."))
                continue
            result.made += 1
        new_text = "".join(lines)
        if new_text != text:
            compile(new_text, path, "exec", dont_inherit=True)  # never emit what does not compile
            result.texts[path] = new_text
    return result


def _bundle_name(module: str, moved: Mapping[str, str]) -> str | None:
    """Where ``module`` (or the moved module it lies in) lands in the bundle; None when it does
    not move (its absolute name still finds it) or is not this dependency's."""
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        if head in moved:
            return ".".join([moved[head], *parts[cut:]])
    return None


def _relative(package: str, target: str) -> str | None:
    """``target`` spelled relative to ``package`` (``from <it> import ...``), or None when they
    share no top-level package (a relative import cannot leave the top package)."""
    here, there = package.split(".") if package else [], target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    if common == 0:
        return None
    return "." * (len(here) - common + 1) + ".".join(there[common:])
