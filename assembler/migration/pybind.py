"""The registration step for pybind11 modules: ``PYBIND11_MODULE(name, m) { m.def("op", &fn,
py::arg("x"), ...); }`` becomes a ``STABLE_TORCH_LIBRARY`` fragment with each operator's
schema made from the C++ signature (``const int&`` -> ``int``, a ``std::tuple`` parameter split
into one argument per element, through a generated wrapper; a tensor taken by non-const
reference is written to, so it is ``Tensor(a!)``, each such argument its own alias set), a
``STABLE_TORCH_LIBRARY_IMPL``
with ``TORCH_BOX``, and, for a setuptools build, a limited-API ``PyInit`` for the module
Python imports. Preprocessor lines inside the module body are carried over around the
registrations they guarded. Every schema is parsed by the build torch
(``torch._C.parse_schema``) before anything is written; a module with a binding that cannot be
converted is left whole and reported."""

from __future__ import annotations

import json
import keyword
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.migration.assess import DECLARATION_HEAD
from assembler.migration.lexer import blank_comments_and_strings, top_level_spans

GENERATED_MARK = "Registered with the Stable ABI by `assemble migrate`"  # what review's trailer looks for
_MODULE = re.compile(r"\bPYBIND11_MODULE\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*\{")
_TENSOR = r"(?:at|torch)::Tensor"
_OPTIONAL_TENSOR = re.compile(rf"^(?:std|c10)::optional\s*<\s*{_TENSOR}\s*>$")
_CALLABLE = re.compile(r"\bstd::function\s*<")
_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fFlL]?$")
_SCALAR_TYPE = re.compile(r"(?:(?:at|c10|torch)::ScalarType|torch::Dtype|torch::headeronly::ScalarType)")
# a ScalarType default as written in C++ (torch::kFloat32, at::ScalarType::Half) -> the dtype name a schema and
# Python both spell (torch._C.parse_schema reads "ScalarType dtype=float32")
_DTYPES = {"Float": "float32", "Float32": "float32", "Double": "float64", "Float64": "float64", "Half": "float16",
           "Float16": "float16", "BFloat16": "bfloat16", "Int": "int32", "Int32": "int32", "Long": "int64",
           "Int64": "int64", "Short": "int16", "Int16": "int16", "Char": "int8", "Int8": "int8", "Byte": "uint8",
           "UInt8": "uint8", "Bool": "bool", "Float8_e4m3fn": "float8_e4m3fn", "Float8_e5m2": "float8_e5m2"}
_DTYPE_DEFAULT = re.compile(r"(?:(?:at|c10|torch)::(?:ScalarType::|k)|torch::headeronly::ScalarType::)(\w+)")


class Unconvertible(Exception):
    """A binding this step cannot convert; the message says why."""


@dataclass
class Binding:
    name: str
    function: str  # as written after &, e.g. normkit::rms_norm
    args: list[tuple[str, str | None]]  # py::arg names and default texts
    guard: list[str] = field(default_factory=list)  # preprocessor lines open around it
    cast: tuple[str, list[str]] | None = None  # a static_cast to the overload's pointer type: (returns, parameters)
    body: str | None = None  # a lambda's body: what it writes


@dataclass
class Operator:
    schema: str
    impl: str  # what TORCH_BOX boxes
    wrapper: str | None = None
    guard: list[str] = field(default_factory=list)
    python_params: list[str] = field(default_factory=list)  # the pybind11 function's, as a Python def's
    python_args: list[str] = field(default_factory=list)  # what its forwarder passes to torch.ops, a tuple as *name
    unsure: str | None = None  # why the schema may not say every argument the function writes: for a person
    marked: str | None = None  # the arguments marked written for a non-const data pointer kept (a comment above m.def)


def _base(cxx_type: str) -> tuple[str, bool]:
    """A parameter type without const and &, and whether it was a reference."""
    text = " ".join(cxx_type.replace("&", " & ").split())
    reference = "&" in text
    text = text.replace("&", "").replace("const ", "").replace(" const", "").strip()
    return re.sub(r"\s*([<>,])\s*", r"\1", text).replace(",", ", "), reference


def _split_template(text: str) -> list[str]:
    inner = text[text.index("<") + 1:text.rindex(">")]
    parts, depth, current = [], 0, ""
    for char in inner:
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return parts


def _scalar(base: str, reference: bool) -> tuple[str, str, bool]:
    """(schema type, wrapper parameter type, needs a wrapper)"""
    if re.fullmatch(_TENSOR, base):
        return "Tensor", "const at::Tensor&", False
    if _OPTIONAL_TENSOR.match(base):
        return "Tensor?", "const std::optional<at::Tensor>&", False
    if re.fullmatch(rf"std::vector<{_TENSOR}>", base):
        return "Tensor[]", "const std::vector<at::Tensor>&", False
    if base == "double":
        return "float", "double", reference
    if base == "float":
        return "float", "double", True
    if base in ("int64_t", "std::int64_t"):
        return "int", "int64_t", reference
    if base in ("int", "int32_t", "long", "size_t", "std::size_t", "long long", "unsigned", "uint32_t"):
        return "int", "int64_t", True
    if base == "bool":
        return "bool", "bool", reference
    if base in ("std::string", "std::string_view", "c10::string_view"):  # TORCH_BOX unboxes str to std::string
        return "str", "std::string", base == "c10::string_view"
    if _SCALAR_TYPE.fullmatch(base):  # TORCH_BOX boxes torch::headeronly::ScalarType, which at::ScalarType becomes
        return "ScalarType", "at::ScalarType", reference
    if re.fullmatch(r"(?:at|c10|torch)::IntArrayRef", base):  # a view of the caller's list: the wrapper owns it
        return "int[]", "std::vector<int64_t>", True
    if (vector := re.fullmatch(r"std::vector<(.+)>", base)) is not None:
        element, boxed, converts = _scalar(vector.group(1), False)
        if element in ("int", "float", "bool"):
            return f"{element}[]", f"std::vector<{boxed}>", converts or reference
    if _CALLABLE.search(base):
        raise Unconvertible(f"parameter type {base} is a std::function, and a schema has no callable type")
    if re.match(r"(?:std|c10|boost)::variant<", base):
        raise Unconvertible(f"parameter type {base} has no schema form (a schema argument has one type)")
    raise Unconvertible(f"parameter type {base} has no schema type this step knows")


def _converted(base: str, name: str) -> str:
    """``name``, of the type the wrapper takes, as the ``base`` type the function takes."""
    if base.startswith("std::vector<"):
        return f"{base}({name}.begin(), {name}.end())"
    return f"static_cast<{base}>({name})"


