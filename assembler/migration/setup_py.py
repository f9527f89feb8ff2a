"""A setuptools dependency's ``setup.py`` builds abi3 once its sources are migrated: each
``CppExtension`` / ``CUDAExtension`` (or plain ``Extension``) gets ``py_limited_api=True`` and
``setup()`` gets ``options={"bdist_wheel": {"py_limited_api": "cp39"}}`` (the bundle's
python-abi), which is what a person adds by hand after the C++ is stable (FlashKDA's migration:
three lines of setup.py). Without them setuptools tags the module ``cp311-cp311`` and the
bundle's abi3 gate refuses it. Each extension also gets the dependency's ``TORCH_TARGET_VERSION``
in its ``define_macros`` (QuTLASS's migration added it by hand), so upstream's own build
compiles against the torch floor assemble's build does.

The file is read with :mod:`ast` (calls found by name, wherever they are written: a list, a
variable, a helper function) and edited as text at the call's closing parenthesis, so every
other byte stays as its authors wrote it. What cannot be edited safely is declined with its line:
a call that passes ``**kwargs`` (the keyword may be in there), a ``setup()`` whose ``options``
is not a dict literal. The result is parsed again before it is returned (a rewrite is checked
by compiling it; for Python, the compiler is :func:`compile`)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from assembler.builder.backends import torch_target_version

EXTENSION_CALLS = frozenset({"CppExtension", "CUDAExtension", "Extension", "SyclExtension"})


@dataclass
class SetupEdit:
    """What the rewrite did to one setup.py: the new text (None when nothing changed), the
    calls it marked, and what it declined (line, reason) for a person."""

    text: str | None
    extensions: list[int] = field(default_factory=list)  # lines of the extension calls given py_limited_api
    setup_line: int | None = None  # the setup() call given the bdist_wheel option
    targeted: list[int] = field(default_factory=list)  # lines of the extension calls given TORCH_TARGET_VERSION
    declined: list[tuple[int, str]] = field(default_factory=list)


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _keyword(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def _splats(call: ast.Call) -> bool:
    return any(k.arg is None for k in call.keywords)


def _offsets(text: str) -> list[int]:
    """The character offset at which each line (1-based index - 1) starts."""
    starts, total = [], 0
    for line in text.splitlines(keepends=True):
        starts.append(total)
        total += len(line)
    starts.append(total)
    return starts


def _closing_paren(text: str, starts: list[int], call: ast.expr) -> int:
    """Offset of the call's closing parenthesis, or a list's bracket (ast's end position is just past it)."""
    assert call.end_lineno is not None and call.end_col_offset is not None
    line = text.splitlines(keepends=True)[call.end_lineno - 1]
    # end_col_offset counts UTF-8 bytes; the text is str
    column = len(line.encode()[: call.end_col_offset].decode())
    return starts[call.end_lineno - 1] + column - 1


def _insertion(text: str, closing: int, argument: str) -> str:
    """``argument`` as the call's (or list's) last argument, in its own layout: a trailing comma
    kept, a multi-line one gets its own line at the indentation of the previous argument."""
    before = text[:closing].rstrip()
    has_arguments = not before.endswith(("(", "["))
    last_line_start = text.rfind("\n", 0, closing) + 1
    closing_on_own_line = text[last_line_start:closing].strip() == ""
    if closing_on_own_line and has_arguments:
        previous = text[text.rfind("\n", 0, len(before)) + 1 : len(before)]
        indent = previous[: len(previous) - len(previous.lstrip())]
        comma = "" if before.endswith(",") else ","
        return f"{before}{comma}\n{indent}{argument},\n{text[last_line_start:]}"
    separator = "" if not has_arguments else (" " if before.endswith(",") else ", ")
    return f"{before}{separator}{argument}{text[closing:]}"


def extensions(text: str) -> list[tuple[str | None, list[str] | None]]:
    """Per extension call of a setup.py, (its module's dotted name, its sources), each when a
    literal (the first argument or ``name=``; the second or ``sources=``, a list of strings),
    else None: which module upstream's build makes of which files, and whether every file an
    extension compiles is one the migration covered."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    found: list[tuple[str | None, list[str] | None]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _called_name(node) not in EXTENSION_CALLS:
            continue
        named = _keyword(node, "name")
        name_node = named.value if named is not None else node.args[0] if node.args else None
        name = (name_node.value if isinstance(name_node, ast.Constant) and isinstance(name_node.value, str)
                else None)
        given = _keyword(node, "sources")
        value = given.value if given is not None else node.args[1] if len(node.args) > 1 else None
        items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else None
        found.append((name, None if items is None or not all(isinstance(i, ast.Constant) and isinstance(i.value, str)
                                                               for i in items)
                      else [str(i.value) for i in items if isinstance(i, ast.Constant)]))
    return found


def _target_version(text: str, starts: list[int], call: ast.Call, name: str, value: str,
                    edits: list[tuple[int, str]], result: SetupEdit) -> None:
    """The extension compiled with TORCH_TARGET_VERSION (``value``), as assemble compiles it: a
    ``define_macros`` entry (setuptools passes those to the host compiler and torch's
    BuildExtension to nvcc too); left alone where the call names the macro already."""
    if "TORCH_TARGET_VERSION" in (ast.get_source_segment(text, call) or ""):
        return
    entry = f'("TORCH_TARGET_VERSION", "{value}")'
    macros = _keyword(call, "define_macros")
    if macros is None and not _splats(call):
        edits.append((_closing_paren(text, starts, call), f"define_macros=[{entry}]"))
    elif macros is not None and isinstance(macros.value, ast.List):
        edits.append((_closing_paren(text, starts, macros.value), entry))  # ast ends a list past its ]
    else:
        result.declined.append((call.lineno, f"{name}(...) sets its define_macros otherwise: add {entry} "
                                             "to them by hand (the build's torch floor)"))
        return
    result.targeted.append(call.lineno)


def limit_setup_py(text: str, python_abi: str, torch_target: str | None = None) -> SetupEdit:
    """``text`` (a setup.py) with every extension built for the limited API and the wheel tagged
    abi3 at ``python_abi`` (e.g. "3.9" -> "cp39"); with ``torch_target`` (MAJOR.MINOR), every
    extension also compiled with that TORCH_TARGET_VERSION (QuTLASS's migration added it by
    hand). Idempotent: what is already there is kept."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        return SetupEdit(None, declined=[(exc.lineno or 1, f"setup.py does not parse: {exc.msg}")])
    tag = "cp" + python_abi.replace(".", "")
    edits: list[tuple[int, str]] = []  # (offset of the closing parenthesis, argument)
    result = SetupEdit(None)
    starts = _offsets(text)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _called_name(node)
        if name in EXTENSION_CALLS:
            if torch_target is not None:
                _target_version(text, starts, node, name, torch_target_version(torch_target), edits, result)
            if _keyword(node, "py_limited_api") is not None:
                continue
            if _splats(node):
                result.declined.append((node.lineno,
                                        f"{name}(**...) may set py_limited_api: add py_limited_api=True by hand"))
                continue
            edits.append((_closing_paren(text, starts, node), "py_limited_api=True"))
            result.extensions.append(node.lineno)
        elif name == "setup":
            options = _keyword(node, "options")
            if options is None:
                if _splats(node):
                    result.declined.append((node.lineno, "setup(**...) may set options: add "
                                            f'options={{"bdist_wheel": {{"py_limited_api": "{tag}"}}}} by hand'))
                    continue
                edits.append((_closing_paren(text, starts, node),
                              f'options={{"bdist_wheel": {{"py_limited_api": "{tag}"}}}}'))
                result.setup_line = node.lineno
            elif "py_limited_api" not in (ast.get_source_segment(text, options.value) or ""):
                result.declined.append((node.lineno, "setup(options=...) is set: add "
                                        f'"bdist_wheel": {{"py_limited_api": "{tag}"}} to it by hand'))
    if not edits:
        return result
    new = text
    for closing, argument in sorted(edits, reverse=True):  # from the end: earlier offsets stay valid
        new = _insertion(new, closing, argument)
    compile(new, "setup.py", "exec", dont_inherit=True)  # never emit what does not compile
    result.text = new
    return result
