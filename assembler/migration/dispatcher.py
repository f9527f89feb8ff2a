"""The generic way round (issue #27 item 6): an ATen operator or Tensor method that torch::stable
has no function for is called through the dispatcher, ``torch_call_dispatcher`` (the C shim,
torch 2.10), by the helper header's ``assemble_stable::call_aten`` (migration/helpers.py).

The stack is built from the operator's schema as the build torch's registry gives it
(``torch._C._jit_get_schemas_for_operator``), asked once per migrate for every operator the
files name and kept in the check cache (``<cache>/checks/aten-schemas-<torch>.json``), so a
later migrate against the same torch asks nothing. Every argument the schema has goes on the
stack in its order: the call's own, then the defaults written out (``None`` as std::nullopt);
an int is cast to int64_t and a float to double, as the stack holds them, and a list of ints
(``int[]``, ``SymInt[2]``) is passed as a ``std::vector<int64_t>`` (a list on the stack from
torch 2.10). What the schema says that has no plain C++ form here (a Scalar, a list of another
type, a str, several returns) is declined with its reason, never guessed."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from assembler.migration.lexer import split_top_level

HELPER_FUNCTION = "assemble_stable::call_aten"
_CACHE_NAME = "aten-schemas-{torch}.json"

# schema type -> the C++ type an argument is cast to ("": passed as it is), for the types the
# stack conversions (torch/csrc/stable/stableivalue_conversions.h) take
_ARGUMENT = {"Tensor": "", "int": "int64_t", "SymInt": "int64_t", "float": "double", "bool": "bool", "ScalarType": "",
             "Device": "", "Tensor?": "std::optional<torch::stable::Tensor>", "int?": "std::optional<int64_t>",
             "SymInt?": "std::optional<int64_t>", "float?": "std::optional<double>", "bool?": "std::optional<bool>",
             "ScalarType?": "std::optional<torch::headeronly::ScalarType>",
             "Device?": "std::optional<torch::stable::Device>"}
# schema return type -> the C++ type the first stack slot is read back as
_RETURN = {"Tensor": "torch::stable::Tensor", "bool": "bool", "int": "int64_t", "SymInt": "int64_t", "float": "double",
           "ScalarType": "torch::headeronly::ScalarType"}
_DEFAULT = {"None": "std::nullopt", "True": "true", "False": "false"}
_ALIAS = re.compile(r"\([a-z]!?\)")  # Tensor(a!) -> Tensor
_INT_LIST = re.compile(r"(?:int|SymInt)\[\d*\]")  # int[], SymInt[], int[1]: a std::vector<int64_t> on the stack
_VECTOR = "std::vector<int64_t>"


@dataclass(frozen=True)
class Argument:
    type: str  # alias annotations dropped: Tensor, Tensor?, int, ScalarType?, int[1], ...
    name: str
    default: str | None  # the schema's text, None when it has none
    keyword: bool  # after the schema's '*'


@dataclass(frozen=True)
class Schema:
    name: str  # aten::is_pinned
    overload: str  # "" or e.g. "int"
    arguments: tuple[Argument, ...]
    returns: tuple[str, ...]

    @property
    def positional(self) -> int:
        return sum(1 for argument in self.arguments if not argument.keyword)


def _split(text: str) -> list[str]:
    return split_top_level(text, "([", ")]")


def parse(schema: str) -> Schema | None:
    """A schema string as torch prints it; None when it is not one."""
    match = re.fullmatch(r"\s*(?P<name>[\w:]+)(?:\.(?P<overload>\w+))?\((?P<args>.*)\)\s*->\s*(?P<returns>.+?)\s*",
                         schema, re.S)
    if match is None:
        return None
    arguments, keyword = [], False
    for part in _split(match.group("args")):
        if part == "*":
            keyword = True
            continue
        declared, _, default = part.partition("=")
        pieces = declared.rsplit(None, 1)
        if len(pieces) != 2:
            return None
        arguments.append(Argument(_ALIAS.sub("", pieces[0]).strip(), pieces[1], default.strip() if default else None,
                                  keyword))
    returns_text = match.group("returns").strip()
    if returns_text.startswith("(") and returns_text.endswith(")"):
        returns_text = returns_text[1:-1]
    returns = tuple(_ALIAS.sub("", r).split()[0] for r in _split(returns_text) if r)
    return Schema(match.group("name"), match.group("overload") or "", tuple(arguments), returns)


@dataclass(frozen=True)
class Call:
    """What one call becomes, or why it does not."""

    text: str = ""
    reason: str = ""


def _cast(type_: str) -> str | None:
    """The C++ type a value of schema type ``type_`` is cast to ("" none); None: no plain form."""
    return _VECTOR if _INT_LIST.fullmatch(type_) else _ARGUMENT.get(type_)


def _default(argument: Argument) -> str | None:
    assert argument.default is not None
    if argument.default in _DEFAULT:
        return _DEFAULT[argument.default]
    if _INT_LIST.fullmatch(argument.type):
        items = re.fullmatch(r"\[\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\]", argument.default)
        return None if items is None else f"{_VECTOR}{{{items.group(1) or ''}}}"
    cast = _ARGUMENT.get(argument.type)
    if cast is None or not re.fullmatch(r"-?\d+(?:\.\d*)?(?:e-?\d+)?", argument.default):
        return None
    return f"static_cast<{cast}>({argument.default})" if cast else argument.default


def _fits(schema: Schema, given: int, method: bool) -> bool:
    """Whether ``given`` positional values (the receiver counted) can be this schema's call."""
    if method and (not schema.arguments or schema.arguments[0].type != "Tensor" or schema.arguments[0].name != "self"):
        return False
    if given > schema.positional:
        return False
    return all(argument.default is not None for argument in schema.arguments[given:])