def _tuple_element(base: str) -> tuple[str, str] | None:
    """A returned tuple element's (schema type, boxed C++ type), or None when it has none."""
    if re.fullmatch(_TENSOR, base):
        return "Tensor", "at::Tensor"
    if _OPTIONAL_TENSOR.match(base):
        return "Tensor?", "std::optional<at::Tensor>"
    try:
        schema, boxed, _ = _scalar(base, False)
    except Unconvertible:
        return None
    boxed = boxed.removeprefix("const ").removesuffix("&")
    return (schema, boxed) if schema in ("int", "float", "bool", "str", "ScalarType", "Tensor[]", "int[]") else None


def _default(text: str | None) -> str:
    if text is None:
        return ""
    value = text.strip()
    if value in ("true", "false"):
        return "=" + value.capitalize()
    if value in ("py::none()", "std::nullopt", "c10::nullopt"):
        return "=None"
    if _NUMBER.match(value):
        return "=" + value.rstrip("fFlL")
    if (dtype := _DTYPE_DEFAULT.fullmatch(value)) is not None and dtype.group(1) in _DTYPES:
        return "=" + _DTYPES[dtype.group(1)]
    if re.fullmatch(r'"[^"\\\']*"', value):  # a string literal, quoted as the C string of m.def needs no escape
        return f"='{value[1:-1]}'"
    raise Unconvertible(f"default {value!r} is not a literal")


def _alias(index: int) -> str:
    """The alias set of the ``index``-th mutated argument: a, b, ..., z, aa, ab, ..."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("a") + rest) + letters
    return letters


_VIEWS = r"(?:reshape|view|flatten|transpose|t|select|narrow|slice|squeeze|unsqueeze|permute|expand|as_strided|value)"


def _aliases(body: str, name: str) -> list[str]:
    """``name`` and the locals that share its storage: ``auto out_3d = out.reshape(...)``,
    ``auto& fs = final_state.value()``, ``auto& t = *opt`` (one level, as written)."""
    n = re.escape(name)
    found = re.findall(rf"\bauto\s*&?\s*(\w+)\s*=\s*(?:\*\s*{n}\b|{n}\s*(?:\.|->)\s*{_VIEWS}\s*\()", body)
    return [name, *found]


def written_in(body: str, name: str) -> bool:
    """Whether ``body`` certainly writes the tensor ``name`` (or a view of it): an in-place
    method (``name.zero_()``, ``name.copy_(...)``), ``name.mutable_data_ptr``, or ``name`` as the
    out argument of an ``*_out`` or in-place function (``at::sum_out(name, ...)``,
    ``torch::stable::fill_(name, ...)``); of an optional, its ``value()`` so."""
    for alias in _aliases(body, name):
        n = re.escape(alias)
        n += r"(?:\s*\.\s*value\s*\(\s*\))?"  # an optional's tensor: out_.value().copy_(out) (FA2)
        if (re.search(rf"(?<![\w.]){n}\s*(?:\.|->)\s*(?:\w+_|mutable_data_ptr)\s*[(<]", body)
                or re.search(rf"(?<![\w.])(?:at|torch|torch::stable)::\w+_(?:out)?\s*\(\s*{n}\s*[,)]", body)):
            return True
    return False


def pointer_taken_in(body: str, name: str) -> bool:
    """Whether ``body`` keeps a non-const pointer to the data of the tensor ``name`` or of a
    view of it (``T* p = out.data_ptr<T>()``, ``params.o_ptr = out_3d.data_ptr()``, ``auto p =
    out.data_ptr<T>()``): what the kernel does with it is not in this text. A statement that
    spells ``const`` (``reinterpret_cast<T const*>(q.data_ptr())``) reads, and so does a
    ``const_data_ptr`` (the body as the data-ptr rewrite leaves it, ``rewrite.with_pointers_decided``)."""
    for alias in _aliases(body, name):
        for found in re.finditer(rf"(?<![\w.]){re.escape(alias)}\s*(?:\.|->)\s*(?:mutable_)?data_ptr\b", body):
            start = max(body.rfind(c, 0, found.start()) for c in ";{}") + 1
            stop = body.find(";", found.end())
            statement = body[start:stop if stop >= 0 else len(body)]
            if "=" in body[start:found.start()] and not re.search(r"\bconst\b", statement):
                return True
    return False


def _split_tuple(name: str, base: str, optional: bool, default_text: str | None, schema_args: list[str],
                 wrapper_params: list[str], call_args: list[str], python_params: list[str],
                 python_args: list[str]) -> None:
    """A ``std::tuple`` or ``std::pair`` parameter (or an optional one) as one schema argument per
    element: the wrapper joins them into the tuple, the Python forwarder splits the caller's tuple."""
    elements = _split_template(base)
    defaults: list[str] = [""] * len(elements)
    python_default = ""
    if default_text is not None:
        value = default_text.strip()
        literal = re.fullmatch(r"(?:std::make_(?:tuple|pair)\s*\(|std::(?:tuple|pair)\s*<[^()]*>\s*[({]|\{)(.*)[)}]",
                               value, re.S)
        if value in ("std::nullopt", "c10::nullopt", "py::none()") and optional:
            defaults, python_default = ["=None"] * len(elements), "=None"
        elif literal:
            parts = [part.strip() for part in literal.group(1).split(",")] if literal else []
            if len(parts) != len(elements):
                raise Unconvertible(f"default {value!r} of {name} does not have {len(elements)} elements")
            defaults = [_default(part) for part in parts]
            python_default = "=(" + ", ".join(d[1:] for d in defaults) + ("," if len(parts) == 1 else "") + ")"
        else:
            raise Unconvertible(f"default {value!r} of the tuple {name} is not a literal")
    pieces = []
    for position, element in enumerate(elements):
        schema_type, wrapper_type, converts = _scalar(element, False)
        piece = f"{name}_{position}"
        if optional:
            schema_args.append(f"{schema_type}? {piece}{defaults[position]}")
            wrapper_params.append(f"std::optional<{wrapper_type}> {piece}")
            pieces.append(_converted(element, f"*{piece}") if converts else f"*{piece}")
        else:
            schema_args.append(f"{schema_type} {piece}{defaults[position]}")
            wrapper_params.append(f"{wrapper_type} {piece}")
            pieces.append(_converted(element, piece) if converts else piece)
    joined = f"{base}({', '.join(pieces)})"
    call_args.append(f"({name}_0 ? std::optional<{base}>({joined}) : std::nullopt)" if optional else joined)
    python_params.append(f"{name}{python_default}")
    # the caller still passes the tuple (None for an optional one); the schema takes its elements
    python_args.append(f"*((None,) * {len(elements)} if {name} is None else {name})" if optional else f"*{name}")


