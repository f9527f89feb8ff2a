"""The mechanical rewrites of `assemble migrate` (``assembler/data/migration_rewrites.json``),
applied to one file's text: only on the lines the build compiles, never inside comments or
strings, never producing an API newer than the dependency's torch-target or a known hazard.
What a rewrite declines is returned as a finding by line, with the reason, never half-done.
Rewrites never add or remove a line break, so line numbers hold until the include step."""

from __future__ import annotations

import bisect
import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from assembler.errors import InputError
from assembler.migration import syntax
from assembler.migration.helpers import PIECES
from assembler.migration.lexer import blank_comments_and_strings, continued_lines, matching_close, split_top_level

REWRITES_FILE = Path(__file__).resolve().parent.parent / "data" / "migration_rewrites.json"
SKIP = "\x00"  # marks a declined method call until the step ends (no regex matches across it)
STYLE_KEYS = {"data-ptr": ("const-mutable", "mutable")}
TYPES = ("check-macro", "replace", "method", "call", "data-ptr", "rename-method", "new-empty", "helper", "syntax",
         "cast-data-ptr", "dispatcher", "index-narrow", "options-call")


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
    min_args: int = 0  # type method: fewer arguments is another overload (squeeze() squeezes every dimension)
    not_dtype: bool = False  # type method: a ScalarType argument is another overload (view(dtype): view-dtype's)
    refuse_braced: bool = False
    receiver: str = ""  # "tensor": only where the file declares the receiver a tensor
    arguments: str = ""  # appended to the call's own (t() -> transpose(t, 0, 1))
    rename: str = ""  # type rename-method: the method's new name
    tensor_functions: frozenset[str] = frozenset()  # the torch::stable functions that return a tensor (the file's list)
    helper: str = ""  # type helper: the piece of the helper header (migration/helpers.py) the result calls
    value_types: tuple[str, ...] = ()  # type helper: the declared types that may keep what the new call returns
    members: tuple[str, ...] = ()  # type helper: the members of the old result that the new one has too
    syntax: tuple[str, ...] = ()  # types syntax, cast-data-ptr: ast-grep patterns (migration/syntax.py)
    where: dict[str, re.Pattern[str]] = field(default_factory=dict)  # type syntax: what a metavariable must spell
    methods: tuple[str, ...] = ()  # type dispatcher: the Tensor methods called through the dispatcher
    functions: tuple[str, ...] = ()  # type dispatcher: the at::/torch:: functions called through it
    own_tensor_functions: frozenset[str] = frozenset()  # the project's (FileRewrite's), set by apply_step
    schemas: dict[str, tuple[str, ...]] = field(default_factory=dict)  # type dispatcher: aten::op -> the build torch's
    lvalue: bool = False  # type method: the function takes its receiver by non-const reference (copy_, fill_, zero_)
    defined: bool = False  # type replace: only on a tensor (group 'tensor') its block used before (_used_before)
    unless_defined: re.Pattern[str] | None = None  # type check-macro: not where the project #defines such a macro
    # type replace: "literal-messages": also on a line the build does not compile (#else of an arch
    # dispatch) where every argument after the first is a literal, once ``unbuilt_proven``
    unbuilt: str = ""
    unbuilt_proven: bool = False  # migrate's probe compiled the replacement on literal messages (UNBUILT_PROBES)

    def ops(self) -> set[str]:
        """type dispatcher: the aten:: operators it may call."""
        return {f"aten::{name}" for name in (*self.methods, *self.functions)}


@dataclass(frozen=True)
class RewriteSet:
    version: str
    steps: dict[str, str]  # step -> commit subject
    unstable_includes: tuple[str, ...]
    rewrites: tuple[Rewrite, ...]
    replaced_includes: dict[str, str] = field(default_factory=dict)  # CUDA header -> what takes its line(s) ("": none)

    def of_step(self, step: str) -> list[Rewrite]:
        return [r for r in self.rewrites if r.step == step]


def load_rewrites(path: Path = REWRITES_FILE) -> RewriteSet:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        steps = dict(data["steps"])
        functions = frozenset(str(name) for name in data.get("tensor_functions", ()))
        rewrites = []
        for raw in data["rewrites"]:
            if raw["step"] not in steps or raw["type"] not in TYPES:
                raise ValueError(f"rewrite {raw.get('id')!r}: unknown step or type")
            if raw.get("receiver", "tensor") != "tensor":
                raise ValueError(f"rewrite {raw.get('id')!r}: receiver must be 'tensor'")
            if (raw["type"] in ("syntax", "cast-data-ptr")) != bool(raw.get("syntax")):
                raise ValueError(f"rewrite {raw.get('id')!r}: types syntax and cast-data-ptr (only) name ast-grep "
                                 "patterns")
            if ((raw["type"] in ("helper", "dispatcher")) and raw.get("helper") not in PIECES) \
                    or (raw.get("helper") and (raw["type"] not in ("helper", "dispatcher", "syntax")
                                              or raw["helper"] not in PIECES)):
                raise ValueError(f"rewrite {raw.get('id')!r}: a helper or dispatcher rewrite (and a syntax one that "
                                 f"calls the helper header) names one of the pieces {sorted(PIECES)}")
            if (raw["type"] == "check-macro") != ("(?P<macro>" in raw.get("pattern", "")):
                raise ValueError(f"rewrite {raw.get('id')!r}: a check-macro's pattern (only) has a 'macro' group "
                                 "ending at its '('")
            if raw.get("unbuilt", "literal-messages") != "literal-messages" or (raw.get("unbuilt")
                                                                               and raw["type"] != "replace"):
                raise ValueError(f"rewrite {raw.get('id')!r}: unbuilt is 'literal-messages', for a replace")
            if raw.get("defined") and (raw["type"] != "replace" or "(?P<tensor>" not in raw.get("pattern", "")):
                raise ValueError(f"rewrite {raw.get('id')!r}: defined is for a replace whose pattern has a "
                                 "'tensor' group")
            rewrites.append(Rewrite(
                id=raw["id"], step=raw["step"], type=raw["type"], since=raw["since"],
                includes=tuple(raw.get("includes", ())),
                pattern=re.compile(raw["pattern"]) if "pattern" in raw else None,
                replacement=raw.get("replacement", ""),
                mapping=dict(raw.get("map", {})), method=raw.get("method", ""), function=raw.get("function", ""),
                max_args=raw.get("max_args"), min_args=int(raw.get("min_args", 0)),
                not_dtype=bool(raw.get("not_dtype", False)), refuse_braced=bool(raw.get("refuse_braced", False)),
                receiver=raw.get("receiver", ""), arguments=raw.get("arguments", ""), rename=raw.get("rename", ""),
                tensor_functions=functions, helper=raw.get("helper", ""),
                value_types=tuple(str(name) for name in raw.get("value_types", ())),
                members=tuple(str(name) for name in raw.get("members", ())),
                syntax=tuple(str(pattern) for pattern in raw.get("syntax", ())),
                where={str(name): re.compile(str(spelled)) for name, spelled in raw.get("where", {}).items()},
                methods=tuple(str(name) for name in raw.get("methods", ())),
                functions=tuple(str(name) for name in raw.get("functions", ())),
                lvalue=bool(raw.get("lvalue", False)), defined=bool(raw.get("defined", False)),
                unless_defined=re.compile(raw["unless_defined"]) if raw.get("unless_defined") else None,
                unbuilt=str(raw.get("unbuilt", "")),
            ))
        replaced = {str(old): str(new) for old, new in data.get("replaced_includes", {}).items()}
        return RewriteSet(str(data["version"]), steps, tuple(data["unstable_includes"]), tuple(rewrites), replaced)
    except (OSError, ValueError, KeyError, TypeError, re.error) as error:
        raise InputError(f"{path}: unreadable migration rewrites ({error})",
                         hint="reinstall assembler, or fix the file") from None


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
    helpers: set[str] = field(default_factory=set)  # the pieces of the helper header the rewritten text calls
    # the project's functions by name, with what each parameter says of a pointer passed to it
    # (syntax.pointer_parameters over every file migrate reads): a copy of the file keeps them
    callees: Mapping[str, list[syntax.Parameters]] = field(default_factory=dict)
    macros: frozenset[str] = frozenset()  # the macros the project #defines itself (rules.defined_macros)
    own_tensor_functions: frozenset[str] = frozenset()  # the project's functions declared returning a tensor
    unbuilt: Counter[str] = field(default_factory=Counter)  # rewrites made on lines the build does not compile


def _newer(version: str, target: str) -> bool:
    def key(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.split(".")[:2])
    return key(version) > key(target)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset)  # 0-based


# What the file says a name is, for the rewrites that need a tensor receiver (``receiver``),
# a ScalarType argument or an optional/pointer to pass on as ``*p``. Read from the blanked code
# of one step's text; a declaration holds from its line to the end of its block (a parameter:
# its function's body), and the innermost one in scope decides. Names whose type the file does
# not spell (a macro's parameter, a struct's field) are unknown: the rewrite is declined.
TENSOR, HANDLE, SEQUENCE, SCALAR, OPTIONS = "tensor", "handle", "sequence", "scalar type", "options"
TUPLE = "tuple"  # a std::pair / std::tuple: its elements' kinds, read through .first, std::get<N> or [a, b] = ...
_NAME = r"\s*(?P<name>[A-Za-z_]\w*)\s*(?=[,;=)(\[{]|:(?!:))"
_QUALIFIERS = r"(?:const\b\s*)?(?P<ref>&&?|\*)?\s*(?:const\b\s*)?"
_USING_TENSOR = re.compile(r"\busing\s+(?:(?:torch::stable|at|torch)::Tensor|namespace\s+(?:at|torch))\s*;")
_AFTER_PARAMETERS = re.compile(r"\s*(?:(?:const|noexcept|override|final|mutable)\b\s*|->\s*[\w:<>,\s*&]+?)*\{")
_KEYWORDS = frozenset({"const", "return", "operator", "new", "delete", "sizeof", "decltype", "typename", "template"})
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_DEFINE = re.compile(r"\s*#\s*define\s+(?P<name>[A-Za-z_]\w*)\((?P<parameters>[^()]*)\)")
_PARENTHESIZED = re.compile(r"\(\s*(.*)\s*\)", re.S)
_DEREFERENCED = re.compile(r"\*\s*([A-Za-z_]\w*)|([A-Za-z_]\w*)\s*\.\s*value\s*\(\s*\)")
_SUBSCRIPTED = re.compile(r"([A-Za-z_]\w*)\s*\[")
_FUNCTION_CALL = re.compile(r"(?:torch::stable|at|torch)::(\w+)\s*\(")
_METHOD_CALL = re.compile(r"\.\s*(\w+)\s*\(\s*[^()]*\)$")
_OWN_CALL = re.compile(r"(?:^|\.|->|::)\s*([A-Za-z_]\w*)\s*\(\s*[^()]*\)$")
# a function the project declares returning a tensor (migrate reads every file: FileRewrite.own_tensor_functions)
RETURNS_TENSOR = re.compile(r"(?<![\w:,<(])(?:(?:static|inline|virtual|constexpr)\s+)*(?:const\s+)?"
                            r"(?:(?:at|torch|torch::stable)::)Tensor\s*&?\s+(?:[A-Za-z_]\w*::)*(?P<name>[A-Za-z_]\w*)\s*\(")
_ENUMERATOR = re.compile(r"(?:torch::headeronly::)?ScalarType::\w+")  # short after using torch::headeronly::ScalarType
_CALL_ATEN_TENSOR = re.compile(r"assemble_stable::call_aten\s*<\s*torch::stable::Tensor\s*>\s*\(")  # the dispatcher's
_TEMPLATE_CALLEE = re.compile(r"(?:\bassemble_stable::call_aten\s*<[\w:\s]*>|\bstd::get\s*<\s*\d+\s*>)\s*$")
_SCALAR_TYPE_OF = re.compile(r"(.+?)\s*(\.|->)\s*scalar_type\s*\(\s*\)", re.S)


def _declaration_patterns(bare: bool) -> list[tuple[str, re.Pattern[str]]]:
    tensor = r"(?:(?:torch::stable|at|torch)::Tensor" + (r"|(?<![\w:])Tensor" if bare else "") + r")\b"
    scalar = r"(?:torch::headeronly::ScalarType|(?:at|c10|torch)::ScalarType|torch::Dtype)\b(?!\s*::)"
    return [
        (TENSOR, re.compile(rf"(?<![\w:]){tensor}\s*{_QUALIFIERS}{_NAME}")),
        (HANDLE, re.compile(rf"(?:std|c10)::optional\s*<\s*(?:const\s+)?{tensor}\s*>\s*{_QUALIFIERS}{_NAME}")),
        (SEQUENCE, re.compile(rf"(?:std::vector\s*<\s*{tensor}\s*>|std::array\s*<\s*{tensor}\s*,[^<>;]*>)\s*"
                              rf"{_QUALIFIERS}{_NAME}")),
        (SCALAR, re.compile(rf"(?<![\w:]){scalar}\s*{_QUALIFIERS}{_NAME}")),
        ("auto", re.compile(rf"\bauto\b\s*{_QUALIFIERS}{_NAME}")),
        ("auto", re.compile(rf"(?<![\w:])(?:(?:at|torch|c10)::)?TensorOptions\b\s*{_QUALIFIERS}{_NAME}")),
    ]


_DECLARATOR = re.compile(r"\s*,\s*(?P<name>[A-Za-z_]\w*)\s*")


def _more_declarators(code: str, end: int) -> list[tuple[int, str]]:
    """The names after the first of a plain declaration (``Tensor dq, dk, dv;``): only where the
    statement up to its ``;`` is names and commas (no initialiser, call, brace or template),
    so a parameter list or an expression is never read as one."""
    stop = code.find(";", end)
    rest = code[end:stop] if stop >= 0 else ""
    if not rest.strip() or re.search(r"[^\w\s,]", rest):
        return []
    found, at = [], end
    while (declarator := _DECLARATOR.match(code, at)) and declarator.end() <= stop:
        if declarator.group("name") not in _KEYWORDS:
            found.append((declarator.start("name"), declarator.group("name")))
        at = declarator.end()
    return found if code[at:stop].strip() == "" else []


@dataclass(frozen=True)
class _Declared:
    name: str
    kind: str
    first: int  # 0-based lines of its scope
    last: int
    of: str = ""  # OPTIONS: the tensor whose options these are
    line: tuple[int, int] | None = None  # OPTIONS: the span of the line that holds the declaration alone
    dtype: tuple[int, int] | None = None  # OPTIONS made with .dtype(X): X's span in the step's text
    elements: tuple[str, ...] = ()  # TUPLE: each element's kind ("" unknown)