_SCALAR_TYPE_VALUE = re.compile(r"(?:(?:torch::headeronly|c10|at)::)?ScalarType::\w+")
_NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[fFlLuU]*")


def _spelled_as(argument: Argument, value: str) -> bool:
    """Whether ``value`` can be of the argument's type as it is spelled: a braced list only for
    a list, a ScalarType enumerator only for a ScalarType, a number never for a list (so that
    view(sizes) and view(dtype), or squeeze(dim) and squeeze(dims), are told apart)."""
    value = value.strip()
    listed = argument.type.rstrip("?").endswith("]")
    if value.startswith("{") and value.endswith("}"):
        return listed
    if _SCALAR_TYPE_VALUE.fullmatch(value):
        return argument.type.rstrip("?") == "ScalarType"
    return not (listed and _NUMBER.fullmatch(value))


def _usable(schema: Schema, given: int) -> str:
    """Why this schema cannot be written out here ("" when it can)."""
    for argument in schema.arguments[:given]:
        if _cast(argument.type) is None:
            return f"its argument {argument.name} is a {argument.type}, which has no plain stack form here"
    for argument in schema.arguments[given:]:
        if _default(argument) is None:
            return f"the default of {argument.name} ({argument.type} {argument.default}) has no plain stack form here"
    if len(schema.returns) > 1:
        return f"it returns {len(schema.returns)} values"
    if schema.returns and schema.returns[0] not in _RETURN:
        return f"it returns a {schema.returns[0]}, which has no plain stack form here"
    return ""


def vector_of(value: str) -> str:
    """``value`` (a list of ints as the call spells it) as the std::vector<int64_t> the stack
    takes: a braced list names the vector in place; anything else is copied by its iterators."""
    value = value.strip()
    if value.startswith("{") and value.endswith("}"):
        return f"{_VECTOR}{value}"
    return f"{_VECTOR}(({value}).begin(), ({value}).end())"


def call(op: str, schemas: tuple[str, ...], values: list[str], method: bool) -> Call:
    """``op`` (aten::name) called with ``values`` (the receiver first for a method) through
    ``call_aten``, with the one overload of ``schemas`` that takes them; else the reason."""
    parsed = [s for s in (parse(text) for text in schemas) if s is not None]
    if not parsed:
        return Call(reason=f"the build torch has no operator {op}")
    fitting = [s for s in parsed if _fits(s, len(values), method)
               and all(_spelled_as(argument, value) for argument, value in zip(s.arguments, values, strict=False))]
    usable = [s for s in fitting if not _usable(s, len(values))]
    if not usable:
        why = _usable(fitting[0], len(values)) if fitting else f"no overload of {op} takes {len(values)} arguments"
        return Call(reason=f"{why}: call torch_call_dispatcher(\"{op}\", ...) with a stack of your own")
    if len(usable) > 1:
        names = ", ".join(f"{op}.{s.overload}" if s.overload else op for s in usable)
        return Call(reason=f"the arguments fit several overloads ({names}): call torch_call_dispatcher with the one "
                           "meant")
    schema = usable[0]
    stack = []
    for index, argument in enumerate(schema.arguments):
        if index < len(values):
            value, cast = values[index], _cast(argument.type)
            if cast == _VECTOR:
                stack.append(vector_of(value))
                continue
            plain = not cast or (cast == "bool" and value in ("true", "false"))
            stack.append(value if plain else f"static_cast<{cast}>({value})")
        else:
            stack.append(str(_default(argument)))
    result = _RETURN[schema.returns[0]] if schema.returns else "void"
    joined = ", ".join([f'"{op}"', f'"{schema.overload}"', *stack])
    return Call(f"{HELPER_FUNCTION}<{result}>({joined})")


_ASK = """import json, sys
import torch
out = {}
for op in json.load(sys.stdin):
    out[op] = [str(s) for s in torch._C._jit_get_schemas_for_operator(op)]
print(json.dumps(out))
"""


def schemas_for(python: Path | None, torch: str, ops: set[str], cache: Path | None) -> dict[str, tuple[str, ...]]:
    """Each of ``ops``' schemas in the build torch's registry (an op it lacks: none). What the
    cache file in ``cache`` holds for this torch is not asked again; what is asked is added to
    it. Without a build torch (``python`` None) or when it cannot be asked: {} (the rewrite is
    then declined at each call, saying so)."""
    path = None if cache is None else cache / _CACHE_NAME.format(torch=re.sub(r"[^\w.+-]", "_", torch))
    known: dict[str, list[str]] = {}
    if path is not None and path.is_file():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
            known = {str(k): [str(s) for s in v] for k, v in loaded.items()} if isinstance(loaded, dict) else {}
        except (OSError, ValueError, AttributeError, TypeError):
            known = {}
    missing = sorted(ops - set(known))
    if missing and python is not None:
        result = subprocess.run([str(python), "-c", _ASK], input=json.dumps(missing), capture_output=True, text=True,
                                timeout=300, check=False)
        if result.returncode == 0 and result.stdout.strip():
            known.update(json.loads(result.stdout.strip().splitlines()[-1]))
            if path is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n", encoding="utf-8")
                except OSError:
                    pass  # a read-only cache: the answer stands, it is just not kept
    return {op: tuple(known[op]) for op in ops if op in known}