def operator_for(binding: Binding, returns: str, parameters: list[str], body: str | None = None,
                 wrap: bool = False) -> Operator:
    """The schema, and a wrapper when the C++ signature is not what TORCH_BOX takes (``wrap``:
    always, an inline one, for a function named from another namespace). ``body``, the
    function's definition where it was found: a tensor it certainly writes is mutated in the
    schema however it is taken; one whose data pointer it keeps is left to a person."""
    names = [name for name, _ in binding.args]
    if names and len(names) != len(parameters):
        raise Unconvertible(f"{len(names)} py::arg for {len(parameters)} parameters")
    schema_args: list[str] = []
    wrapper_params: list[str] = []
    call_args: list[str] = []
    python_params: list[str] = []
    python_args: list[str] = []
    kept_pointers: list[str] = []  # tensors taken by value whose data pointer the body keeps non-const
    read_only: list[str] = []
    needs_wrapper = False
    prelude: list[str] = []  # the wrapper's statements before the call
    mutated = 0
    for index, written in enumerate(parameters):
        parameter = written.split("=", 1)[0].strip()  # a C++ default argument: the py::arg default is the schema's
        cxx_type, _, cxx_name = parameter.rpartition(" ")
        if not cxx_type or "&" in cxx_name:
            cxx_type, cxx_name = parameter.rsplit("&", 1)[0] + "&", parameter.rsplit("&", 1)[1].strip()
        name = names[index] if names else cxx_name.strip()
        base, reference = _base(cxx_type)
        tuple_base = re.fullmatch(r"(?:std|c10)::optional<(std::(?:tuple|pair)<.+>)>", base)
        if base.startswith(("std::tuple<", "std::pair<")) or tuple_base:
            _split_tuple(name, tuple_base.group(1) if tuple_base else base, tuple_base is not None,
                         binding.args[index][1] if names else None, schema_args, wrapper_params, call_args,
                         python_params, python_args)
            needs_wrapper = True
            continue
        default = _default(binding.args[index][1]) if names else ""
        optional = re.fullmatch(r"(?:std|c10)::optional<(.+)>", base)
        if optional and not _OPTIONAL_TENSOR.match(base):  # an optional scalar: int? float? bool?
            inner = optional.group(1).strip()
            schema_type, wrapper_type, converts = _scalar(inner, False)
            schema_args.append(f"{schema_type}? {name}{default}")
            wrapper_params.append(f"std::optional<{wrapper_type}> {name}")
            call_args.append(f"{name} ? std::optional<{inner}>({_converted(inner, '*' + name)}) : std::nullopt"
                             if converts else name)
            needs_wrapper = needs_wrapper or converts or reference
            python_params.append(f"{name}{default}")
            python_args.append(name)
            continue
        schema_type, wrapper_type, converts = _scalar(base, reference)
        python_default = default
        if schema_type == "ScalarType" and default:
            python_default = f"={_TORCH_ALIAS}.{default[1:]}"  # the forwarder's default is torch's dtype
        if schema_type == "Tensor?" and re.search(r"optional\s*<\s*const\b", cxx_type):
            # TORCH_BOX unboxes std::optional<Tensor>: the wrapper keeps the optional<const Tensor> the function takes
            # (by reference, so in a local of its own)
            schema_args.append(f"Tensor? {name}{default}")
            wrapper_params.append(f"{wrapper_type} {name}")
            prelude.append(f"std::optional<const at::Tensor> {name}_arg = {name};")
            call_args.append(f"{name}_arg")
            python_params.append(f"{name}{default}")
            python_args.append(name)
            needs_wrapper = True
            continue
        by_reference = reference and not re.search(r"\bconst\b", cxx_type)
        if schema_type in ("Tensor", "Tensor?", "Tensor[]") and (
                (by_reference and schema_type != "Tensor?")
                or (body is not None and written_in(body, cxx_name.strip()))):
            # a tensor taken by non-const reference, or written in place, is written to: the schema
            # says so, one alias set each
            schema_type = schema_type.replace("Tensor", f"Tensor({_alias(mutated)}!)")
            wrapper_type = wrapper_type.removeprefix("const ") if by_reference else wrapper_type
            mutated += 1
        elif (schema_type in ("Tensor", "Tensor?") and not reference and body is not None
              and pointer_taken_in(body, cxx_name.strip())):
            # taken by value, its data pointer kept non-const (the data-ptr rewrite made every pointer
            # only read const): an output handed in (a const& is taken to be read only). Marked
            # written, the safe side: a schema that leaves out a write is wrong under
            # functionalization (torch.compile), a mark on a tensor only read costs a copy there
            schema_type = schema_type.replace("Tensor", f"Tensor({_alias(mutated)}!)")
            mutated += 1
            kept_pointers.append(name)
        elif schema_type == "Tensor":
            read_only.append(name)
        schema_args.append(f"{schema_type} {name}{default}")
        wrapper_params.append(f"{wrapper_type} {name}")
        call_args.append(_converted(base, name) if converts and schema_type != "Tensor" else name)
        python_params.append(f"{name}{python_default}")
        python_args.append(name)
        needs_wrapper = needs_wrapper or converts
    if _CALLABLE.search(returns):
        raise Unconvertible(f"return type {' '.join(returns.split())} holds a std::function, and a schema has no "
                            "callable type (return what the function computes, or keep it in Python)")
    ret_base, _ = _base(re.sub(r"\b(?:inline|static|constexpr)\b", "", returns))
    ret_cast = None  # what the wrapper returns instead, when TORCH_BOX does not box the function's own type
    if re.fullmatch(_TENSOR, ret_base):
        schema_ret = "Tensor"
    elif ret_base.startswith("std::tuple<") and all(re.fullmatch(_TENSOR, e) for e in _split_template(ret_base)):
        schema_ret = "(" + ", ".join("Tensor" for _ in _split_template(ret_base)) + ")"
    elif ret_base.startswith(("std::tuple<", "std::pair<")):
        # TORCH_BOX boxes a std::tuple of boxable types: a pair, an int or a float element goes through one
        elements = [_tuple_element(element) for element in _split_template(ret_base)]
        if any(element is None for element in elements):
            raise Unconvertible(f"return type {ret_base} has an element with no schema type this step knows")
        schema_ret = "(" + ", ".join(element[0] for element in elements if element) + ")"
        boxed_tuple = "std::tuple<" + ", ".join(element[1] for element in elements if element) + ">"
        if boxed_tuple != ret_base:
            ret_cast = boxed_tuple
            needs_wrapper = True
    elif re.fullmatch(rf"std::vector<{_TENSOR}>", ret_base):
        schema_ret = "Tensor[]"
    elif ret_base == "void":
        schema_ret = "()"
    else:
        try:
            schema_ret, boxed, converts = _scalar(ret_base, False)
        except Unconvertible:
            raise Unconvertible(f"return type {ret_base} has no schema type this step knows") from None
        if schema_ret not in ("int", "float", "bool", "str", "ScalarType", "int[]", "float[]", "bool[]"):
            raise Unconvertible(f"return type {ret_base} has no schema type this step knows")
        if converts:
            ret_cast = boxed
            needs_wrapper = True
    schema = f"{binding.name}({', '.join(schema_args)}) -> {schema_ret}"
    unsure = None
    marked = (f"{', '.join(kept_pointers)}: marked written, as {binding.function} keeps a non-const data pointer of "
              f"{'each' if len(kept_pointers) > 1 else 'it'}" if kept_pointers else None)
    if schema_ret == "()" and not mutated and read_only:
        unsure = (f"{binding.name} returns nothing and its schema marks no argument written: annotate the tensors "
                  f"its kernels write ({', '.join(read_only)}: which, the text of {binding.function} does not say) as "
                  "Tensor(a!)")
    if not needs_wrapper and not wrap:
        return Operator(schema, f"&{binding.function}", guard=binding.guard, python_params=python_params,
                        python_args=python_args, unsure=unsure, marked=marked)
    wrapper_name = f"{binding.name}_boxed"
    call = f"{binding.function}({', '.join(call_args)})"
    if ret_base == "void":
        body = f"{call};"
    elif ret_cast and ret_base.startswith("std::vector<"):
        body = f"auto result = {call};\n  return {ret_cast}(result.begin(), result.end());"
    elif ret_cast and ret_cast.startswith("std::tuple<"):
        body = f"return {ret_cast}({call});"
    elif ret_cast:
        body = f"return static_cast<{ret_cast}>({call});"
    else:
        body = f"return {call};"
    body = "\n  ".join([*prelude, body])
    wrapper = f"{ret_cast or ret_base} {wrapper_name}({', '.join(wrapper_params)}) {{\n  {body}\n}}"
    return Operator(schema, f"&{wrapper_name}", wrapper, guard=binding.guard, python_params=python_params,
                    python_args=python_args, unsure=unsure, marked=marked)