_TUPLE_TYPE = re.compile(r"(?<![\w:])(?:std::)(?:pair|tuple)\s*<")
_BINDING = re.compile(r"\bauto\b\s*(?:const\b\s*)?&{0,2}\s*\[(?P<names>\s*[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*\s*)\]"
                      r"\s*=\s*(?P<source>[A-Za-z_][\w:]*)\s*(?P<call>\()?")
_AFTER_TYPE = re.compile(r"\s*" + _QUALIFIERS + _NAME)
_ELEMENT_OF = re.compile(r"(?P<tuple>[A-Za-z_]\w*)\s*\.\s*(?P<member>first|second)")
_GET = re.compile(r"std::get\s*<\s*(?P<index>\d+)\s*>\s*\(\s*(?P<tuple>[A-Za-z_]\w*)\s*\)")


def _angle_close(code: str, opening: int) -> int | None:
    """The ``>`` closing the template argument list opened at ``code[opening] == '<'``."""
    return matching_close(code, opening, "<([{", ">)]}", stop=";", limit=2000)


def _element_kinds(arguments: str, bare: bool) -> tuple[str, ...]:
    """The kind of each type in a pair's or tuple's template arguments: TENSOR, HANDLE (an
    optional tensor), else ""."""
    kinds: list[str] = []
    tensor = r"(?:(?:torch::stable|at|torch)::Tensor" + (r"|Tensor" if bare else "") + r")"
    for part in split_top_level(arguments, "<([{", ">)]}"):
        plain = re.sub(r"\bconst\b|&", "", part).strip()
        if re.fullmatch(tensor, plain):
            kinds.append(TENSOR)
        elif re.fullmatch(rf"(?:std|c10)::optional\s*<\s*{tensor}\s*>", plain):
            kinds.append(HANDLE)
        else:
            kinds.append("")
    return tuple(kinds)


class Declarations:
    """The typed names of one file's code (comments and strings blanked)."""

    def __init__(self, code: str, tensor_functions: frozenset[str], own: frozenset[str] = frozenset()) -> None:
        self.code = code
        self.functions = tensor_functions
        self.own = own  # the project's functions that return a tensor, whatever they are called on
        self.names: dict[str, list[_Declared]] = {}
        found: list[tuple[int, str, str, re.Match[str] | None]] = []
        for kind, pattern in _declaration_patterns(_USING_TENSOR.search(code) is not None):
            for match in pattern.finditer(code):
                if match.group("name") not in _KEYWORDS:
                    found.append((match.start("name"), kind, match.group("name"), match))
                    if kind in (TENSOR, SCALAR):  # `Tensor dq, dk, dv;`: the other declarators too (FA2)
                        found += [(offset, kind, name, None) for offset, name in _more_declarators(code, match.end())]
        tuples = self._tuples(code, _USING_TENSOR.search(code) is not None)
        found.sort(key=lambda item: item[0])
        scopes = self._scopes([offset for offset, _, _, _ in found] + [offset for offset, _, _, _ in tuples])
        for (_, name, kind, elements), (first, last) in zip(tuples, scopes[len(found):], strict=True):
            if first <= last:
                self.names.setdefault(name, []).append(_Declared(name, kind, first, last, elements=elements))
        scopes = scopes[:len(found)]
        for (_, kind, name, declared), (first, last) in zip(found, scopes, strict=True):
            if declared is None:
                pass  # a further declarator of a plain declaration: the first one's kind
            elif kind == TENSOR and declared.group("ref") == "*":
                kind = HANDLE
            elif kind == TENSOR and code[declared.end():declared.end() + 1] == "[":
                kind = SEQUENCE
            of, alone, dtype = "", None, None
            if kind == "auto" and declared is not None:
                kind, of, alone, dtype = self._auto_kind(declared, first)
            if kind and first <= last:
                self.names.setdefault(name, []).append(_Declared(name, kind, first, last, of, alone, dtype))

    @staticmethod
    def _tuples(code: str, bare: bool) -> list[tuple[int, str, str, tuple[str, ...]]]:
        """The pairs and tuples the code declares, (offset, name, TUPLE, element kinds); and the
        names of a structured binding of one (``const auto& [q_fp, q_sf] = q;``, or of a call of
        a function the file declares returning one), (offset, name, its element's kind, ())."""
        declared: list[tuple[int, str, str, tuple[str, ...]]] = []
        returns: dict[str, tuple[str, ...]] = {}
        for found in _TUPLE_TYPE.finditer(code):
            closing = _angle_close(code, found.end() - 1)
            if closing is None:
                continue
            elements = _element_kinds(code[found.end():closing], bare)
            after = _AFTER_TYPE.match(code, closing + 1)
            if after is None or after.group("name") in _KEYWORDS or after.group("ref") == "*":
                continue
            if code[after.end():after.end() + 1] == "(" and not after.group("ref"):
                returns[after.group("name")] = elements  # a function returning one (or a variable made by a call)
            declared.append((after.start("name"), after.group("name"), TUPLE, elements))
        names = {name: elements for _, name, _, elements in declared}
        for binding in _BINDING.finditer(code):
            source = binding.group("source")
            unpacked = returns.get(source.rsplit("::", 1)[-1]) if binding.group("call") else names.get(source)
            bound = [name.strip() for name in binding.group("names").split(",")]
            if unpacked is None or len(unpacked) != len(bound):
                continue
            spelled = re.finditer(r"[A-Za-z_]\w*", code[binding.start("names"):binding.end("names")])
            for name, kind in zip(spelled, unpacked, strict=True):
                if kind:
                    declared.append((binding.start("names") + name.start(), name.group(), kind, ()))
        return declared

    def scope(self, offset: int) -> tuple[int, int]:
        """The lines (0-based, first > last: none) a declaration at ``offset`` holds for."""
        return self._scopes([offset])[0]

    def _scopes(self, offsets: list[int]) -> list[tuple[int, int]]:
        """Each offset's scope in lines: to the end of the innermost enclosing block; inside a
        parameter list, its function's (or lambda's, or for loop's) body; else none."""
        code = self.code
        closing: dict[int, int] = {}
        stack: list[int] = []
        brackets = [(m.start(), m.group()) for m in re.finditer(r"[(){}]", code)]
        queue = iter(sorted(range(len(offsets)), key=offsets.__getitem__))
        pending = next(queue, None)
        at_offset: dict[int, int | None] = {}
        for position, char in [*brackets, (len(code), "")]:
            while pending is not None and offsets[pending] < position:
                at_offset[pending] = stack[-1] if stack else None
                pending = next(queue, None)
            if char in "({":
                stack.append(position)
            elif char and stack and code[stack[-1]] == ("(" if char == ")" else "{"):
                closing[stack.pop()] = position
        breaks = [m.start() for m in re.finditer("\n", code)]
        last_line = len(breaks)

        def line_of(offset: int) -> int:
            return bisect.bisect_left(breaks, offset)

        scopes = []
        for index, offset in enumerate(offsets):
            opening = at_offset.get(index)
            line = line_of(offset)
            if opening is None:
                scopes.append((line, last_line))
                continue
            end = closing.get(opening)
            if end is None:
                scopes.append((line, last_line))
            elif code[opening] == "{":
                scopes.append((line, line_of(end)))
            elif (body := _AFTER_PARAMETERS.match(code, end + 1)) and (shut := closing.get(body.end() - 1)) is not None:
                scopes.append((line, line_of(shut)))
            else:
                scopes.append((1, 0))  # a declaration without a body, or parentheses of an expression
        return scopes

    def _auto_kind(self, match: re.Match[str], line: int) -> tuple[str, str, tuple[int, int] | None,
                                                                   tuple[int, int] | None]:
        """What an ``auto`` (or TensorOptions) variable is, from its initializer; for the
        options of a tensor (``A.options()``, or ``TensorOptions().dtype(X).device(A.device())``),
        which tensor, the line when the declaration is all it holds, and X's span."""
        code = self.code
        if code[match.end():match.end() + 1] != "=" or code[match.end():match.end() + 2] == "==":
            return "", "", None, None
        start = match.end() + 1
        end = _statement_end(code, start)
        initializer = code[start:end].strip()
        reference = match.group("ref")
        if reference == "*":
            pointed = initializer.startswith("&") and self.kind(initializer[1:], line) == TENSOR
            return (HANDLE if pointed else ""), "", None, None
        options = _OPTIONS_OF.fullmatch(initializer)
        tensor, dtype = (options.group("tensor"), None) if options is not None else _made_options(code, start, end)
        if tensor and not reference and self.kind(tensor, line) == TENSOR:
            line_start = code.rfind("\n", 0, match.start()) + 1
            line_end = code.find("\n", end)
            line_end = len(code) if line_end < 0 else line_end
            alone = (re.fullmatch(r"\s*(?:const\s+)?", code[line_start:match.start()]) is not None
                     and code[end:end + 1] == ";" and not code[end + 1:line_end].strip())
            return OPTIONS, tensor, (line_start, line_end) if alone else None, dtype
        if not match.group(0).startswith("auto"):  # TensorOptions made some other way
            return "", "", None, None
        if self.kind(initializer, line) == TENSOR:
            return TENSOR, "", None, None
        return (SCALAR if self.is_scalar_type(initializer, line) else ""), "", None, None

    def declared(self, name: str, line: int) -> _Declared | None:
        """The declaration of ``name`` in scope at ``line`` (0-based): the innermost one."""
        best: _Declared | None = None
        for declared in self.names.get(name, ()):
            if declared.first <= line <= declared.last and (best is None or declared.first >= best.first):
                best = declared
        return best

    def of(self, name: str, line: int) -> str:
        """The kind of ``name`` at ``line``."""
        best = self.declared(name, line)
        return best.kind if best else ""

    def kind(self, expression: str, line: int) -> str:
        """What a postfix expression is: TENSOR (a tensor name, an element of a sequence of
        them, ``*p`` or ``p.value()`` of a handle, a tensor function's call or a tensor
        method's), HANDLE (an optional or pointer name), else ""."""
        text = expression.strip()
        whole = len(text) - 1
        if _IDENTIFIER.fullmatch(text):
            return self.of(text, line) or self._macro_argument(text, line)
        if (match := _PARENTHESIZED.fullmatch(text)) and _close(text, 0) == whole:
            return self.kind(match.group(1), line)
        if match := _DEREFERENCED.fullmatch(text):
            return TENSOR if self.of(match.group(1) or match.group(2), line) == HANDLE else ""
        if (match := _SUBSCRIPTED.match(text)) and _close(text, match.end() - 1) == whole:
            return TENSOR if self.of(match.group(1), line) == SEQUENCE else ""
        if (branches := _conditional(text)) is not None:  # c ? unsqueeze(sf, 0) : sf (DeepGEMM)
            kinds = {self.kind(branch, line) for branch in branches}
            return TENSOR if kinds in ({TENSOR}, {TENSOR, ""}) else ""
        if (match := _ELEMENT_OF.fullmatch(text) or _GET.fullmatch(text)) is not None:
            held = self.declared(match.group("tuple"), line)
            index = int(match.group("index")) if match.re is _GET else ("first", "second").index(match.group("member"))
            return held.elements[index] if held and held.kind == TUPLE and index < len(held.elements) else ""
        if (match := _FUNCTION_CALL.match(text)) and _close(text, match.end() - 1) == whole:
            return TENSOR if match.group(1) in self.functions else ""
        if (match := _CALL_ATEN_TENSOR.match(text)) and _close(text, match.end() - 1) == whole:
            return TENSOR
        if (match := _OWN_CALL.search(text)) and match.group(1) in self.own:  # device_runtime->workspace()
            return TENSOR
        if (match := _METHOD_CALL.search(text)) and (match.group(1) in self.functions or match.group(1) == "t"):
            return TENSOR if self.kind(text[:match.start()], line) == TENSOR else ""
        return ""

    def _macro_argument(self, name: str, line: int) -> str:
        """For a parameter of the ``#define NAME(...)`` whose body holds ``line``: TENSOR or
        HANDLE when every invocation of the macro in the file passes one (``CHECK_FLOAT(x)``
        with ``x`` a tensor), else ""."""
        lines = self.code.split("\n")
        first = line
        while first > 0 and lines[first - 1].rstrip().endswith("\\"):
            first -= 1
        define = _DEFINE.match(lines[first])
        if define is None:
            return ""
        parameters = [p.strip() for p in define.group("parameters").split(",")]
        if name not in parameters:
            return ""
        index = parameters.index(name)
        kinds = set()
        for use in re.finditer(rf"(?<![\w#]){re.escape(define.group('name'))}\s*\(", self.code):
            at = _line_of(self.code, use.start())
            if at == first:
                continue
            closing = _close_paren(self.code, use.end() - 1)
            arguments = [] if closing is None else _split_arguments(self.code, use.end() - 1, closing)
            if len(arguments) != len(parameters):
                return ""
            kinds.add(self.kind(self.code[slice(*arguments[index])], at))
        return kinds.pop() if len(kinds) == 1 and kinds <= {TENSOR, HANDLE} else ""

    def is_scalar_type(self, expression: str, line: int) -> bool:
        """A ScalarType: an enumerator, a tensor's ``scalar_type()``, or a name declared one."""
        text = expression.strip()
        if _ENUMERATOR.fullmatch(text):
            return True
        if match := _SCALAR_TYPE_OF.fullmatch(text):
            return self.kind(match.group(1), line) == (HANDLE if match.group(2) == "->" else TENSOR)
        return _IDENTIFIER.fullmatch(text) is not None and self.of(text, line) == SCALAR


def declarations_for(code: str, rewrite: Rewrite) -> Declarations:
    """The typed names of ``code`` as ``rewrite`` reads them: torch's tensor functions and the
    project's own."""
    return Declarations(code, rewrite.tensor_functions, rewrite.own_tensor_functions)


def _conditional(text: str) -> tuple[str, str] | None:
    """The two branches of ``text`` when it is a conditional expression (``c ? a : b`` at its
    own depth), else None."""
    depth, question = 0, -1
    for index, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and char == "?" and question < 0:
            question = index
        elif depth == 0 and char == ":" and question >= 0 and text[index - 1:index + 2].count(":") == 1:
            return text[question + 1:index], text[index + 1:]
    return None