@dataclass
class ModuleEdit:
    start: int
    end: int  # the module's text, closing brace included
    line: int
    replacement: str
    schemas: list[str]
    unsure: list[tuple[str, str]] = field(default_factory=list)  # (schema, what a person must decide about it)
    # a function the module hands itself to, in another file: (that file, the edit replacing it)
    others: list[tuple[Path, ModuleEdit]] = field(default_factory=list)


@dataclass
class _Source:
    """One file: its text, and the same with comments and string contents blanked."""

    path: Path | None
    text: str
    code: str
    name: str  # how a message names it


@dataclass
class _Helper:
    """A function a module hands itself to (``register_apis(pybind11::module_& m)``)."""

    source: _Source
    start: int  # its first keyword
    end: int  # after its closing brace
    body_start: int
    var: str
    scope: list[str]  # the namespaces it is defined in ("" for an anonymous one)
    generated: list[str] = field(default_factory=list)  # the named lambdas and wrappers that take its place


@dataclass
class _Collected:
    bindings: list[tuple[Binding, _Helper | None]] = field(default_factory=list)
    aliases: list[tuple[list[str], str, str]] = field(default_factory=list)  # (guard, new name, existing name)
    declined: list[tuple[_Source, int, str]] = field(default_factory=list)
    helpers: list[_Helper] = field(default_factory=list)
    lambdas: list[tuple[Binding, _Helper | None, str]] = field(default_factory=list)  # a named lambda's definition


_HELPER_DEF = re.compile(r"(?:\b(?:static|inline)\s+)*\bvoid\s+(\w+)\s*\("
                         r"\s*(?:::)?(?:pybind11|py)::module_?\s*&\s*(\w+)\s*\)\s*\{")
_LIBRARY = re.compile(r"\b(?:STABLE_)?TORCH_LIBRARY(?:_FRAGMENT)?\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*\{")


def _top_level(code: str, start: int, end: int, templates: bool = False) -> list[tuple[int, int]]:
    """The (start, end) of each comma-separated item of ``code[start:end]`` (brackets nested;
    ``templates``: angle brackets too, as in a parameter list's ``std::variant<int, T>``)."""
    return top_level_spans(code, start, end, *(("([{<", ")]}>") if templates else ("([{", ")]}")))


def _namespace_at(code: str, at: int) -> list[str]:
    """The namespaces open at ``at`` (``namespace a::b {`` gives a, b; an anonymous one "")."""
    stack: list[list[str] | None] = []
    for found in re.finditer(r"\bnamespace\s+([\w:]*)\s*\{|[{}]", code[:at]):
        if found.group(0) == "}":
            if stack:
                stack.pop()
        elif found.group(0) == "{":
            stack.append(None)
        else:
            stack.append(found.group(1).split("::") if found.group(1) else [""])
    return [part for entry in stack if entry is not None for part in entry]


def _named(scope: list[str]) -> list[str]:
    return [part for part in scope if part]


def _helpers(sources: list[_Source]) -> dict[str, list[_Helper]]:
    """Every function of the sources that takes a pybind11 module, by name."""
    found: dict[str, list[_Helper]] = {}
    for source in sources:
        for match in _HELPER_DEF.finditer(source.code):
            close = _close(source.code, match.end() - 1)
            found.setdefault(match.group(1), []).append(_Helper(source, match.start(), close + 1, match.end(),
                                                                match.group(2),
                                                                _namespace_at(source.code, match.start())))
    return found


def _resolve(called: str, scope: list[str], helpers: dict[str, list[_Helper]]) -> _Helper | None:
    """The helper a call ``called(m)`` made in ``scope`` names, as C++ looks it up: the
    innermost enclosing namespace that holds it."""
    parts = called.split("::")
    absolute = parts[0] == ""
    qualifier, name = [p for p in parts[:-1] if p], parts[-1]
    within = _named(scope)
    for depth in ([0] if absolute else range(len(within), -1, -1)):
        wanted = within[:depth] + qualifier
        for helper in helpers.get(name, []):
            if _named(helper.scope) == wanted:
                return helper
    return None


def _lambda(binding_name: str, source: _Source, start: int, end: int, var: str,
            signature: Callable[[str], tuple[str, list[str]] | None],
            taken: set[str]) -> tuple[str, str, list[str], str, str]:
    """A lambda bound by ``var.def`` as a named function: (name, return type, parameters,
    definition without storage class). Its return type is as written (``-> T``), else void
    when it returns nothing, else that of what it returns (a literal, or a call of a function
    whose declaration is found)."""
    code, text = source.code, source.text
    opening = code.index("[", start)
    captures = code[opening + 1:_close(code, opening)].strip()
    paren = code.index("(", opening)
    close = _close(code, paren)
    head = re.match(r"\s*((?:mutable|constexpr|noexcept)\s*)*(?:->\s*([^{]+?))?\s*\{", code[close + 1:end])
    if head is None:
        raise Unconvertible(f"{binding_name}: a lambda this step cannot read")
    body_open = close + 1 + head.end() - 1
    body_close = _close(code, body_open)
    body = code[body_open:body_close + 1]
    if captures not in ("", "&", "=") or re.search(rf"\b{re.escape(var)}\b", body):
        raise Unconvertible(f"{binding_name}: the lambda captures a local ({captures or var}); name it by hand")
    parameters = [text[a:b].strip() for a, b in _top_level(code, paren + 1, close, templates=True)]
    if any(re.match(r"(?:const\s+)?auto\b", p) for p in parameters):
        raise Unconvertible(f"{binding_name}: a generic lambda (auto parameter) has no one schema")
    returns = head.group(2).strip() if head.group(2) else _returned(body, signature)
    if returns is None:
        raise Unconvertible(f"{binding_name}: the lambda's return type is neither written (-> T) nor found")
    name = f"{binding_name}_fn"
    while name in taken:
        name += "_"
    taken.add(name)
    definition = f"{returns} {name}({', '.join(parameters)}) {text[body_open:body_close + 1]}"
    return name, returns, parameters, definition, body


def _returned(body: str, signature: Callable[[str], tuple[str, list[str]] | None]) -> str | None:
    """The type a lambda without ``-> T`` returns, when its return statements say it."""
    types = set()
    for found in re.finditer(r"\breturn\b\s*([^;]*);", body):
        value = found.group(1).strip()
        if not value:
            types.add("void")
        elif value in ("true", "false"):
            types.add("bool")
        elif re.fullmatch(r"[-+]?\d+", value):
            types.add("int64_t")
        elif _NUMBER.match(value):
            types.add("double")
        elif called := re.search(r"(\w+)\s*\((?:[^()]|\([^()]*\))*\)$", value):
            declared = signature(called.group(1))
            if declared is None:
                return None
            types.add(" ".join(re.sub(r"\b(?:inline|static|constexpr|virtual)\b", "", declared[0]).split()))
        else:
            return None
    return "void" if not types else types.pop() if len(types) == 1 else None


def _collect(source: _Source, body_start: int, body_end: int, var: str, helper: _Helper | None, outer: list[str],
             helpers: dict[str, list[_Helper]], signature: Callable[[str], tuple[str, list[str]] | None],
             taken: set[str], out: _Collected, seen: set[int]) -> None:
    """The registrations of a module body or of a helper's, following the helpers it calls."""
    code, text = source.code, source.text
    scope = helper.scope if helper else []
    for use in re.finditer(rf"\b{re.escape(var)}\b", code[body_start:body_end]):
        at = body_start + use.start()
        if at < body_start or any(start <= at < end for start, end in _spans(out, source)):
            continue
        line = code.count("\n", 0, at) + 1
        guard = outer + _guard_at(text, body_start, at)
        after = code[at + len(var):body_end]
        called = re.search(r"((?:::)?[\w:]*\w)\s*\(\s*$", code[body_start:at])
        if re.match(r"\s*\.\s*def\s*\(", after):
            opening = code.index("(", at + len(var))
            close = _close(code, opening)
            _spans(out, source).append((at, close))
            try:
                binding = _binding(source, opening, close, var, guard, signature, taken, out, helper)
            except Unconvertible as error:
                out.declined.append((source, line, str(error)))
                continue
            out.bindings.append((binding, helper))
        elif re.match(r"\s*\.\s*doc\s*\(", after):
            continue
        elif alias := re.match(rf'\s*\.\s*attr\s*\(\s*"\s*"\s*\)\s*=\s*{re.escape(var)}'
                               r'\s*\.\s*attr\s*\(\s*"\s*"\s*\)\s*;',
                               after):
            names = re.findall(r'"(\w+)"', text[at:at + len(var) + alias.end()])
            _spans(out, source).append((at, at + len(var) + alias.end()))
            if len(names) == 2:
                out.aliases.append((guard, names[0], names[1]))
            else:
                out.declined.append((source, line, f"{var}.attr: names this step cannot read"))
        elif called and re.match(r"\s*\)", after):
            target = _resolve(called.group(1), scope, helpers)
            if target is None:
                out.declined.append((source, line, f"{called.group(1)}({var}): its definition is in none of the files"
                                                   " the build reads; convert its registrations by hand"))
            elif id(target) not in seen:
                seen.add(id(target))
                out.helpers.append(target)
                _collect(target.source, target.body_start, target.end - 1, target.var, target, guard, helpers,
                         signature, taken, out, seen)
        else:
            out.declined.append((source, line, f"the module {var} is used other than by {var}.def, {var}.attr "
                                               f"aliases and calls that hand it on; convert that by hand"))


def _spans(out: _Collected, source: _Source) -> list[tuple[int, int]]:
    """The text already read as one registration, per file: a use of the module inside it is not another."""
    spans: dict[int, list[tuple[int, int]]] = out.__dict__.setdefault("_spans", {})
    return spans.setdefault(id(source), [])


def _binding(source: _Source, opening: int, close: int, var: str, guard: list[str],
             signature: Callable[[str], tuple[str, list[str]] | None], taken: set[str], out: _Collected,
             helper: _Helper | None) -> Binding:
    code, text = source.code, source.text
    items = _top_level(code, opening + 1, close)
    head = re.fullmatch(r'\s*"(\w+)"\s*', text[items[0][0]:items[0][1]]) if items else None
    if head is None or len(items) < 2:
        raise Unconvertible(f"{var}.def without a name and a function")
    name = head.group(1)
    args: list[tuple[str, str | None]] = []
    for a, b in items[2:]:
        arg = re.fullmatch(r'\s*(?:py|pybind11)::arg\s*\(\s*"(\w+)"\s*\)\s*(?:=\s*(.+?))?\s*', text[a:b], re.S)
        if arg:
            args.append((arg.group(1), arg.group(2)))
    what = text[items[1][0]:items[1][1]].strip()
    if what.startswith("["):
        function, returns, parameters, definition, body = _lambda(name, source, items[1][0], items[1][1], var,
                                                                  signature, taken)
        binding = Binding(name, function, args, guard, (returns, parameters), body)
        out.lambdas.append((binding, helper, definition))
        return binding
    cast = re.fullmatch(r"static_cast\s*<\s*(.+?)\s*\(\s*\*\s*\)\s*\((.*?)\)\s*>\s*\(\s*&?\s*([\w:]+)\s*\)", what, re.S)
    target = re.fullmatch(r"&?\s*([\w:]+)", what)
    if cast is None and target is None:
        raise Unconvertible(f"{name}: {var}.def of {what.split('(')[0][:60]!r}, neither a function nor a lambda")
    binding = Binding(name, cast.group(3) if cast else target.group(1) if target else "", args, guard)
    if cast:  # the overload is spelt out: its types are the signature, the py::arg names its names
        types = [t.strip() for t in cast.group(2).split(",") if t.strip()]
        named = args or [(f"arg{i}", None) for i in range(len(types))]
        binding.cast = (cast.group(1).strip(), [f"{t} {n}" for t, (n, _) in zip(types, named, strict=False)])
    return binding