def _close(code: str, opening: int) -> int | None:
    """The index of the bracket closing ``code[opening]`` (any of ``([{``)."""
    depth = 0
    for index in range(opening, len(code)):
        char = code[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return index
    return None


def _statement_end(code: str, start: int) -> int:
    """Where the expression starting at ``start`` ends: the first ``;`` or ``,`` or unmatched
    closing bracket at its own depth."""
    depth = 0
    for index in range(start, len(code)):
        char = code[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                return index
            depth -= 1
        elif char in ";," and depth == 0:
            return index
    return len(code)


def apply_step(rewrites: list[Rewrite], file: FileRewrite, torch_target: str, style: dict[str, str]) -> None:
    """Apply ``rewrites`` (one step's) to ``file`` in place. The lines a backslash continues
    from a compiled line (a multi-line macro's body) are compiled lines too."""
    code = blank_comments_and_strings(file.text)
    active = continued_lines(code, (number + 1 for number, flag in enumerate(file.active) if flag))
    file.active = [number + 1 in active for number in range(len(file.active))]
    for rewrite in rewrites:
        if file.own_tensor_functions:
            rewrite = replace(rewrite, own_tensor_functions=file.own_tensor_functions)
        if rewrite.type == "replace":
            _replace(rewrite, file, torch_target)
        elif rewrite.type == "method":
            _method(rewrite, file, torch_target)
        elif rewrite.type == "call":
            _call(rewrite, file, torch_target)
        elif rewrite.type == "rename-method":
            _rename_method(rewrite, file, torch_target)
        elif rewrite.type == "new-empty":
            _new_empty(rewrite, file, torch_target)
        elif rewrite.type == "helper":
            _helper(rewrite, file, torch_target)
        elif rewrite.type in ("syntax", "cast-data-ptr"):
            _syntax(rewrite, file, torch_target)
        elif rewrite.type == "dispatcher":
            _dispatcher(rewrite, file, torch_target)
        elif rewrite.type == "index-narrow":
            _index_narrow(rewrite, file, torch_target)
        elif rewrite.type == "options-call":
            _options_call(rewrite, file, torch_target)
        elif rewrite.type == "check-macro":
            _check_macro(rewrite, file, torch_target)
        else:
            _data_ptr(rewrite, file, torch_target, style.get("data-ptr", "const-mutable"))
    file.text = file.text.replace(SKIP, "")


def _eligible(rewrite: Rewrite, file: FileRewrite, line: int, torch_target: str) -> bool:
    if not file.active[line]:
        return False
    if _newer(rewrite.since, torch_target):
        file.declined.append(Declined(line + 1, rewrite.id,
                                      f"needs torch {rewrite.since}, above torch-target {torch_target} "
                                      "(raise torch-target to allow it)"))
        return False
    return True


_CHECK_OPERATORS = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _check_macro(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    """c10's glog-spelled checks (group ``macro``): ``CHECK(c);`` -> ``STD_TORCH_CHECK(c);``,
    ``CHECK_EQ(a, b);`` -> ``STD_TORCH_CHECK((a) == (b));``. Not where the project defines such
    a macro itself; a check with a message streamed after it (``CHECK(c) << "m";``) is declined,
    as the stable macro takes its message as arguments."""
    assert rewrite.pattern is not None
    if rewrite.unless_defined is not None and any(rewrite.unless_defined.fullmatch(m) for m in file.macros):
        return
    code = blank_comments_and_strings(file.text)
    edits: list[tuple[int, int, str]] = []
    for found in rewrite.pattern.finditer(code):
        line = _line_of(code, found.start())
        opening = found.end() - 1
        closing = _close_paren(code, opening)
        if not file.active[line] or closing is None:
            continue
        if not re.match(r"\s*;", code[closing + 1:]):
            streamed = re.match(r"\s*<<", code[closing + 1:]) is not None
            file.declined.append(Declined(line + 1, rewrite.id, (
                "a message is streamed after it (<<): write STD_TORCH_CHECK(condition, message...) yourself"
                if streamed else "not a statement of its own: write STD_TORCH_CHECK(condition) yourself")))
            continue
        arguments = _split_arguments(code, opening, closing)
        operator = _CHECK_OPERATORS.get(found.group("macro").removeprefix("CHECK_"))
        if (len(arguments) != 2 if operator else len(arguments) != 1) or not _eligible(rewrite, file, line,
                                                                                      torch_target):
            continue
        if operator:
            (a_start, a_end), (b_start, b_end) = arguments
            new = f"STD_TORCH_CHECK(({file.text[a_start:a_end]}) {operator} ({file.text[b_start:b_end]}))"
            edits.append((found.start("macro"), closing + 1, new))
        else:
            edits.append((found.start("macro"), found.end("macro"), "STD_TORCH_CHECK"))
        file.includes.update(rewrite.includes)
    _apply(edits, rewrite, file)


def _replace(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    """pattern -> replacement; with ``defined``, only where the ``tensor`` group is a tensor
    the code used before in a way an undefined tensor cannot pass (:func:`_used_before`),
    silently elsewhere: a later rewrite (the helper's) takes what is left."""
    assert rewrite.pattern is not None
    code = blank_comments_and_strings(file.text)
    pieces: list[str] = []
    last = 0
    declarations: Declarations | None = None
    for found in rewrite.pattern.finditer(code):
        line = _line_of(code, found.start())
        if rewrite.defined:
            declarations = declarations or declarations_for(code, rewrite)
            tensor = found.group("tensor")
            if declarations.kind(tensor, line) != TENSOR or not _used_before(code, tensor, found.start()):
                continue
        unbuilt = not file.active[line] and rewrite.unbuilt_proven and _literal_messages(code, found.end() - 1)
        if not unbuilt and not _eligible(rewrite, file, line, torch_target):
            continue
        if unbuilt and _newer(rewrite.since, torch_target):
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
        file.unbuilt[rewrite.id] += unbuilt
        file.includes.update(rewrite.includes)
    file.text = "".join(pieces) + file.text[last:]


# a literal argument with its contents blanked (lexer): "..." "...", 42, 2.5f, 0x1Fu (a user-defined one is not)
_LITERAL_ARGUMENT = re.compile(r'\s*(?:(?:"[^"\n]*"\s*)+|\d(?:[eEpP][+-]|[0-9A-Za-z.\'])*\s*)')
# what migrate's probe compiles for a replace with unbuilt "literal-messages", each through the
# rewrite's own pattern and replacement: one call per kind of literal _literal_messages lets through
UNBUILT_PROBES = ('TORCH_CHECK(condition);', 'TORCH_CHECK(condition, "text");',
                  'TORCH_CHECK(condition, "text", 1, 2.5, 0x1Fu, "more" "text");')


def _literal_messages(code: str, opening: int) -> bool:
    """Whether every argument after the first of the call whose ``(`` is at ``code[opening]``
    (blanked) is a literal: then the stable macro takes them as the old one did whatever the
    branch declares, which the probe of ``UNBUILT_PROBES`` proves once per migrate (a local or
    an ATen value streamed into the message would need the branch compiled)."""
    closing = _close_paren(code, opening) if code[opening:opening + 1] == "(" else None
    if closing is None:
        return False
    arguments = _split_arguments(code, opening, closing)
    return bool(arguments) and all(_LITERAL_ARGUMENT.fullmatch(code[start:end]) for start, end in arguments[1:])


# what an undefined tensor cannot answer: at::Tensor throws (its impl has no storage, sizes,
# strides or device), and so does torch::stable::Tensor through the shim
_NEEDS_DEFINED = ("data_ptr", "const_data_ptr", "mutable_data_ptr", "size", "sizes", "stride", "strides", "dim",
                  "device", "get_device", "get_device_index", "is_contiguous")


def _used_before(code: str, name: str, at: int) -> bool:
    """Whether ``name`` (a tensor) is defined at ``at`` by the code's own evidence: a member call
    an undefined tensor throws on (:data:`_NEEDS_DEFINED`), or a call that passes it whole to a
    function the file defines which makes such a call first thing (:func:`_passed_to_user`),
    comes before it in its block or a block around it (no brace closes between the two), and
    ``name`` is not assigned between. The file is parsed for its definitions only where its own
    member calls do not settle it."""
    direct = _needs_defined(code[:at], name)
    return (_last_use_holds(code, name, at, direct)
            or _last_use_holds(code, name, at, [*direct, *_passed_to_user(code, name, at)]))


def _last_use_holds(code: str, name: str, at: int, uses: list[tuple[int, int]]) -> bool:
    """Whether the last of ``uses`` (spans) that runs whenever ``at`` does is followed by no
    assignment to ``name`` before ``at``."""
    for start, end in sorted(uses, reverse=True):
        if _behind_condition(code, start):
            continue  # behind a condition of its own expression (c ? t.size(0) : 0)
        if _unconditional(code, start, at):
            return not _assigned(code[end:at], name)
    return False


def _behind_condition(code: str, start: int) -> bool:
    """Whether ``code[start]`` sits after a ``?``, ``&&`` or ``||`` of its own statement."""
    statement = code[max(code.rfind(c, 0, start) for c in ";{}") + 1:start]
    return re.search(r"\?|&&|\|\|", statement) is not None


def _assigned(code: str, name: str) -> bool:
    return re.search(rf"(?<![\w.:>])\b{re.escape(name)}\s*=(?!=)", code) is not None


def _needs_defined(code: str, name: str) -> list[tuple[int, int]]:
    """Where ``code`` calls a member of ``name`` that an undefined tensor throws on."""
    pattern = rf"(?<![\w.:>])\b{re.escape(name)}\s*(?:\.|->)\s*(?:{'|'.join(_NEEDS_DEFINED)})\s*[(<]"
    return [(found.start(), found.end()) for found in re.finditer(pattern, code)]


def _passed_to_user(code: str, name: str, at: int) -> list[tuple[int, int]]:
    """Where, before ``at``, ``name`` is a whole argument of a call to a function that ``code``
    defines, each definition of that arity calling such a member of the parameter before
    anything else can return (QuTLASS's runGemm passes A to args_from_options, which reads
    A.data_ptr() first): the call throws on an undefined tensor as the member call would."""
    passes = [found.start("name") for found in
              re.finditer(rf"[(,]\s*(?P<name>\b{re.escape(name)}\b)\s*(?=[,)])", code[:at])]
    if not passes:
        return []
    defined = syntax.definitions(code)
    found: list[tuple[int, int]] = []
    for passed in passes:
        opening = _enclosing_paren(code, passed)
        callee = None if opening is None else _CALLEE.search(code, max(0, opening - 200), opening)
        close = None if opening is None else _close_paren(code, opening)
        if callee is None or opening is None or close is None:
            continue
        arguments = _split_arguments(code, opening, close)
        index = next((i for i, (begin, end) in enumerate(arguments) if begin <= passed < end), None)
        bodies = [definition for definition in defined.get(callee.group("name"), [])
                  if len(definition.parameters) == len(arguments)]
        if index is not None and bodies and all(_defines_first(d.body, d.parameters[index]) for d in bodies):
            found.append((passed, passed + len(name)))
    return found


def _defines_first(body: str, parameter: str | None) -> bool:
    """Whether the function ``body`` calls such a member of ``parameter`` whenever it runs: on
    its own statement's unconditional path, before any ``return`` and any assignment to it."""
    if parameter is None:
        return False
    for start, _ in _needs_defined(body, parameter):
        if re.search(r"\breturn\b", body[:start]) or _assigned(body[:start], parameter):
            return False
        if not _behind_condition(body, start) and _unconditional(body, start, len(body) - 1):
            return True
    return False


def _unconditional(code: str, start: int, at: int) -> bool:
    """Whether the code at ``start`` runs whenever the code at ``at`` (later) does: no block
    it sits in closes between them. A brace that closes an initializer (``Args a{{p, K}}``)
    is not a block, so it does not count."""
    depth = 0
    inside = start  # the brace enclosing what is left to close is before this
    for index in range(start, at):
        char = code[index]
        if char == "{":
            depth += 1
        elif char == "}":
            if depth:
                depth -= 1
                continue
            opening = _enclosing_brace(code, inside)
            if opening is None or _opens_block(code, opening):
                return False
            inside = opening
    return True


def _enclosing_brace(code: str, at: int) -> int | None:
    """The ``{`` whose braces hold ``at``."""
    depth = 0
    for index in range(at - 1, -1, -1):
        if code[index] == "}":
            depth += 1
        elif code[index] == "{":
            if depth == 0:
                return index
            depth -= 1
    return None


def _opens_block(code: str, brace: int) -> bool:
    """A ``{`` after ``)``, ``;``, ``}``, ``:``, ``]`` or else/do/try opens a block (a body, a
    scope); after anything else (``=``, ``,``, ``(``, a name) it opens an initializer; after a
    ``{``, what that one opens (``Args a{ {p, K} }`` nests initializers, ``{ {`` in a body scopes)."""
    before = code[:brace].rstrip()
    if before.endswith("{"):
        return _opens_block(code, len(before) - 1)
    return before[-1:] in (")", ";", "}", ":", "]", "") or re.search(r"\b(?:else|do|try)$", before) is not None


def _close_paren(code: str, opening: int) -> int | None:
    """The index of the ``)`` matching ``code[opening] == '('``."""
    return matching_close(code, opening)


_KEYWORDS_BEFORE_EXPRESSIONS = frozenset({"return", "case", "throw", "co_return", "co_yield", "co_await", "else", "do",
                                          "new", "delete", "not", "and", "or"})


def _receiver_start(code: str, end: int) -> int | None:
    """Where the postfix expression ending just before ``end`` starts: identifiers joined by
    ``.``/``::`` and calls or subscripts (``a``, ``t.contiguous()``, ``ns::f(x)[0]``); None when
    there is none on that line. A keyword before a parenthesis (``return (*p).t()``) is not a
    callee."""
    index = end
    while True:
        begin = index  # where the expression starts if what comes before is not part of it
        blank = " \t\n" if index == end else " \t"  # a chain may go on on the next line: `x.view(s)\n  .t()`
        while index > 0 and code[index - 1] in blank:
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
            if closing == ")" and (callee := _TEMPLATE_CALLEE.search(code, max(0, index - 200), index)):
                return callee.start()  # the dispatcher's call or std::get<N>, whose template argument holds '::'
            continue  # the callee or the subscripted expression comes before
        start = index
        while index > 0 and (code[index - 1].isalnum() or code[index - 1] == "_"):
            index -= 1
        if index == start:
            return None if index == end else start
        if code[index:start] in _KEYWORDS_BEFORE_EXPRESSIONS:
            return None if begin == end else begin + len(code[begin:end]) - len(code[begin:end].lstrip())
        if index >= 2 and code[index - 2:index] in ("::", "->"):
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


def _next_call(pattern: re.Pattern[str], code: str, file: FileRewrite
               ) -> tuple[re.Match[str], int, int, int | None] | None:
    """The first call ``pattern`` finds on a line the build compiles: the match, its line
    (0-based), its opening parenthesis and the matching closing one (None: not on record)."""
    found = next((m for m in pattern.finditer(code) if file.active[_line_of(code, m.start())]), None)
    if found is None:
        return None
    opening = found.end() - 1
    return found, _line_of(code, found.start()), opening, _close_paren(code, opening)


def _method(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    """RECEIVER.method(ARGS) -> function(RECEIVER, ARGS), one at a time, rescanning, so a chain
    (a.contiguous().view(s)) nests. The blanked code is kept in step with the text: an edit
    starts and ends outside comments and strings, so only its own text is blanked again."""
    pattern = re.compile(rf"(\.|->)\s*{re.escape(rewrite.method)}\s*\(")
    declarations: Declarations | None = None  # line-based: valid while the step adds no line
    code = blank_comments_and_strings(file.text)
    for _ in range(100000):
        next_call = _next_call(pattern, code, file)
        if next_call is None:
            return
        found, line, opening, closing = next_call
        start = _receiver_start(code, found.start())
        what = ""
        if start is not None and (found.group(1) == "->" or rewrite.receiver):
            declarations = declarations or declarations_for(code, rewrite)
            what = declarations.kind(code[start:found.start()], line)
        reason = None
        if found.group(1) == "->" and what != HANDLE:
            reason = "called through a pointer: write the receiver as *p yourself"
        elif closing is None or start is None:
            reason = "no receiver expression on this line"
        elif rewrite.receiver and found.group(1) == "." and what != TENSOR:
            receiver = code[start:found.start()].strip()
            reason = f"{receiver} {NOT_DECLARED}: if it is one, call {rewrite.function} yourself"
        elif rewrite.max_args is not None and _arguments(code, opening, closing) > rewrite.max_args:
            reason = f"takes more than {rewrite.max_args} arguments here (an overload without a stable equivalent)"
        elif _arguments(code, opening, closing) < rewrite.min_args:
            reason = f"takes fewer than {rewrite.min_args} arguments here (an overload without a stable equivalent)"
        elif rewrite.not_dtype and _ENUMERATOR.fullmatch(code[opening + 1:closing].strip()):
            reason = f"a ScalarType argument: not {rewrite.function} (view-dtype's, on a tensor the file declares)"
        elif not _eligible(rewrite, file, line, torch_target):
            reason = ""
        if reason is not None or closing is None or start is None:
            if reason:
                file.declined.append(Declined(line + 1, rewrite.id, reason))
            at = found.start() + len(found.group(1))
            file.text, code = file.text[:at] + SKIP + file.text[at:], code[:at] + SKIP + code[at:]
            continue
        gap = file.text[start:found.start()]
        receiver = gap.strip()
        if found.group(1) == "->":
            receiver = f"*{receiver}"
        chain = _CHAIN.fullmatch(receiver)
        if rewrite.lvalue and (_TEMPORARY.match(receiver) or (chain and chain.group("op") not in _LVALUE_METHODS)):
            named = _named_receiver(rewrite, file, code, start, closing, receiver, opening)
            if named is None:
                file.declined.append(Declined(line + 1, rewrite.id, f"the receiver is a temporary ({receiver}), "
                                              f"which {rewrite.function} cannot take: name it first"))
                at = found.start() + len(found.group(1))
                file.text, code = file.text[:at] + SKIP + file.text[at:], code[:at] + SKIP + code[at:]
                continue
            end, new = named
            file.text = file.text[:start] + new + file.text[end:]
            code = code[:start] + blank_comments_and_strings(new) + code[end:]
            file.made[rewrite.id] += 1
            file.includes.update(rewrite.includes)
            continue
        if rewrite.lvalue and _IDENTIFIER.fullmatch(receiver):
            declarations = declarations or declarations_for(code, rewrite)
            declared = declarations.declared(receiver, line)
            if declared is not None and re.search(_CONST_TENSOR.format(name=re.escape(receiver)),
                                                  code.split("\n")[declared.first]):
                # ATen's d.copy_(s) is a const method; stable's copy_ takes Tensor&. The handle is not
                # what changes (the tensor's data is), as with the const method (DeepGEMM's const Tensor& d)
                receiver = f"const_cast<torch::stable::Tensor&>({receiver})"
        tail = gap[len(gap.rstrip()):]  # the line break of a chain continued on the next line stays
        arguments = [text for text in (file.text[opening + 1:closing].strip(), rewrite.arguments) if text]
        if "\n" in tail:
            new = f"{rewrite.function}({receiver}," + tail + ", ".join(arguments) + ")" if arguments else \
                f"{rewrite.function}({receiver}{tail})"
        else:
            new = f"{rewrite.function}({', '.join([receiver, *arguments])})"
        file.text = file.text[:start] + new + file.text[closing + 1:]
        code = code[:start] + blank_comments_and_strings(new) + code[closing + 1:]
        file.made[rewrite.id] += 1
        file.includes.update(rewrite.includes)


_TEMPORARY = re.compile(r"torch::stable::(?P<op>\w+)\s*\(\s*(?P<first>[A-Za-z_]\w*)?")
# a tensor method's result (DeepGEMM's padded.slice(1, 0, mn).slice(2, 0, k).copy_(x)): a temporary too
_LVALUE_METHODS = frozenset({"value"})  # an optional's value() is the tensor it holds, not a temporary
_CHAIN = re.compile(r"(?P<first>[A-Za-z_]\w*)\s*(?:\.\s*\w+\s*\(.*\)\s*)*\.\s*(?P<op>\w+)\s*\(.*\)", re.S)


def _named_receiver(rewrite: Rewrite, file: FileRewrite, code: str, start: int, closing: int, receiver: str,
                    opening: int) -> tuple[int, str] | None:
    """A statement ``f(...).copy_(x);`` whose receiver is a tensor a torch::stable call returns
    (``view(...).copy_(out)``, FA2's forward) as a block that names it first, on the same line:
    ``{ torch::stable::Tensor out_view = view(...); torch::stable::copy_(out_view, x); }``. The
    end of the statement replaced and the new text; None when the call is not a whole statement."""
    before = code[:start].rstrip()
    after = re.compile(r"\s*;").match(code, closing + 1)
    if after is None or not _statement_starts(before):
        return None
    made = _TEMPORARY.match(receiver) or _CHAIN.fullmatch(receiver)
    assert made is not None
    name = f"{(made.group('first') or 'tensor').rstrip('_')}_{made.group('op').rstrip('_')}"
    while re.search(rf"\b{name}\b", receiver):
        name += "_"
    arguments = ", ".join(text for text in (file.text[opening + 1:closing].strip(), rewrite.arguments) if text)
    call = f"{rewrite.function}({', '.join([name, arguments]) if arguments else name})"
    return after.end(), f"{{ torch::stable::Tensor {name} = {receiver}; {call}; }}"


def _statement_starts(before: str) -> bool:
    """Whether a statement starts after ``before`` (blanked code): after ``;``, a brace, a label,
    ``else``, the file's start, or the condition of an if/for/while."""
    if not before or before[-1] in ";{}:" or re.search(r"\belse$", before):
        return True
    if before[-1] != ")":
        return False
    depth = 0
    for index in range(len(before) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(before[index], 0)
        if depth == 0:
            return re.search(r"\b(?:if|for|while)\s*$", before[:index]) is not None
    return False


def _dispatcher(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    """RECEIVER.method(ARGS) on a receiver the file declares a tensor, and at::op(ARGS), for the
    ops torch::stable lacks -> ``assemble_stable::call_aten<R>("aten::op", "overload", ...)``,
    its stack written out from the build torch's schema (migration/dispatcher.py); one at a
    time, rescanning, so a call inside another's arguments is rewritten too."""
    from assembler.migration.dispatcher import call

    alternatives = ([rf"(?P<dot>\.)\s*(?P<method>{'|'.join(map(re.escape, rewrite.methods))})\s*\("]
                    if rewrite.methods else [])
    if rewrite.functions:
        names = "|".join(map(re.escape, rewrite.functions))
        alternatives.append(rf"(?<![\w:])(?:at|torch)::(?P<function>{names})\s*\(")
    if not alternatives:
        return
    pattern = re.compile("|".join(alternatives))
    declarations: Declarations | None = None
    code = blank_comments_and_strings(file.text)
    for _ in range(100000):
        next_call = _next_call(pattern, code, file)
        if next_call is None:
            return
        found, line, opening, closing = next_call
        name = found.group("method") or found.group("function")
        method = found.group("method") is not None
        start = _receiver_start(code, found.start()) if method else found.start()
        reason = None
        if closing is None or start is None:
            reason = "no receiver expression on this line"
        elif method:
            declarations = declarations or declarations_for(code, rewrite)
            if declarations.kind(code[start:found.start()], line) != TENSOR:
                reason = f"{code[start:found.start()].strip()} {NOT_DECLARED}: if it is one, call aten::{name} yourself"
        new = ""
        if reason is None and closing is not None and start is not None:
            values = [file.text[begin:end] for begin, end in _split_arguments(code, opening, closing)]
            if method:
                values.insert(0, file.text[start:found.start()].strip())
            made = call(f"aten::{name}", rewrite.schemas.get(f"aten::{name}", ()), values, method)
            reason, new = (made.reason or None), made.text
        if reason is None and not _eligible(rewrite, file, line, torch_target):
            reason = ""
        if reason is not None or closing is None or start is None:
            if reason:
                file.declined.append(Declined(line + 1, rewrite.id, reason))
            at = found.start() + 1 if method else found.start("function")
            file.text, code = file.text[:at] + SKIP + file.text[at:], code[:at] + SKIP + code[at:]
            continue
        file.text = file.text[:start] + new + file.text[closing + 1:]
        code = code[:start] + blank_comments_and_strings(new) + code[closing + 1:]
        file.made[rewrite.id] += 1
        file.includes.update(rewrite.includes)
        file.helpers.add(rewrite.helper)
        declarations = None  # an auto kept from the call is now a tensor's: read again (few calls)


def _call(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    assert rewrite.pattern is not None
    code = blank_comments_and_strings(file.text)
    edits: list[tuple[int, int, str]] = []
    besides: list[tuple[int, int, str]] = []
    for found in rewrite.pattern.finditer(code):
        line = _line_of(code, found.start())
        if not file.active[line]:
            continue
        opening = code.index("(", found.end())
        closing = _close_paren(code, opening)
        if closing is None:
            file.declined.append(Declined(line + 1, rewrite.id, "unbalanced call"))
            continue
        braced: list[tuple[int, int, str]] = []
        if rewrite.refuse_braced and "{" in code[opening + 1:closing]:
            # A braced argument {3} would bind to std::optional<IntHeaderOnlyArrayRef> and dangle: it names
            # its vector in place (FA2's backward: sum_out(dk, x, {3})), a temporary that lives to the
            # end of the call, where the array ref is read. A brace inside another argument is that one's.
            spans = _split_arguments(code, opening, closing)
            whole = [(start, end) for start, end in spans
                     if code[start] == "{" and _close(code, start) == end - 1]
            braced = [(start, start, "std::vector<int64_t>") for start, _ in whole]
        if rewrite.max_args is not None and _arguments(code, opening, closing) > rewrite.max_args:
            file.declined.append(Declined(line + 1, rewrite.id,
                                          f"takes more than {rewrite.max_args} arguments here (TensorOptions?): "
                                          "pass dtype and device to the stable function yourself"))
            continue
        if not _eligible(rewrite, file, line, torch_target):
            continue
        edits.append((found.start(), found.end(), rewrite.function))
        besides += braced
    _apply(edits, rewrite, file, besides)


_INDEX = re.compile(r"\.\s*index\s*\(\s*\{")
_CALL_ATEN = "assemble_stable::call_aten"  # migration/dispatcher.py's HELPER_FUNCTION
_DISPATCHER_SINCE = "2.10"  # torch_call_dispatcher
_SLICE = re.compile(r"(?:torch::indexing::)?Slice\s*\((?P<arguments>[^()]*(?:\([^()]*\)[^()]*)*)\)", re.S)
_NONE = re.compile(r"(?:torch::indexing::)?None")


def _index_narrow(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    """``A.index({"...", Slice(None, n)})`` (and ``{Slice(), Slice(s, e)}``: slices with bounds,
    the other dimensions whole) on a tensor A the file declares ->
    ``torch::stable::narrow(A, dim, start, length)``, one per bounded slice, as FA2's humans
    unpadded their outputs (DeepGEMM's logits: two)."""
    code = blank_comments_and_strings(file.text)
    declarations: Declarations | None = None
    edits: list[tuple[int, int, str]] = []
    for found, line, _, closing in calls_of(_INDEX, code, file):
        receiver = code[:found.start()]
        name = re.search(r"(?<![\w.:>])([A-Za-z_]\w*)\s*$", receiver)
        if name is None:
            continue
        declarations = declarations or declarations_for(code, rewrite)
        tensor = name.group(1)
        brace = found.end() - 1
        end = _close(code, brace)
        reason = None
        if declarations.kind(tensor, line) != TENSOR:
            reason = f"{tensor} {NOT_DECLARED}: if it is one, call torch::stable::narrow yourself"
        elif end is None or code[end + 1:closing].strip():
            reason = "not one braced list of indices"
        narrowed = None if reason else _narrowing(file.text, code, brace, end or brace, tensor)
        if reason is not None or narrowed is None:
            file.declined.append(Declined(line + 1, rewrite.id, reason or (
                "not one Slice(start, stop) with every other index whole (Slice(), or \"...\" first): call "
                "torch::stable::narrow or select yourself")))
            continue
        if not _eligible(rewrite, file, line, torch_target):
            continue
        if _CALL_ATEN in narrowed:
            if _newer(_DISPATCHER_SINCE, torch_target):
                file.declined.append(Declined(line + 1, rewrite.id, "more than one bounded slice: the second is "
                                              f"narrowed through the dispatcher, torch {_DISPATCHER_SINCE}'s (raise "
                                              "torch-target to allow it)"))
                continue
            file.helpers.add("dispatcher")
        edits.append((name.start(1), closing + 1, narrowed))
    _apply(edits, rewrite, file)


def _narrowing(text: str, code: str, brace: int, end: int, tensor: str) -> str | None:
    """``tensor`` narrowed as the index list between ``brace`` and its ``end`` slices it (a
    narrow per bounded slice), or None."""
    items = [text[start:stop].strip() for start, stop in _split_arguments(code, brace, end)]
    ellipsis = bool(items) and items[0] == '"..."'
    items = items[1:] if ellipsis else items
    bounded: list[tuple[int, str, str]] = []
    for position, item in enumerate(items):
        sliced = _SLICE.fullmatch(item)
        if sliced is None:
            return None
        parts = [part.strip() for part in sliced.group("arguments").split(",")] if sliced.group("arguments").strip() \
            else []
        if len(parts) > 2 or any("(" in part and not _IDENTIFIER.match(part) for part in parts):
            return None
        start, stop = ([*parts, "", ""][:2])
        start, stop = ("" if _NONE.fullmatch(start) else start), ("" if _NONE.fullmatch(stop) else stop)
        if start or stop:
            bounded.append((position, start, stop))
    if not bounded or (ellipsis and (len(bounded) != 1 or bounded[0][0] != len(items) - 1)):
        return None
    narrowed = tensor
    for position, start, stop in bounded:  # one narrow per bounded slice, innermost first (sizes: the tensor's own)
        outer = narrowed != tensor
        dim = f"{tensor}.dim() - 1" if ellipsis else str(position)
        first = start or "0"
        start = "" if start == "0" else start
        if not stop:
            length = f"{tensor}.size({dim}) - {first}" if start else f"{tensor}.size({dim})"
        else:
            length = f"{_grouped(stop)} - {_grouped(start)}" if start else stop
        if outer:  # torch::stable::narrow takes a Tensor&, which a narrow's result is not: aten::narrow
            narrowed = (f'{_CALL_ATEN}<torch::stable::Tensor>("aten::narrow", "", {narrowed}, '
                        f"static_cast<int64_t>({dim}), "
                        f"static_cast<int64_t>({first}), static_cast<int64_t>({length}))")
        else:
            narrowed = f"torch::stable::narrow({narrowed}, {dim}, {first}, {length})"
    return narrowed


def _grouped(expression: str) -> str:
    """``expression`` in parentheses unless it is a name or a number."""
    return expression if re.fullmatch(r"[\w.]+", expression) else f"({expression})"


NOT_DECLARED = "is not declared a tensor here (a parameter, a variable, an auto from a tensor call)"
_KEPT_IN_AUTO = re.compile(r"\bauto\b\s*(?:const\b\s*)?&{0,2}\s*(\w+)\s*=\s*$")
_MEMBER_NEXT = re.compile(r"\s*(?:\.|->)")
_TYPE_META_DECLARED = re.compile(r"\bTypeMeta\s*&?\s*\w+\s*=\s*$")


def _rename_method(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    """RECEIVER.method() -> RECEIVER.rename() on a receiver the file declares a tensor (through
    ``->``: an optional or a pointer), unless what the old method returned is used in a way
    the new result does not allow (a member of it, or of the variable it is kept in)."""
    code = blank_comments_and_strings(file.text)
    pattern = re.compile(rf"(\.|->)\s*{re.escape(rewrite.method)}\s*\(\s*\)")
    declarations: Declarations | None = None
    edits: list[tuple[int, int, str]] = []
    for found in pattern.finditer(code):
        line = _line_of(code, found.start())
        if not file.active[line]:
            continue
        start = _receiver_start(code, found.start())
        declarations = declarations or declarations_for(code, rewrite)
        wanted = HANDLE if found.group(1) == "->" else TENSOR
        receiver = "" if start is None else code[start:found.start()].strip()
        line_start = code.rfind("\n", 0, found.start()) + 1
        before, after = code[line_start:start or 0], code[found.end():]
        kept = _KEPT_IN_AUTO.search(before)
        reason = None
        if start is None or declarations.kind(receiver, line) != wanted:
            reason = f"{receiver or 'the receiver'} {NOT_DECLARED}: if it is one, write .{rewrite.rename}() yourself"
        elif _MEMBER_NEXT.match(after) or _TYPE_META_DECLARED.search(before):
            reason = (f"what .{rewrite.method}() returns is used as itself (a caffe2::TypeMeta): rewrite that use, "
                      "then the call")
        elif kept and re.match(r"\s*;", after) and re.search(rf"\b{kept.group(1)}\s*(?:\.|->)\s*\w", after):
            reason = (f"{kept.group(1)} keeps what .{rewrite.method}() returns and a member of it is used: rewrite "
                      "that use, then the call")
        if reason is not None:
            file.declined.append(Declined(line + 1, rewrite.id, reason))
            continue
        if not _eligible(rewrite, file, line, torch_target):
            continue
        name = code.index(rewrite.method, found.start() + len(found.group(1)))
        edits.append((name, name + len(rewrite.method), rewrite.rename))
    _apply(edits, rewrite, file)


_MEMBER_USED = re.compile(r"\s*(?:\.|->)\s*(?P<member>\w+)")
_KEPT_AS = re.compile(r"(?P<type>(?<![\w:])[A-Za-z_][\w:]*(?:\s*<[^<>;]*>)?)\s*&{0,2}\s*(?P<name>[A-Za-z_]\w*)\s*=\s*$")


def _helper(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    """What the helper header answers for (pattern -> replacement, a re.sub template; the file
    then includes the header, migration/helpers.py): where the pattern has a ``tensor`` group,
    only on an expression the file declares a tensor; with ``value_types``, only where what the
    call returns is used as a plain value (no member of it used, not kept in a variable of
    another type). Anything else is declined, and the rules report the use at its line."""
    assert rewrite.pattern is not None
    code = blank_comments_and_strings(file.text)
    declarations: Declarations | None = None
    edits: list[tuple[int, int, str]] = []
    for found in rewrite.pattern.finditer(code):
        line = _line_of(code, found.start())
        if not file.active[line]:
            continue
        original = rewrite.pattern.match(file.text, found.start())
        if original is None or original.end() != found.end():  # it depends on a string's contents
            continue
        new = original.expand(rewrite.replacement)
        reason = None
        if "tensor" in rewrite.pattern.groupindex and found.group("tensor") is not None:
            declarations = declarations or declarations_for(code, rewrite)
            tensor = found.group("tensor").strip()
            if declarations.kind(tensor, line) != TENSOR:
                reason = f"{tensor} {NOT_DECLARED}: if it is one, write {new.strip()} yourself"
        if reason is None and rewrite.value_types:
            reason = _kept_otherwise(code, found, rewrite)
        if reason is not None:
            file.declined.append(Declined(line + 1, rewrite.id, reason))
            continue
        if not _eligible(rewrite, file, line, torch_target):
            continue
        edits.append((found.start(), found.end(), new))
        file.helpers.add(rewrite.helper)
    _apply(edits, rewrite, file)


def _kept_otherwise(code: str, found: re.Match[str], rewrite: Rewrite) -> str | None:
    """Why what the call at ``found`` returns is not used as the helper's result can be, or
    None: a member of it the helper's result lacks (not in ``members``), or it initializes a
    variable of a type not in ``value_types``, or an ``auto`` one whose other members are used."""
    end = found.end()
    if (call := re.compile(r"\s*\(").match(code, end)) and (closing := _close_paren(code, call.end() - 1)) is not None:
        end = closing + 1
    member = _MEMBER_USED.match(code, end)
    if member is not None and member.group("member") not in rewrite.members:
        return (f"a member of what it returns is used (.{member.group('member')}): rewrite that use, then the call")
    line_start = code.rfind("\n", 0, found.start()) + 1
    kept = _KEPT_AS.search(code, line_start, found.start())
    if kept is None or kept.group("type") in _KEYWORDS_BEFORE_EXPRESSIONS:
        return None
    kind = re.sub(r"\s+", "", kept.group("type"))
    name = kept.group("name")
    if kind not in rewrite.value_types:
        return f"kept as {kind}: declare {name} {' or '.join(rewrite.value_types)}, then rewrite"
    if kind == "auto":
        for use in re.finditer(rf"(?<![\w.>:])\b{re.escape(name)}\s*(?:\.|->)\s*(?P<member>\w+)", code[end:]):
            if use.group("member") not in rewrite.members:
                return (f"{name} keeps what it returns and a member of it is used (.{use.group('member')}): "
                        "rewrite that use, then the call")
    return None


_CONST_TENSOR = r"(?:\bconst\s+(?:[\w:]*::)?Tensor\b|\bTensor\s+const\b|\bconst\s+auto\b)\s*&?\s*{name}\b"


_NAME_CHAIN = re.compile(r"[A-Za-z_]\w*(?:\s*(?:\.|->)\s*[A-Za-z_]\w*)*")  # a, a.first, p->t: read twice, same value


def _syntax(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    """The ast-grep patterns of ``rewrite`` (migration/syntax.py) on the compiled lines: type
    syntax writes ``replacement`` with the metavariables put in; type cast-data-ptr turns a cast
    of an untemplated ``$X.data_ptr()`` into a ``static_cast`` of ``const_data_ptr()`` where the
    cast's type is a const pointer, of ``const_cast<void*>(...const_data_ptr())`` where the
    tensor is declared const (the cast's type stays as written), else of ``mutable_data_ptr()``.
    ``$X`` must be declared a tensor when ``receiver`` says so. A match inside another is
    rewritten on the next pass (``v[0].sizes()[x.sizes()[0]]``)."""
    for _ in range(20):
        code = blank_comments_and_strings(file.text)
        declarations: Declarations | None = None
        edits: list[tuple[int, int, str]] = []
        taken: list[tuple[int, int]] = []
        root = syntax.parse(file.text)
        for pattern in rewrite.syntax:
            wanted = [match for match in syntax.matches(file.text, pattern, root)  # view(dtype), not view(sizes)
                      if all(spelled.fullmatch(match.captures.get(name, "").strip())
                             for name, spelled in rewrite.where.items())]
            for match in syntax.outermost(iter(wanted)):
                if not file.active[match.line] or any(s < match.end and match.start < e for s, e in taken):
                    continue
                receiver = match.captures.get("X", "")
                if rewrite.receiver and receiver:
                    declarations = declarations or declarations_for(code, rewrite)
                    if declarations.kind(code[slice(*match.spans["X"])], match.line) != TENSOR:
                        file.declined.append(Declined(match.line + 1, rewrite.id, f"{receiver.strip()} {NOT_DECLARED}"))
                        taken.append((match.start, match.end))
                        continue
                if rewrite.replacement.count("$X") > 1 and not _NAME_CHAIN.fullmatch(receiver.strip()):
                    file.declined.append(Declined(match.line + 1, rewrite.id, f"{receiver.strip()} would be evaluated "
                                                  "twice: name it in a variable first"))
                    taken.append((match.start, match.end))
                    continue
                if not _eligible(rewrite, file, match.line, torch_target):
                    taken.append((match.start, match.end))
                    continue
                if rewrite.type == "cast-data-ptr":
                    declarations = declarations or declarations_for(code, rewrite)
                    new = _cast_data_ptr(match, code, declarations)
                else:
                    new = match.expand(rewrite.replacement)
                    if rewrite.helper:
                        file.helpers.add(rewrite.helper)
                edits.append((match.start, match.end, new))
                taken.append((match.start, match.end))
        if not edits:
            break
        _apply(edits, rewrite, file)
    file.declined = list(dict.fromkeys(file.declined))  # a later pass meets a declined match again


def _cast_data_ptr(match: syntax.Match, code: str, declarations: Declarations) -> str:
    """The static_cast for a cast of ``$X.data_ptr()`` to ``$T`` (see :func:`_syntax`)."""
    kind, tensor = match.captures["T"].strip(), match.captures["X"].strip()
    cast = "reinterpret_cast" if code.startswith("reinterpret_cast", match.start) else "static_cast"
    if re.search(r"\bconst\b", kind):
        return f"{cast}<{kind}>({tensor}.const_data_ptr())"
    declared = declarations.declared(tensor, match.line) if _IDENTIFIER.fullmatch(tensor) else None
    if declared is not None:
        lines = code.split("\n")
        if re.search(_CONST_TENSOR.format(name=re.escape(tensor)), lines[declared.first]):
            return f"{cast}<{kind}>(const_cast<void*>({tensor}.const_data_ptr()))"
    return f"{cast}<{kind}>({tensor}.mutable_data_ptr())"


def _apply(edits: list[tuple[int, int, str]], rewrite: Rewrite, file: FileRewrite,
           besides: list[tuple[int, int, str]] | None = None) -> None:
    """Each edit (start, end, new text; none overlapping) is one made; the edits ``besides``
    go with them uncounted (a declaration that goes, a const a declaration needs)."""
    counted = [(start, end, new, True) for start, end, new in edits]
    for start, end, new, count in sorted([*counted, *((s, e, n, False) for s, e, n in besides or [])], reverse=True):
        file.text = file.text[:start] + new + file.text[end:]
        if count:
            file.made[rewrite.id] += 1
            file.includes.update(rewrite.includes)


def _trimmed(code: str, start: int, end: int) -> tuple[int, int]:
    """``start, end`` without the whitespace at either end."""
    text = code[start:end]
    left = start + len(text) - len(text.lstrip())
    return left, max(left, end - (len(text) - len(text.rstrip())))


def _split_arguments(code: str, opening: int, closing: int) -> list[tuple[int, int]]:
    """The spans of the top-level arguments between ``code[opening] == '('`` and its
    ``closing``, whitespace trimmed."""
    spans: list[tuple[int, int]] = []
    depth, start = 0, opening + 1
    for index in range(opening + 1, closing + 1):
        char = code[index]
        if char in "([{":
            depth += 1
        elif char in ")]}" and index < closing:
            depth -= 1
        elif (char == "," and depth == 0) or index == closing:
            if code[start:index].strip():
                spans.append(_trimmed(code, start, index))
            start = index + 1
    return spans


_OPTIONS_OF = re.compile(r"(?P<tensor>[A-Za-z_]\w*(?:\s*\.\s*(?:first|second))?)\s*\.\s*options\s*\(\s*\)")
# TensorOptions() then .dtype(X).device(D) in any order; or torch::dtype(X).device(D), torch::device(D).dtype(X)
_NEW_OPTIONS = re.compile(r"(?:(?:at|torch|c10)::)?TensorOptions\s*\(\s*\)"
                          r"|(?=(?:at|torch)::(?:dtype|device)\s*\()(?:at|torch)::")
_SIZES_OF = re.compile(r"(.+)\.\s*sizes\s*\(\s*\)", re.S)
_LINK = re.compile(r"\s*(?:\.\s*)?(?P<name>\w+)\s*\(")
_DEVICE_OF = re.compile(r"(?P<tensor>.+?)\s*\.\s*device\s*\(\s*\)", re.S)


@dataclass(frozen=True)
class _Allocation:
    """An ``empty``/``zeros`` call the rewrite reads: offsets in the step's text."""

    tensor: str  # A, whose device (and layout) the new tensor takes
    sizes: tuple[int, int]
    dtype: tuple[int, int] | None  # None: A's own
    options: tuple[int, int]
    kept: _Declared | None  # the options variable (auto opts = A.options()) the call names


def _option_links(code: str, position: int, end: int) -> dict[str, tuple[int, int]] | None:
    """The ``.name(...)`` links of an options chain from ``position`` to ``end``: name -> the
    span inside its parentheses; None when something else is there."""
    links: dict[str, tuple[int, int]] = {}
    while position < end:
        link = _LINK.match(code, position)
        closing = None if link is None else _close_paren(code, link.end() - 1)
        if link is None or closing is None or closing > end or link.group("name") in links:
            return None
        links[link.group("name")] = (link.end(), closing)
        position = closing + 1
    return links


def _made_options(code: str, start: int, end: int) -> tuple[str, tuple[int, int] | None]:
    """For ``TensorOptions().dtype(X).device(A.device())`` (either order, or torch::dtype(X)...)
    between ``start`` and ``end``: A and X's span; else ("", None)."""
    left, right = _trimmed(code, start, end)
    base = _NEW_OPTIONS.match(code, left)
    links = None if base is None else _option_links(code, base.end(), right)
    if links is None or set(links) != {"dtype", "device"}:
        return "", None
    device = _DEVICE_OF.fullmatch(code, *_trimmed(code, *links["device"]))
    return ("", None) if device is None else (device.group("tensor").strip(), _trimmed(code, *links["dtype"]))


_ZERO = re.compile(r"(?:0+\.?0*|\.0+)(?:[eE][+-]?\d+)?[fFlL]?")


def _from_options(code: str, opening: int, closing: int, declarations: Declarations, line: int,
                  scalar: bool = False) -> _Allocation | str:
    """What an ``empty``/``zeros`` call allocates (``scalar``: a ``tensor(0, options)`` call, a
    zero-dimensional zero), or why it is not of a form the rewrite reads."""
    arguments = _split_arguments(code, opening, closing)
    if len(arguments) != 2:
        return ("no tensor to take the device from (no options, or more than sizes and options): call "
                "torch::stable::empty(sizes, dtype, layout, device) or torch::stable::new_empty(tensor, sizes, dtype) "
                "yourself")
    (size_start, size_end), (options_start, options_end) = arguments
    sizes = code[size_start:size_end]
    if scalar and not _ZERO.fullmatch(sizes):
        return "a tensor of a value other than zero: fill a torch::stable::new_empty(A, {}, dtype) yourself"
    plain = scalar or _IDENTIFIER.fullmatch(sizes) is not None
    of_tensor = (match := _SIZES_OF.fullmatch(sizes)) is not None and declarations.kind(match.group(1), line) == TENSOR
    if not (plain or of_tensor or (sizes.startswith("{") and _close(sizes, 0) == len(sizes) - 1)):
        return ("the sizes are not a braced list, a name or a tensor's sizes(): pass them to torch::stable::new_empty "
                "yourself")
    kept = None
    base = _OPTIONS_OF.match(code, options_start)
    if base is None and (named := _IDENTIFIER.match(code, options_start)):
        kept = declarations.declared(named.group(), line)
        base = named if kept is not None and kept.kind == OPTIONS else None
    base = base or _NEW_OPTIONS.match(code, options_start)
    position = base.end() if base else options_start
    links: dict[str, tuple[int, int]] = {}
    while base is not None and position < options_end:
        link = _LINK.match(code, position)
        end = None if link is None else _close_paren(code, link.end() - 1)
        if link is None or end is None or end > options_end or link.group("name") in links:
            base = None
            break
        links[link.group("name")] = (link.end(), end)
        position = end + 1
    tensor = None
    if base is not None and base.re is _OPTIONS_OF and set(links) <= {"dtype"}:
        tensor = base.group("tensor")
    elif base is not None and base.re is _IDENTIFIER and kept is not None and set(links) <= {"dtype"}:
        tensor = kept.of
        if "dtype" not in links and kept.dtype is not None:
            links["dtype"] = kept.dtype  # the variable's own .dtype(X)
    elif base is not None and base.re is _NEW_OPTIONS and set(links) == {"dtype", "device"}:
        left, right = _trimmed(code, *links["device"])
        device = _DEVICE_OF.fullmatch(code, left, right)
        tensor = None if device is None else device.group("tensor").strip()
    if tensor is None or declarations.kind(tensor, line) != TENSOR:
        return ("the options are not A.options(), A.options().dtype(X), dtype(X) with device(A.device()), or a "
                "variable holding A.options(), of a tensor A the file declares: pass the dtype to "
                "torch::stable::new_empty(A, sizes, dtype) yourself")
    dtype = None
    if "dtype" in links:
        dtype = _trimmed(code, *links["dtype"])
        if not declarations.is_scalar_type(code[dtype[0]:dtype[1]], line):
            return ("the dtype is not a ScalarType the file spells (an enumerator, a tensor's scalar_type(), a "
                    "variable declared one): pass it to torch::stable::new_empty yourself")
    return _Allocation(tensor, (size_start, size_end), dtype, (options_start, options_end), kept)


def calls_of(pattern: re.Pattern[str], code: str, file: FileRewrite) -> Iterator[tuple[re.Match[str], int, int, int]]:
    """Each match of ``pattern`` (whose first ``(`` is its call's, or the first after it) on a
    compiled line whose parentheses close: the match, its line (0-based), the ``(`` and the ``)``."""
    for found in pattern.finditer(code):
        line = _line_of(code, found.start())
        if not file.active[line]:
            continue
        opening = code.index("(", found.start())
        closing = _close_paren(code, opening)
        if closing is not None:
            yield found, line, opening, closing


def _new_empty(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    """``at::empty(SIZES, A.options().dtype(X))`` and its spellings -> ``new_empty(A, SIZES, X)``;
    the line breaks of the call stay. An options variable no call names any more goes (its
    line is left empty, so the line numbers hold)."""
    assert rewrite.pattern is not None
    _options_parameters(file, rewrite)
    code = blank_comments_and_strings(file.text)
    declarations: Declarations | None = None
    edits: list[tuple[int, int, str]] = []
    kept: set[_Declared] = set()
    for found, line, opening, closing in calls_of(rewrite.pattern, code, file):
        declarations = declarations or declarations_for(code, rewrite)
        scalar = found.group(1) == "tensor"
        read = _from_options(code, opening, closing, declarations, line, scalar)
        if isinstance(read, str):
            file.declined.append(Declined(line + 1, rewrite.id, f"{found.group(0)}: {read}"))
            continue
        if not _eligible(rewrite, file, line, torch_target):
            continue
        text = file.text
        sizes, options, dtype = read.sizes, read.options, read.dtype
        breaks = "\n" * text.count("\n", options[0], options[1])
        if dtype is None:
            tail = "\n" * text.count("\n", sizes[1], options[0]) + breaks + text[options[1]:closing]
        else:
            tail = text[sizes[1]:options[0]] + text[dtype[0]:dtype[1]] + breaks + text[options[1]:closing]
        function = rewrite.mapping[found.group(1)]
        shape = "{}" if scalar else text[sizes[0]:sizes[1]]
        edits.append((found.start(), closing + 1, f"{function}({read.tensor}, {shape}{tail})"))
        if read.kept is not None:
            kept.add(read.kept)
    removed = [_unused(declared, code, edits) for declared in kept]
    _apply(edits, rewrite, file, [(line[0], line[1], "") for line in removed if line is not None])


_OPTIONS_PARAMETER = re.compile(r"(?:\bconst\s+)?(?:\bstruct\s+)?(?:(?:at|c10|torch)::)?TensorOptions\s*(?:const\s*)?"
                                r"&?\s*(?P<name>[A-Za-z_]\w*)\s*(?=[,)])")
_ALLOCATES = re.compile(r"(?:at|torch)::(?:empty|zeros)\s*$")


def _options_parameters(file: FileRewrite, rewrite: Rewrite) -> None:
    """A function of the file that takes a tensor's options only to allocate like it (FA2's
    ``set_params_splitkv(..., c10::TensorOptions opts)``, called with ``q.options()``) takes the
    tensor instead (``const torch::stable::Tensor& opts``), each caller passing the tensor, so
    its allocations become ``new_empty``. Only when every use in the body is the options of an
    empty/zeros call and every call in the file passes options of a tensor it declares; a
    prototype (the definition in another file) when the file's calls do (the compile proof
    keeps the two files together, migrate._linked)."""
    code = blank_comments_and_strings(file.text)
    if "TensorOptions" not in code:
        return
    declarations = declarations_for(code, rewrite)
    edits: list[tuple[int, int, str]] = []
    for found in _OPTIONS_PARAMETER.finditer(code):
        opening = _enclosing_paren(code, found.start())
        closing = None if opening is None else _close_paren(code, opening)
        function = None if opening is None else re.search(r"([A-Za-z_]\w*)\s*$", code[:opening])
        if function is None or closing is None or opening is None:
            continue
        body = re.compile(r"\s*(?:const\s*)?\{").match(code, closing + 1)
        prototype = re.compile(r"\s*;").match(code, closing + 1)  # FA2's sparse API declares what flash_api.cpp defines
        body_end = _close(code, body.end() - 1) if body else closing if prototype else None
        parameters = _split_arguments(code, opening, closing)
        index = next((i for i, (start, end) in enumerate(parameters) if start <= found.start("name") < end), None)
        if body_end is None or index is None:
            continue
        name = found.group("name")
        uses = _allocation_uses(code, name, body.end(), body_end) if body else []
        calls = _option_callers(code, function.group(1), index, declarations, (function.start(1), body_end))
        if uses is None or not calls:
            continue
        edits.append((found.start(), found.end(), f"const torch::stable::Tensor& {name}"))
        edits += [(end, end, ".options()") for end in uses] + [(start, end, new) for start, end, new, _ in calls]
        passed = [(start, end, new) for start, end, new, _ in calls]
        for declared in {variable for *_, variable in calls if variable is not None}:
            line = _unused(declared, code, passed)  # only the calls named it: it goes (its line stays, empty)
            edits += [(line[0], line[1], "")] if line is not None else []
    for start, end, new in sorted(set(edits), reverse=True):
        file.text = file.text[:start] + new + file.text[end:]


def _enclosing_paren(code: str, at: int) -> int | None:
    """The ``(`` whose parentheses hold ``at``."""
    depth = 0
    for index in range(at - 1, -1, -1):
        char = code[index]
        if char in ")]}":
            depth += 1
        elif char in "([{":
            if depth == 0:
                return index if char == "(" else None
            depth -= 1
    return None


def _allocation_uses(code: str, name: str, start: int, end: int) -> list[int] | None:
    """The ends of ``name`` in the body between ``start`` and ``end`` when each is the options
    argument of an empty/zeros call (``name`` or ``name.dtype(X)``); None when one is not."""
    ends = []
    for use in re.finditer(rf"(?<![\w.:>])\b{re.escape(name)}\b", code[start:end]):
        at = start + use.start()
        opening = _enclosing_paren(code, at)
        if opening is None or not _ALLOCATES.search(code[:opening]) or not re.search(r",\s*$", code[:at]):
            return None
        ends.append(start + use.end())
    return ends or None


def _option_callers(code: str, function: str, index: int, declarations: Declarations,
                    definition: tuple[int, int]) -> list[tuple[int, int, str, _Declared | None]]:
    """The edits that make each call of ``function`` pass the tensor whose options it passed at
    ``index``, with the options variable it named; none unless every call (outside the
    definition) does."""
    edits: list[tuple[int, int, str, _Declared | None]] = []
    for call in re.finditer(rf"(?<![\w.:>])\b{re.escape(function)}\s*\(", code):
        if definition[0] <= call.start() <= definition[1]:
            continue
        closing = _close_paren(code, call.end() - 1)
        arguments = [] if closing is None else _split_arguments(code, call.end() - 1, closing)
        if index >= len(arguments):
            return []
        start, end = arguments[index]
        argument, line = code[start:end], _line_of(code, start)
        tensor = _OPTIONS_OF.fullmatch(argument)
        declared = declarations.declared(argument, line) if _IDENTIFIER.fullmatch(argument) else None
        of = tensor.group("tensor") if tensor else (declared.of if declared and declared.kind == OPTIONS
                                                    and declared.dtype is None else "")
        if not of or declarations.kind(of, line) != TENSOR:
            return []
        edits.append((start, end, of, declared))
    return edits


def _unused(declared: _Declared, code: str, edits: list[tuple[int, int, str]]) -> tuple[int, int] | None:
    """The line of an options variable's declaration when nothing but the rewritten calls named it."""
    if declared.line is None:
        return None
    starts = [0, *(m.end() for m in re.finditer("\n", code))]
    scope = code[:starts[declared.last + 1] if declared.last + 1 < len(starts) else len(code)]
    for use in re.finditer(rf"\b{re.escape(declared.name)}\b", scope[starts[declared.first]:]):
        at = use.start() + starts[declared.first]
        if not (declared.line[0] <= at < declared.line[1]) and not any(start <= at < end for start, end, _ in edits):
            return None
    return declared.line


_DATA_PTR = re.compile(r"(?:\.|->)\s*data_ptr\s*(?:<|\(\s*\))")
_CONST_DECLARATION = re.compile(r"\bconst\s+[\w:]+\s*\*\s*(?:const\s+)?\w+\s*=\s*$")
_CONST_CAST = re.compile(r"(?:(?:reinterpret|static)_cast\s*<\s*(?:const\s+[\w:]+|[\w:]+\s+const)\s*\*\s*>\s*\("
                         r"|\(\s*(?:const\s+[\w:]+|[\w:]+\s+const)\s*\*\s*\))\s*$")
_POINTER_DECLARATION = re.compile(r"(?:^|[;{}(]|\s)(?P<type>auto\s*\*?|(?!return\b)[A-Za-z_][\w:]*\s*\*)\s*"
                                  r"(?P<name>[A-Za-z_]\w*)\s*=\s*$")
# ``p = x.data_ptr<T>()`` into a pointer the file declares to const (``int64_t const* p = nullptr;``)
_ASSIGNED = re.compile(r"(?:^|[;{}])\s*(?P<name>[A-Za-z_]\w*)\s*=\s*$")
_POINTER_OF = r"(?P<type>(?:\bconst\s+)?[\w:]+(?:\s*<[^<>;]*>)?(?:\s+const\b)?)\s*\*\s*{name}\s*[=;,)]"


def _declared_to_const(code: str, name: str) -> bool:
    """Whether the last pointer declaration of ``name`` in ``code`` points to const."""
    found = list(re.finditer(_POINTER_OF.format(name=re.escape(name)), code))
    last = found[-1] if found else None
    return last is not None and re.search(r"\bconst\b", last.group("type")) is not None
_WRITE_BEFORE = re.compile(r"(?:\+\+|--|&)\s*$")
_WRITE_AFTER = re.compile(r"\s*(?:=(?!=)|[-+*/%&|^]=|<<=|>>=|\+\+|--)")
# ``float& v = p[i];`` (or ``auto&``): the element gets a name that writes it; ``const float& v`` reads
_REFERENCE_BOUND = re.compile(r"(?:^|[;{}(,])\s*(?P<type>(?:[\w:]+(?:\s*<[^<>;]*>)?\s*)+)&\s*\w+\s*=\s*$")


def _data_ptr(rewrite: Rewrite, file: FileRewrite, torch_target: str, style: str, only_const: bool = False) -> None:
    """``.data_ptr<T>()`` -> ``.const_data_ptr<T>()`` where the code only reads through it (a
    ``const T*`` takes it, a cast to a const pointer, a parameter of the project's function
    that points to const (:func:`_taken_as`), or a pointer variable the rest of its block only
    reads as ``p[i]`` or passes there), else ``.mutable_data_ptr<T>()``; likewise ``p->data_ptr<T>()``
    where ``p`` is declared an optional tensor or a pointer to one (the stable tensor has no
    templated ``data_ptr``); an untemplated ``data_ptr()`` (a stable call) becomes
    ``const_data_ptr()`` only where a const cast or a const parameter takes it. ``only_const``:
    make the const ones only."""
    code = blank_comments_and_strings(file.text)
    edits: list[tuple[int, int, str]] = []
    constants: list[tuple[int, int, str]] = []
    declarations: Declarations | None = None
    for found in _DATA_PTR.finditer(code):
        line = _line_of(code, found.start())
        templated = found.group().endswith("<")
        start = _receiver_start(code, found.start())
        if (not templated and style == "mutable") or start is None:
            continue
        if found.group().startswith("->"):  # an optional or a pointer the file declares one (opt->data_ptr<T>())
            declarations = declarations or declarations_for(code, rewrite)
            if not templated or declarations.kind(code[start:found.start()], line) != HANDLE:
                continue
        opening = code.find("(", found.end() if templated else found.start())
        closing = None if opening < 0 else _close_paren(code, opening)
        before = code[code.rfind("\n", 0, start) + 1:start]
        after = "" if closing is None else code[closing + 1:]
        const = style != "mutable" and (_CONST_DECLARATION.search(before) is not None
                                        or (_CONST_CAST.search(before) is not None and after.lstrip().startswith(")")))
        if not const and style != "mutable" and (assigned := _ASSIGNED.search(before)) is not None:
            const = _declared_to_const(code[:start], assigned.group("name"))
        declared = _POINTER_DECLARATION.search(before) if templated and not const and style != "mutable" else None
        if declared is not None and after.lstrip().startswith(";"):
            declarations = declarations or declarations_for(code, rewrite)
            const = _only_read(code, declarations, declared.group("name"), found.start(), closing or found.end(),
                               file.callees)
        # an untemplated data_ptr() is mutable_data_ptr() already (a stable call): it changes only to const
        const = const or (style != "mutable" and _taken_as(code, start, closing, file.callees) is True)
        if (not templated or only_const) and not const:
            continue
        if not _eligible(rewrite, file, line, torch_target):
            continue
        method = found.group()[:found.group().index("data_ptr")]
        rest = found.group()[len(method):]
        edits.append((found.start(), found.end(), f"{method}{'const_' if const else 'mutable_'}{rest}"))
        if const and declared is not None and not declared.group("type").startswith("auto"):
            at = start - len(before) + declared.start("type")
            constants.append((at, at, "const "))  # T* p = x.const_data_ptr<T>() would not compile
    _apply(edits, rewrite, file, constants)


def with_pointers_decided(body: str, rewrites: RewriteSet, callees: Mapping[str, list[syntax.Parameters]],
                          torch_target: str, style: str = "const-mutable") -> str:
    """``body`` (a function's) with the data pointers the data-ptr rewrite will make const made
    const, the rest as they are: what the registration step reads to see which tensors a
    function keeps a writable pointer to, so that what migrate settles is no judgment left to
    a person (a pointer it makes mutable is no more a write than it was)."""
    file = FileRewrite(body, [True] * (body.count("\n") + 1), callees=callees)
    for rewrite in rewrites.rewrites:
        if rewrite.type == "data-ptr":
            _data_ptr(rewrite, file, torch_target, style, only_const=True)
    return file.text


def _taken_as(code: str, start: int, closing: int | None, callees: Mapping[str, list[syntax.Parameters]],
              ) -> bool | None:
    """When ``code[start:closing + 1]`` (``x.data_ptr()``) is a whole argument of a call to a
    function the project declares: True where every declaration such a call may be takes a
    pointer to const there, False where each takes a pointer to non-const (it may write),
    None otherwise (no declaration, one that disagrees, not a pointer, not a whole argument)."""
    if closing is None or not callees or not _ARGUMENT_BEFORE.search(code, max(0, start - 200), start) \
            or not _ARGUMENT_AFTER.match(code, closing + 1):
        return None
    opening = _enclosing_paren(code, start)
    callee = None if opening is None else _CALLEE.search(code, max(0, opening - 200), opening)
    declared = callees.get(callee.group("name"), []) if callee and opening is not None else []
    if not declared or opening is None:
        return None
    close = _close_paren(code, opening)
    arguments = [] if close is None else _split_arguments(code, opening, close)
    index = next((i for i, (begin, end) in enumerate(arguments) if begin <= start < end), None)
    if index is None:
        return None
    said = {parameters.pointees[index] if index < len(parameters.pointees) else None
            for parameters in declared if parameters.takes(len(arguments))}
    return said.pop() if len(said) == 1 else None


# what opens and closes a whole argument, across a macro body's line continuations
_ARGUMENT_BEFORE = re.compile(r"[(,](?:\s|\\\n)*$")
_ARGUMENT_AFTER = re.compile(r"(?:\s|\\\n)*[,)]")
# the callee's unqualified name just before a call's '(' (template arguments allowed: f<T>(...))
_CALLEE = re.compile(r"(?<![\w:])(?:[A-Za-z_]\w*\s*::\s*)*(?P<name>[A-Za-z_]\w*)\s*(?:<[^<>();]*>)?\s*$")


def _only_read(code: str, declarations: Declarations, name: str, declared_at: int, statement_end: int,
               callees: Mapping[str, list[syntax.Parameters]]) -> bool:
    """Whether every later use of the pointer ``name`` in its block reads an element
    (``name[i]`` not assigned, incremented or decremented, nor bound to a non-const reference:
    ``float& v = name[i]`` writes through ``v``) or is passed whole where the project's
    function takes a pointer to const (:func:`_taken_as`): anything else (passed on otherwise,
    kept, dereferenced, offset) may write, so the pointer stays mutable."""
    first, last = declarations.scope(declared_at)
    if first > last:
        return False
    breaks = [m.start() for m in re.finditer("\n", code)]
    end = breaks[last] if last < len(breaks) else len(code)
    reads = 0
    for use in re.finditer(rf"(?<![\w.>:])\b{re.escape(name)}\b", code[:end]):
        if use.start() <= statement_end:
            continue
        if _taken_as(code, use.start(), use.end() - 1, callees) is True:
            reads += 1
            continue
        subscript = re.match(r"\s*\[", code[use.end():])
        closing = None if subscript is None else _close(code, use.end() + subscript.end() - 1)
        written = closing is None or _WRITE_AFTER.match(code, closing + 1) is not None
        if written or _WRITE_BEFORE.search(code, max(0, use.start() - 8), use.start()):
            return False
        bound = _REFERENCE_BOUND.search(code, max(0, use.start() - 120), use.start())
        if bound is not None and not re.search(r"\bconst\b", bound.group("type")):
            return False
        reads += 1
    return reads > 0  # a pointer nothing reads says nothing either way


_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"].*$", re.M)
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*include\b")


def _directives(text: str) -> list[re.Match[str] | None]:
    """Each line's ``#include`` (the name read from the text), None where there is none, or
    where it sits in a string or a comment: DeepGEMM's JIT kernels hold ``#include <...>``
    lines in raw strings, and the stable headers went after those, below their first use."""
    code = blank_comments_and_strings(text).split("\n")
    return [_INCLUDE.match(line) if _DIRECTIVE.match(blank) else None
            for line, blank in zip(text.split("\n"), code, strict=True)]


def rewrite_includes(file: FileRewrite, needed: set[str], unstable: tuple[str, ...], keep_unstable: bool,
                     local: tuple[str, ...] = (), replaced: dict[str, str] | None = None,
                     short: bool = False) -> None:
    """Put the stable headers ``needed`` (then the quoted ``local`` ones, e.g. the helper
    header) where the file's first unstable include was, else after its last include, else at
    the top, and, unless ``keep_unstable`` (uses remain that need them), drop its unstable
    includes. Only an include outside any ``#if`` the file's other includes are outside of
    is such a place (a header guard is around them all): what every build of the file needs
    does not go behind a condition. A header of ``replaced`` (a CUDA one, often behind an
    ``#if``) is replaced on its own line by what the map names, or dropped. Lines that name
    none stay as they are. ``short``: a C++ source (not a header, not CUDA) then spells the
    stable names short (:func:`use_short_names`)."""
    try:
        _rewrite_includes(file, needed, unstable, keep_unstable, local, replaced)
    finally:
        if short:
            use_short_names(file)


# The stable names people spell short in a C++ source after a using-declaration (QuTLASS's
# bindings.cpp, FlashAttention-2's flash_api*.cpp as their authors migrated them).
SHORT_NAMES = {"torch::stable::Tensor": "Tensor", "torch::headeronly::ScalarType": "ScalarType"}
SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".C")  # where short names go: not headers, not CUDA units
_USING_NAMESPACE = re.compile(r"\busing\s+namespace\s+(?:at|c10|torch)\b")


def use_short_names(file: FileRewrite) -> None:
    """``torch::stable::Tensor`` and ``torch::headeronly::ScalarType`` spelled ``Tensor`` and
    ``ScalarType`` after ``using`` declarations put below the file's last top-level include,
    where the file spells the long name at least once and neither spells the short one itself
    (its own type, another namespace's) nor opens a LibTorch namespace (``using namespace
    at``): then the short name can only mean the stable one."""
    code = blank_comments_and_strings(file.text)
    if _USING_NAMESPACE.search(code):
        return
    chosen: list[tuple[str, str]] = []
    for long, short in SHORT_NAMES.items():
        uses = [m.start() for m in re.finditer(rf"(?<![\w:]){re.escape(long)}\b", code)]
        declared = re.search(rf"\busing\s+{re.escape(long)}\s*;", code) is not None
        bare = re.search(rf"(?<![\w:/]){short}\b", code) is not None
        if uses and (declared or not bare):
            chosen.append((long, short))
    if not chosen:
        return
    lines = code.split("\n")
    depths = _conditional_depths(lines)
    top = _leading([i for i, line in enumerate(lines) if _INCLUDE.match(line) and depths[i] == min(depths)], lines)
    where = max(top) + 1 if top else 0
    text = file.text
    for long, short in chosen:
        pattern = re.compile(rf"(?<![\w:]){re.escape(long)}\b")
        code = blank_comments_and_strings(text)
        pieces, last = [], 0
        for found in pattern.finditer(code):
            if re.search(r"\busing\s+$", code[max(0, found.start() - 12):found.start()]):
                continue  # its own using-declaration
            pieces += [text[last:found.start()], short]
            last = found.end()
            file.made["short-name"] += 1
        text = "".join(pieces) + text[last:]
    added = [f"using {long};" for long, _ in chosen if f"using {long};" not in text]
    new_lines = text.split("\n")
    file.text = "\n".join([*new_lines[:where], *added, *new_lines[where:]])
    file.active = [*file.active[:where], *([True] * len(added)), *file.active[where:]]


def _first_code_line(code_lines: list[str]) -> int:
    """The index of the first line (comments and strings blanked) that is neither blank nor part
    of a preprocessor directive (a directive continues over a trailing backslash)."""
    continued = False
    for index, line in enumerate(code_lines):
        stripped = line.strip()
        if continued or stripped.startswith("#"):
            continued = stripped.endswith("\\")
            continue
        if stripped:
            return index
    return len(code_lines)


def _leading(includes: list[int], code_lines: list[str]) -> list[int]:
    """Of the include lines, those before the file's first line of code, where there are any:
    an include after code (a template's ``.inl`` at the end of a header, a module's includes
    after the functions) is no place for what the code above it needs."""
    first = _first_code_line(code_lines)
    return [index for index in includes if index < first] or includes


def _rewrite_includes(file: FileRewrite, needed: set[str], unstable: tuple[str, ...], keep_unstable: bool,
                      local: tuple[str, ...], replaced: dict[str, str] | None) -> None:
    if replaced and not keep_unstable:
        _replace_includes(file, replaced)
    lines = file.text.split("\n")
    flags = list(file.active)
    found = _directives(file.text)
    present = {m.group(1) for m in found if m}
    missing = sorted(needed - present)
    quoted = [name for name in local if name.strip('"') not in present]
    unstable_at = [i for i, m in enumerate(found) if m and m.group(1) in unstable and flags[i]]
    if not missing and not quoted and (keep_unstable or not unstable_at):
        return
    includes = [f"#include <{name}>" for name in missing] + [f"#include {name}" for name in quoted]
    drop = set(unstable_at) if not keep_unstable else set()
    code_lines = blank_comments_and_strings(file.text).split("\n")
    depths = _conditional_depths(code_lines)
    included = [i for i, m in enumerate(found) if flags[i] and m]
    outer = min((depths[i] for i in included), default=0)
    if drop and depths[min(drop)] == outer and min(drop) < _first_code_line(code_lines):
        where = min(drop)  # the first unstable include gives its line
    else:
        kept = _leading([i for i in included if depths[i] == outer and i not in drop], code_lines)
        where = max(kept) + 1 if kept else 0
    dropped_includes = len(drop)
    drop |= _emptied_blocks(lines, drop)
    new_lines: list[str] = []
    new_flags: list[bool] = []
    for index, (line, flag) in enumerate([*zip(lines, flags, strict=True), ("", False)]):
        if index == where:
            new_lines += includes
            new_flags += [True] * len(includes)
        if index == len(lines):
            break
        if index not in drop:
            new_lines.append(line)
            new_flags.append(flag)
    if dropped_includes:
        file.made["include"] += dropped_includes
    file.made["stable-include"] += len(includes)
    file.text = "\n".join(new_lines)
    file.active = new_flags


_CONDITIONAL = re.compile(r"^\s*#\s*(?P<word>if|ifdef|ifndef|endif)\b")


def _emptied_blocks(lines: list[str], drop: set[int]) -> set[int]:
    """The ``#if``/``#endif`` pairs (and one of two blank lines around them) that ``drop``
    leaves empty: QuTLASS's ``#ifndef QUTLASS_DISABLE_PYBIND`` held only <torch/extension.h>,
    and an empty conditional is noise in the patch a maintainer reads."""
    more: set[int] = set()
    for index in sorted(drop):
        above = index - 1
        while above >= 0 and above in drop:
            above -= 1
        below = index + 1
        while below < len(lines) and below in drop:
            below += 1
        opening = _CONDITIONAL.match(lines[above]) if above >= 0 else None
        closing = _CONDITIONAL.match(lines[below]) if below < len(lines) else None
        if opening is None or closing is None or opening["word"] == "endif" or closing["word"] != "endif":
            continue
        more |= {above, below}
        if above > 0 and below + 1 < len(lines) and not lines[above - 1].strip() and not lines[below + 1].strip():
            more.add(below + 1)
    return more


def _conditional_depths(code: list[str]) -> list[int]:
    """How many ``#if`` blocks hold each line (an ``#if`` line itself is outside its block)."""
    depths = []
    depth = 0
    for line in code:
        found = _CONDITIONAL.match(line)
        if found is not None and found.group("word") == "endif":
            depth = max(0, depth - 1)
        depths.append(depth)
        if found is not None and found.group("word") != "endif":
            depth += 1
    return depths


def _replace_includes(file: FileRewrite, replaced: dict[str, str]) -> None:
    """Each compiled ``#include`` of a ``replaced`` header becomes the includes of what takes
    its place (names separated by spaces; ``A|B``: A, unless the file includes A or B), on its
    own lines (so inside the same ``#if``), but for those already included; when none is left,
    the line goes."""
    lines = file.text.split("\n")
    flags = list(file.active)
    directives = _directives(file.text)  # the lines from the current one on change, those before it do not
    present = {m.group(1) for m in directives if m}
    for index in reversed(range(len(lines))):
        found = directives[index]
        if found is None or found.group(1) not in replaced or not flags[index]:
            continue
        kept = [name for name, *alike in (token.split("|") for token in replaced[found.group(1)].split())
                if not {name, *alike} & present and _still_needed(name, file.text, lines[index + 1:])]
        file.made["include"] += 1
        if kept:
            lines[index:index + 1] = [f"#include <{name}>" for name in kept]
            flags[index:index + 1] = [flags[index]] * len(kept)
            present.update(kept)
        else:
            del lines[index]
            del flags[index]
    file.text = "\n".join(lines)
    file.active = flags


# A replacement header only the file's own code could need, and what its use looks like: FA2's
# flash_api_torch_lib.cpp included c10/cuda/CUDAStream.h last and calls no CUDA runtime function.
_USED_BY = {"cuda_runtime.h": re.compile(r"\bcuda[A-Z]\w*|\bCU[a-z]\w*|\bdim3\b")}


def _still_needed(name: str, text: str, after: list[str]) -> bool:
    """Whether the replacement header ``name`` goes in: the file uses what it declares, or a
    project header included after the line may (what it read through the old one)."""
    use = _USED_BY.get(name)
    if use is None or use.search(blank_comments_and_strings(text)):
        return True
    return any(re.match(r'\s*#\s*include\s*"', line) for line in after)


def as_json(declined: Declined, path: str) -> dict[str, Any]:
    return {"at": f"{path}:{declined.line}", "rewrite": declined.rewrite, "reason": declined.reason}


# Tensors made from ``TensorOptions`` that name no tensor to allocate like (rewrite type
# ``options-call``): ``from_blob(data, sizes, [strides,] options)``, ``empty_strided(sizes,
# strides, options)``, ``empty_like(t, options)`` and an ``empty(sizes, options)`` that
# ``new_empty`` cannot take (its device is ``kCUDA``, not a tensor's). The options are read into
# a dtype and a device. The dtype is a ScalarType the file spells, or a ``kName`` constant it does
# not declare (another header's; the compile proof checks it); the device is ``A.device()`` of a
# tensor, ``kCUDA``, or none: the CPU, as in ATen. Else the call is declined at its line. What
# each becomes:
#
# - ``torch::stable::from_blob(data, sizes, strides, device, dtype)``; without strides, the
#   contiguous ones from the helper header's ``assemble_stable::contiguous_strides(sizes)``;
# - ``torch::stable::empty(sizes, dtype, std::nullopt, device)``;
# - ``aten::empty_strided``, and ``aten::empty_like`` with options, through the dispatcher
#   (``assemble_stable::call_aten``): torch::stable has no function for them.

_NAMESPACE = r"(?:(?:at|torch|c10|torch::headeronly)::)?"
_CUDA = re.compile(rf"{_NAMESPACE}(?:kCUDA|DeviceType::CUDA|Device\s*\(\s*{_NAMESPACE}(?:kCUDA|DeviceType::CUDA)\s*\))")
_STABLE_CUDA = "torch::stable::Device(torch::headeronly::DeviceType::CUDA)"  # no index: the current device's
_STABLE_CPU = "torch::stable::Device(torch::headeronly::DeviceType::CPU)"  # ATen's default when none is given
_MADE = re.compile(r"(?:(?:at|torch|c10)::)?TensorOptions\s*\(\s*\)")
_DTYPE_CALL = re.compile(r"(?:(?:at|torch)::)?(?P<name>dtype|device)\s*\(")
# a constant another file declares (DeepGEMM's kPackedFP4): taken as a ScalarType, which the proof checks
_CONSTANT = re.compile(r"(?:[A-Za-z_]\w*::)*k[A-Z]\w*")
_NOT_TYPES = frozenset({"return", "case", "else", "throw", "co_return", "goto", "delete", "new", "sizeof"})


def _declared_here(code: str, name: str) -> bool:
    """Whether the code declares ``name`` (a type, or a type and ``*``/``&``, before it)."""
    for found in re.finditer(rf"(?<![\w:])(?P<type>[A-Za-z_][\w:]*(?:\s*<[^;{{}}()]*>)?)[\s*&]+{re.escape(name)}"
                             r"\s*(?=[=;,)\[{(]|$)", code, re.M):
        if found.group("type") not in _NOT_TYPES:
            return True
    return False


_PLAIN_SIZES = re.compile(r"[^();]*")  # no call: a list that can be read twice (its strides are computed from it)


_YOURSELF = {"from_blob": "torch::stable::from_blob", "empty": "torch::stable::empty",
             "empty_strided": "aten::empty_strided through torch_call_dispatcher",
             "empty_like": "aten::empty_like through torch_call_dispatcher"}
_TAKEN_FROM = ("new-empty", "empty-like")  # the rewrites that declined a call this one writes


def _options(code: str, text: str, start: int, end: int, declarations: Declarations, line: int,
             blob: bool) -> tuple[str, str] | str:
    """The dtype and device (as C++ text) of the options between ``start`` and ``end``, or why
    they cannot be read. No device is the CPU, as in ATen; ``kCUDA`` is the current device for
    an allocation, but not for ``from_blob`` (``blob``), where ATen asked the pointer which one,
    and torch::stable::from_blob takes the device as given."""
    left, right = _trimmed(code, start, end)
    links: dict[str, tuple[int, int]] = {}
    dtype = device = ""
    base = _OPTIONS_OF.match(code, left)
    if base is not None:
        tensor = base.group("tensor")
        if declarations.kind(tensor, line) != TENSOR:
            return f"{tensor.strip()} is not declared a tensor here"
        dtype, device, position = f"{tensor}.scalar_type()", f"{tensor}.device()", base.end()
    elif (made := _MADE.match(code, left)) is not None:
        position = made.end()
    elif _DTYPE_CALL.match(code, left):
        position = left  # dtype(X).device(D): the first link is the call itself
    else:
        return "the options are not A.options(), TensorOptions() or dtype(X) with .dtype(X) and .device(D)"
    while position < right:
        link = _LINK.match(code, position) or _DTYPE_CALL.match(code, position)
        closing = None if link is None else matching_close(code, link.end() - 1)
        name = "" if link is None else link.group("name")
        if link is None or closing is None or closing > right or name in links or name not in ("dtype", "device"):
            return "the options set more than .dtype(X) and .device(D)"
        links[name] = _trimmed(code, link.end(), closing)
        position = closing + 1
    if "dtype" in links:
        dtype = text[slice(*links["dtype"])]
        spelled = code[slice(*links["dtype"])].strip()
        elsewhere = _CONSTANT.fullmatch(spelled) is not None and not _declared_here(code, spelled.split("::")[-1])
        if not (declarations.is_scalar_type(spelled, line) or elsewhere):
            return f"the dtype {dtype} is not a ScalarType the file spells"
    if "device" in links:
        spelled = code[slice(*links["device"])]
        of = _DEVICE_OF.fullmatch(spelled)
        if of is not None and declarations.kind(of.group("tensor"), line) == TENSOR:
            device = text[slice(*links["device"])]
        elif _CUDA.fullmatch(spelled.strip()) and not blob:
            device = _STABLE_CUDA
        else:
            return (f"the device {spelled.strip()} is not A.device() of a tensor"
                    + ("" if blob else " or kCUDA") + " (from_blob: the tensor the pointer is of)" * blob)
    if not dtype:
        return "the options give no dtype: pass one"
    return dtype, device or _STABLE_CPU


def _options_call(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
    """The module's calls (group 1 of ``rewrite.pattern`` names the function) rewritten, or
    declined at their line; an ``empty`` that ``new_empty`` declined and this rewrites loses
    that decline."""
    assert rewrite.pattern is not None
    code = blank_comments_and_strings(file.text)
    declarations: Declarations | None = None
    edits: list[tuple[int, int, str]] = []
    for found, line, opening, closing in calls_of(rewrite.pattern, code, file):
        declarations = declarations or declarations_for(code, rewrite)
        function = found.group(1)
        arguments = _split_arguments(code, opening, closing)
        wanted = {"from_blob": (3, 4), "empty_strided": (3,), "empty": (2,), "empty_like": (2,)}[function]
        read: tuple[str, str] | str = (f"takes {len(arguments)} arguments here, not {' or '.join(map(str, wanted))} "
                                       "(the last one its options)")
        if len(arguments) in wanted:
            read = _options(code, file.text, *arguments[-1], declarations, line, function == "from_blob")
        elif function != "from_blob":
            continue  # another form (empty_like(x), empty(sizes)): another rewrite's
        values = [file.text[start:end] for start, end in arguments[:-1]]
        if isinstance(read, tuple) and function == "from_blob" and len(values) == 2 \
                and not _PLAIN_SIZES.fullmatch(values[1]):
            read = "the sizes hold a call: name them in a variable, so that the strides can be computed from them"
        if isinstance(read, str):
            file.declined.append(Declined(line + 1, rewrite.id, f"{function}: {read}: call {_YOURSELF[function]} "
                                          "yourself"))
            continue
        if not _eligible(rewrite, file, line, torch_target):
            continue
        dtype, device = read
        # the arguments keep what separated them (a line break and its indent): the lines of the
        # step's declines and active lines hold; the options' own breaks go before the ')'
        separators = [file.text[arguments[index - 1][1]:arguments[index][0]] for index in range(1, len(arguments))]
        options = file.text[slice(*arguments[-1])]
        lost = "\n" * (options.count("\n") - dtype.count("\n") - device.count("\n"))
        if function == "from_blob":
            made = [*values, *([] if len(values) == 3 else [f"assemble_stable::contiguous_strides({values[1]})"])]
            file.helpers.update(() if len(values) == 3 else ("strides",))
            made += [device, dtype]
            name = "torch::stable::from_blob"
        elif function == "empty":
            made, name = [values[0], dtype, "std::nullopt", device], "torch::stable::empty"
        elif function == "empty_like":  # torch::stable::empty_like takes no options: aten::empty_like
            file.helpers.add("dispatcher")
            made = ['"aten::empty_like"', '""', values[0], f"std::optional<torch::headeronly::ScalarType>({dtype})",
                    "std::nullopt", f"std::optional<torch::stable::Device>({device})", "std::nullopt", "std::nullopt"]
            name = f"{_CALL_ATEN}<torch::stable::Tensor>"
            separators = [", ", ", ", *separators]
        else:
            from assembler.migration.dispatcher import vector_of

            file.helpers.add("dispatcher")
            made = ['"aten::empty_strided"', '""', vector_of(values[0]), vector_of(values[1]),
                    f"std::optional<torch::headeronly::ScalarType>({dtype})", "std::nullopt",
                    f"std::optional<torch::stable::Device>({device})", "std::nullopt"]
            name = f"{_CALL_ATEN}<torch::stable::Tensor>"
            separators = [", ", ", ", *separators]  # the op's name and overload come first
        kept = separators[:len(made) - 1]
        joined = made[0] + "".join(sep + text for sep, text in zip([*kept, *[", "] * len(made)], made[1:],
                                                                     strict=False))
        edits.append((found.start(), closing + 1, f"{name}({joined}{lost})"))
        file.declined = [d for d in file.declined if not (d.line == line + 1 and d.rewrite in _TAKEN_FROM)]
    _apply(edits, rewrite, file)