def parse_bindings(code: str, text: str, body_start: int, body_end: int, var: str) -> list[Binding]:
    """The ``var.def(...)`` calls between the braces, with the preprocessor lines open around each."""
    out = _Collected()
    source = _Source(None, text, code, "")
    _collect(source, body_start, body_end, var, None, [], {}, lambda _: None, set(), out, set())
    if out.declined:
        raise Unconvertible(out.declined[0][2])
    return [binding for binding, _ in out.bindings]


def _guard_at(text: str, body_start: int, at: int) -> list[str]:
    guard: list[str] = []
    for raw in text[body_start:at].split("\n"):
        stripped = raw.strip()
        if re.match(r"#\s*(if|ifdef|ifndef)\b", stripped):
            guard.append(stripped)
        elif re.match(r"#\s*endif\b", stripped) and guard:
            guard.pop()
    return guard


def _close(code: str, opening: int) -> int:
    depth = 0
    for index in range(opening, len(code)):
        if code[index] in "([{":
            depth += 1
        elif code[index] in ")]}":
            depth -= 1
            if depth == 0:
                return index
    raise Unconvertible("unbalanced brackets")


def _guarded(lines: list[str], guard: list[str]) -> list[str]:
    if not guard:
        return lines
    return [*guard, *lines, *("#endif" for _ in guard)]


def _existing_library(sources: list[_Source], skip: tuple[_Source, int, int],
                      namespace: str) -> tuple[str, set[str]] | None:
    """The dependency's own torch library that a converted module joins: (its namespace, the
    operators it defines already). ``namespace`` when the tree has a library of that name, else
    its only one; None when it has none."""
    libraries: dict[str, set[str]] = {}
    for source in sources:
        for found in _LIBRARY.finditer(source.code):
            if source is skip[0] and skip[1] <= found.start() < skip[2]:
                continue
            ops = libraries.setdefault(found.group(1), set())
            if "_IMPL" in found.group(0):
                continue
            close = _close(source.code, found.end() - 1)
            # found in the blanked code (a commented-out m.def defines nothing), named from the text
            define_call = re.compile(rf'\b{re.escape(found.group(2))}\s*\.\s*def\s*\(\s*"')
            for define in define_call.finditer(source.code, found.end(), close):
                named = re.match(r"\w+", source.text[define.end():])
                if named:
                    ops.add(named.group(0))
    if namespace in libraries:
        return namespace, libraries[namespace]
    if len(libraries) == 1:
        return next(iter(libraries.items()))
    return None


def convert_modules(text: str, namespace: str, dispatch_key: str, pyinit: bool, signature: object,
                    body: Callable[[str], str | None] = lambda _: None, files: Mapping[Path, str] | None = None,
                    root: Path | None = None, pyinit_module: str | None = None
                    ) -> tuple[list[ModuleEdit], list[tuple[int, str]]]:
    """The edits that turn each pybind11 module of ``text`` into a stable registration, and
    (line, reason) for each module left as it is or binding not converted (a binding with no
    schema form: the rest of its module is converted, the binding named at its file:line, and
    its Python function raises NotImplementedError). ``signature(name)`` finds a bound
    function's (return type, parameters), ``body(name)`` its definition's body. ``files``: the
    dependency's files (path -> text, ``text``'s own among them or not), where the functions a
    module hands itself to (``register_apis(m)``) are found, each replaced by the named lambdas
    and wrappers it needs (an edit in ``ModuleEdit.others`` when in another file), and where an
    existing torch library is found, which the module then joins as a fragment (its operators
    not defined twice); ``root`` names those files in messages. ``pyinit_module``: the PyInit
    is for upstream's own setup.py build, not assemble's (whose helper makes its own): a module
    named TORCH_EXTENSION_NAME, which only torch's BuildExtension defines, is given the name of
    setup.py's extension instead, so the PyInit compiles (and is proven) in either build."""
    files = dict(files or {})
    own = next((path for path, other in files.items() if other == text), None)
    sources = [_Source(own, text, blank_comments_and_strings(text), _display(own, root))]
    sources += [_Source(path, other, blank_comments_and_strings(other), _display(path, root))
                for path, other in files.items() if path != own]
    module_source = sources[0]
    code = module_source.code
    helpers = _helpers(sources)
    find: Callable[[str], tuple[str, list[str]] | None] = signature  # type: ignore[assignment]
    taken = {word for source in sources for word in re.findall(r"\b\w+_fn_*\b", source.code)}
    edits: list[ModuleEdit] = []
    declined: list[tuple[int, str]] = []
    for module in _MODULE.finditer(code):
        line = code.count("\n", 0, module.start()) + 1
        try:
            close = _close(code, module.end() - 1)
        except Unconvertible as error:
            declined.append((line, str(error)))
            continue
        out = _Collected()
        _collect(module_source, module.end(), close, module.group(2), None, [], helpers, find, taken, out, set())
        joined = _existing_library(sources, (module_source, module.start(), close), namespace)
        library = joined[0] if joined else namespace
        defined = joined[1] if joined else set()
        operators: list[tuple[Operator, Binding, _Helper | None]] = []
        for binding, helper in out.bindings:
            try:
                operators.append((_operator(binding, helper, find, body, sources), binding, helper))
            except Unconvertible as error:
                where = _where(binding, out, helper, module_source)
                out.declined.append((where[0], where[1], f"{binding.name}: {error}"))
        try:
            python = forwarders(library, [op for op, _, _ in operators], [b for _, b, _ in operators],
                                aliases=out.aliases, missing=[(source, number, reason) for source, number, reason
                                                              in out.declined]) if pyinit else []
        except Unconvertible as error:
            declined.append((line, str(error)))
            continue
        for source, number, reason in out.declined:
            declined.append((number, reason) if source is module_source
                            else (line, f"at {source.name}:{number}: {reason}"))
        if not operators and out.declined:
            continue  # nothing this step can register: the module is left whole
        edit = _module_edit(module, close, line, module_source, library, joined is not None, defined, dispatch_key,
                            operators, out, python if pyinit else None,
                            pyinit_module if pyinit_module and module.group(1) == "TORCH_EXTENSION_NAME" else None)
        parts = [(helper.source,
                  ModuleEdit(helper.start, helper.end, helper.source.code.count("\n", 0, helper.start) + 1,
                                            _helper_text(helper, module_source, out, operators), []))
                 for helper in out.helpers]
        replaced = [(module_source, edit), *parts]
        for source in {id(source): source for source, _ in replaced}.values():
            parts += [(source, include)
                      for include in _pybind_includes(source, [e for s, e in replaced if s is source])]
        for source, part in parts:
            if source is module_source:
                edits.append(part)
            elif source.path is not None:
                edit.others.append((source.path, part))
        edits.append(edit)
    return edits, declined


_PYBIND_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"](?:pybind11/[\w/.]+|torch/python\.h)[>\"][^\n]*\n", re.M)


def _pybind_includes(source: _Source, replaced: list[ModuleEdit]) -> list[ModuleEdit]:
    """Edits removing a file's pybind11 includes (and ``torch/python.h``, torch's pybind11
    glue) when nothing of pybind11 is left in it once ``replaced`` are made."""
    kept = source.code
    for edit in replaced:
        kept = kept[:edit.start] + " " * (edit.end - edit.start) + kept[edit.end:]
    if re.search(r"\b(?:py|pybind11)::|\bPYBIND11_", _PYBIND_INCLUDE.sub("", kept)):
        return []
    return [ModuleEdit(found.start(), found.end(), source.code.count("\n", 0, found.start()) + 1, "", [])
            for found in _PYBIND_INCLUDE.finditer(source.text)]


def _display(path: Path | None, root: Path | None) -> str:
    if path is None:
        return "<module>"
    if root is not None and path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    return path.as_posix()


def _where(binding: Binding, out: _Collected, helper: _Helper | None, module_source: _Source) -> tuple[_Source, int]:
    """The file and line of a binding's ``.def``."""
    source = helper.source if helper else module_source
    found = re.search(rf'\.\s*def\s*\(\s*"{re.escape(binding.name)}"', source.text)
    return source, source.text.count("\n", 0, found.start() if found else 0) + 1


def _operator(binding: Binding, helper: _Helper | None, find: Callable[[str], tuple[str, list[str]] | None],
              body: Callable[[str], str | None], sources: list[_Source] | None = None) -> Operator:
    """A binding's operator; one registered by a helper in a namespace is called by its
    qualified name (through an inline wrapper beside the helper when the binding names its
    function relative to that namespace, or by a plain name declared in no source within that
    namespace: C++ found it in an enclosing one, DeepGEMM's layout helper registering
    deep_gemm::get_mn_major_tma_aligned_tensor)."""
    function = binding.function.split("::")[-1]
    found = binding.cast or find(function)
    if found is None:
        raise Unconvertible(f"no declaration of {binding.function} found")
    text_body = binding.body if binding.body is not None else None if binding.cast else body(function)
    prefix = "::".join(_named(helper.scope)) if helper else ""
    elsewhere = (helper is not None and "::" not in binding.function and binding.cast is None
                 and binding.body is None and not _declared_within(sources or [helper.source], function, helper.scope))
    relative = bool(prefix) and not binding.function.startswith("::") and ("::" in binding.function or elsewhere)
    op = operator_for(binding, found[0], found[1], text_body, wrap=relative)
    if helper is not None and prefix:
        if op.wrapper is not None:
            op.impl = f"&{prefix}::{op.impl.removeprefix('&')}"
        elif not binding.function.startswith("::"):
            op.impl = f"&{prefix}::{binding.function}"
    if helper is not None and op.wrapper is not None and not op.wrapper.startswith("inline "):
        op.wrapper = "inline " + op.wrapper  # beside the helper, in a header a unit may include twice
    return op


def _declared_within(sources: list[_Source], name: str, scope: list[str]) -> bool:
    """Whether a source declares or defines the function ``name`` in the namespace ``scope``
    itself (not in one around it)."""
    pattern = re.compile(DECLARATION_HEAD + re.escape(name) + r"\s*\(")
    for source in sources:
        for found in pattern.finditer(source.code):
            returns = found.group("ret").split()
            if returns[-1:] in (["return"], ["new"]) or "=" in found.group("ret"):
                continue
            if _named(_namespace_at(source.code, found.start())) == _named(scope):
                return True
    return False


def _helper_text(helper: _Helper, module_source: _Source, out: _Collected,
                 operators: list[tuple[Operator, Binding, _Helper | None]]) -> str:
    """What takes a helper's place: its lambdas as named functions and the wrappers of what it
    registered, in its own namespace (where the names its bindings use resolve as before)."""
    where = "this file" if helper.source is module_source else module_source.name
    lines = [f"// {GENERATED_MARK} (was {helper.source.text[helper.start:helper.body_start].split('(')[0].split()[-1]}"
             f"(pybind11::module_&): the operators it registered are in the STABLE_TORCH_LIBRARY of {where})."]
    for binding, owner, definition in out.lambdas:
        if owner is helper:
            lines += _guarded(f"inline {definition}".split("\n"), binding.guard)
    for op, _, owner in operators:
        if owner is helper and op.wrapper:
            lines += _guarded(op.wrapper.split("\n"), op.guard)
    return "\n".join(lines)


def _module_edit(module: re.Match[str], close: int, line: int, source: _Source, library: str, fragment: bool,
                 defined: set[str], dispatch_key: str, operators: list[tuple[Operator, Binding, _Helper | None]],
                 out: _Collected, python: list[tuple[list[str], list[str]]] | None,
                 pyinit_name: str | None = None) -> ModuleEdit:
    own = [(op, binding) for op, binding, helper in operators if binding.name not in defined]
    text = [f"// {GENERATED_MARK} (was a pybind11 module)."]
    local_lambdas = [(binding, definition) for binding, owner, definition in out.lambdas if owner is None]
    wrappers = [op for op, _, helper in operators if op.wrapper and helper is None]
    if local_lambdas or wrappers:
        text += ["namespace {", "", "// What TORCH_BOX takes: int64_t for ints, one argument per tuple element."]
        for binding, definition in local_lambdas:
            text += _guarded(definition.split("\n"), binding.guard)
        for op in wrappers:
            text += _guarded((op.wrapper or "").split("\n"), op.guard)
        text += ["", "}  // namespace", ""]
    if own:
        macro = "STABLE_TORCH_LIBRARY_FRAGMENT" if fragment else "STABLE_TORCH_LIBRARY"
        if fragment:
            text.append(f"// These operators join the library {library} this dependency already defines.")
        text.append(f"{macro}({library}, m) {{")
        for op, _ in own:
            text += _guarded([*([f"  // {op.marked}"] if op.marked else []), f'  m.def("{op.schema}");'], op.guard)
        text.append("}")
        # an operator without a tensor argument has no device to dispatch on: it is registered for
        # every backend (CompositeExplicitAutograd), else a call finds no kernel
        keys = {op.schema: dispatch_key if "Tensor" in op.schema.split(") ->")[0] else "CompositeExplicitAutograd"
                for op, _ in own}
        for key in dict.fromkeys(keys.values()):
            text += ["", f"STABLE_TORCH_LIBRARY_IMPL({library}, {key}, m) {{"]
            for op, binding in own:
                if keys[op.schema] == key:
                    text += _guarded([f'  m.impl("{binding.name}", TORCH_BOX({op.impl}));'], op.guard)
            text.append("}")
    if python is not None:
        text.append("")
        if pyinit_name:
            text.append(f"// {pyinit_name}: the module the project's own setup.py builds from this file.")
        text += _pyinit(pyinit_name or module.group(1), python)
    return ModuleEdit(module.start(), close + 1, line, "\n".join(text), [op.schema for op, _ in own],
                      [(op.schema, op.unsure) for op, _ in own if op.unsure])


_TORCH_ALIAS = "_assemble_torch"  # the forwarders' name for torch: not a name a module is likely to define


def forwarders(namespace: str, operators: list[Operator], bindings: list[Binding],
               aliases: list[tuple[list[str], str, str]] | None = None,
               missing: list[tuple[Any, int, str]] | None = None) -> list[tuple[list[str], list[str]]]:
    """(guard, Python lines) per operator: a function of the module's old name and parameters
    (py::arg names and defaults) that calls ``torch.ops.<namespace>.<op>``, passing a tuple
    argument as its elements. Callers of the pybind11 module keep working unchanged; a name
    that is not a Python identifier gets ``*args, **kwargs`` (no tuple to split) or is refused.
    ``aliases``: (guard, name, existing name), ``m.attr("a") = m.attr("b")``; ``missing``: the
    bindings not converted (their reason), each a function that raises NotImplementedError, so
    an ``import`` of its name still works."""
    out: list[tuple[list[str], list[str]]] = []
    for op, binding in zip(operators, bindings, strict=True):
        names = [p.split("=", 1)[0] for p in op.python_params]
        target = f"{_TORCH_ALIAS}.ops.{namespace}.{binding.name}"
        if all(n.isidentifier() and not keyword.iskeyword(n)
               for n in [binding.name, *names]) and len(set(names)) == len(names):
            lines = [f"def {binding.name}({', '.join(op.python_params)}):",
                     f"    return {target}({', '.join(op.python_args)})"]
        elif (not any(a.startswith("*") for a in op.python_args) and binding.name.isidentifier()
              and not keyword.iskeyword(binding.name)):
            lines = [f"def {binding.name}(*args, **kwargs):", f"    return {target}(*args, **kwargs)"]
        else:
            raise Unconvertible(f"{binding.name}: a parameter name is not a Python identifier, so its forwarder cannot "
                                "split the tuple")
        out.append((op.guard, lines))
    for _, _, reason in missing or []:
        name = reason.split(":", 1)[0]
        if name.isidentifier() and not keyword.iskeyword(name):
            out.append(([], [f"def {name}(*args, **kwargs):",
                             "    raise NotImplementedError("
                             f"{json.dumps('not migrated to the Stable ABI: ' + reason)})"]))
    for guard, new, existing in aliases or []:
        out.append((guard, [f"{new} = {existing}"]))
    try:  # every guard's branch taken at once: each forwarder must compile on its own anyway
        compile("\n".join(line for _, lines in out for line in lines) + "\n", "<assemble forwarders>", "exec")
    except SyntaxError as error:
        raise Unconvertible(f"the Python forwarders do not compile: {error.msg}") from None
    return out


def _c_string(line: str) -> str:
    return json.dumps(line + "\n")  # JSON's escapes of an ASCII string are C's


def _pyinit(module: str, python: list[tuple[list[str], list[str]]]) -> list[str]:
    """The limited-API ``PyInit`` of the module Python imports: it creates the module and runs
    the forwarders in it (Py_CompileString and PyEval_EvalCode are in the stable ABI)."""
    source = [f"    {_c_string(f'import torch as {_TORCH_ALIAS}')}"]
    for guard, lines in python:
        source += _guarded([f"    {_c_string(line)}" for line in lines], guard)
    return ["// The module Python imports, with the limited API only (pybind11 needs the full one). Its",
            "// functions are kept: each calls its operator through torch.ops, a tuple argument as its elements.",
            "#define ASSEMBLE_STR_(x) #x", "#define ASSEMBLE_STR(x) ASSEMBLE_STR_(x)",
            "#define ASSEMBLE_PYINIT_(name) PyInit_##name", "#define ASSEMBLE_PYINIT(name) ASSEMBLE_PYINIT_(name)",
            "static const char assemble_forwarders[] =", *source, "    \"\";",
            f"extern \"C\" PyObject* ASSEMBLE_PYINIT({module})(void) {{",
            f"  static PyModuleDef module = {{PyModuleDef_HEAD_INIT, ASSEMBLE_STR({module}), nullptr, -1, nullptr,"
            " nullptr, nullptr, nullptr, nullptr};",
            "  PyObject* created = PyModule_Create(&module);",
            "  if (created == nullptr) return nullptr;",
            "  PyObject* globals = PyModule_GetDict(created);",
            "  PyObject* code = Py_CompileString(assemble_forwarders, ASSEMBLE_STR(" + module + "), Py_file_input);",
            "  PyObject* done = nullptr;",
            "  if (code != nullptr && PyDict_SetItemString(globals, \"__builtins__\", PyEval_GetBuiltins()) == 0) {",
            "    done = PyEval_EvalCode(code, globals, globals);",
            "  }",
            "  Py_XDECREF(code);",
            "  if (done == nullptr) {",
            "    Py_DECREF(created);",
            "    return nullptr;",
            "  }",
            "  Py_DECREF(done);",
            "  return created;",
            "}"]


def parse_schemas(python: Path, schemas: list[str]) -> list[tuple[str, str | None]]:
    """(schema, error or None) for each, as the build torch's ``torch._C.parse_schema`` says."""
    script = ("import json, sys, torch\nout = []\nfor s in json.load(sys.stdin):\n"
              "    try:\n        torch._C.parse_schema(s); out.append(None)\n"
              "    except Exception as e:\n        out.append(str(e).strip().splitlines()[0] if str(e).strip() else "
              "type(e).__name__)\n"
              "print(json.dumps(out))\n")
    result = subprocess.run([str(python), "-c", script], input=json.dumps(schemas), capture_output=True, text=True,
                            timeout=300, check=False)
    if result.returncode != 0:
        return [(schema, f"torch could not be asked: {result.stderr.strip().splitlines()[-1:]}") for schema in schemas]
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    return list(zip(schemas, errors, strict=True))
