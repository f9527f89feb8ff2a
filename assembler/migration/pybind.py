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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from assembler.migration.lexer import blank_comments_and_strings

GENERATED_MARK = "Registered with the Stable ABI by `assemble migrate`"  # what review's trailer looks for
_MODULE = re.compile(r"\bPYBIND11_MODULE\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*\{")
_ARG = re.compile(r'py::arg\s*\(\s*"(\w+)"\s*\)(?:\s*=\s*([^,]+?))?\s*(?=,|$)', re.S)
_TENSOR = r"(?:at|torch)::Tensor"
_OPTIONAL_TENSOR = re.compile(rf"^(?:std|c10)::optional\s*<\s*{_TENSOR}\s*>$")
_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fFlL]?$")


class Unconvertible(Exception):
    """A binding this step cannot convert; the message says why."""


@dataclass
class Binding:
    name: str
    function: str  # as written after &, e.g. normkit::rms_norm
    args: list[tuple[str, str | None]]  # py::arg names and default texts
    guard: list[str] = field(default_factory=list)  # preprocessor lines open around it
    cast: tuple[str, list[str]] | None = None  # a static_cast to the overload's pointer type: (returns, parameters)


@dataclass
class Operator:
    schema: str
    impl: str  # what TORCH_BOX boxes
    wrapper: str | None = None
    guard: list[str] = field(default_factory=list)
    python_params: list[str] = field(default_factory=list)  # the pybind11 function's, as a Python def's
    python_args: list[str] = field(default_factory=list)  # what its forwarder passes to torch.ops, a tuple as *name
    unsure: str | None = None  # why the schema may not say every argument the function writes: for a person


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
    raise Unconvertible(f"parameter type {base} has no schema type this step knows")


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
    ``torch::stable::fill_(name, ...)``)."""
    for alias in _aliases(body, name):
        n = re.escape(alias)
        if (re.search(rf"(?<![\w.]){n}\s*(?:\.|->)\s*(?:\w+_|mutable_data_ptr)\s*[(<]", body)
                or re.search(rf"(?<![\w.])(?:at|torch|torch::stable)::\w+_(?:out)?\s*\(\s*{n}\s*[,)]", body)):
            return True
    return False


def pointer_taken_in(body: str, name: str) -> bool:
    """Whether ``body`` keeps a non-const pointer to the data of the tensor ``name`` or of a
    view of it (``T* p = out.data_ptr<T>()``, ``params.o_ptr = out_3d.data_ptr()``, ``auto p =
    out.data_ptr<T>()``): what the kernel does with it is not in this text. A statement that
    spells ``const`` (``reinterpret_cast<T const*>(q.data_ptr())``) reads."""
    for alias in _aliases(body, name):
        for found in re.finditer(rf"(?<![\w.]){re.escape(alias)}\s*(?:\.|->)\s*data_ptr\b", body):
            start = max(body.rfind(c, 0, found.start()) for c in ";{}") + 1
            stop = body.find(";", found.end())
            statement = body[start:stop if stop >= 0 else len(body)]
            if "=" in body[start:found.start()] and not re.search(r"\bconst\b", statement):
                return True
    return False


def operator_for(binding: Binding, returns: str, parameters: list[str], body: str | None = None) -> Operator:
    """The schema, and a wrapper when the C++ signature is not what TORCH_BOX takes. ``body``,
    the function's definition where it was found: a tensor it certainly writes is mutated in
    the schema however it is taken; one whose data pointer it keeps is left to a person."""
    names = [name for name, _ in binding.args]
    if names and len(names) != len(parameters):
        raise Unconvertible(f"{len(names)} py::arg for {len(parameters)} parameters")
    schema_args: list[str] = []
    wrapper_params: list[str] = []
    call_args: list[str] = []
    python_params: list[str] = []
    python_args: list[str] = []
    kept_pointers: list[str] = []  # tensors whose data pointer the body keeps, not written in the schema
    read_only: list[str] = []
    needs_wrapper = False
    mutated = 0
    for index, written in enumerate(parameters):
        parameter = written.split("=", 1)[0].strip()  # a C++ default argument: the py::arg default is the schema's
        cxx_type, _, cxx_name = parameter.rpartition(" ")
        if not cxx_type or "&" in cxx_name:
            cxx_type, cxx_name = parameter.rsplit("&", 1)[0] + "&", parameter.rsplit("&", 1)[1].strip()
        name = names[index] if names else cxx_name.strip()
        default = _default(binding.args[index][1]) if names else ""
        base, reference = _base(cxx_type)
        if base.startswith("std::tuple<"):
            elements = _split_template(base)
            if default:
                raise Unconvertible("a tuple parameter with a default")
            pieces = []
            for position, element in enumerate(elements):
                schema_type, wrapper_type, _ = _scalar(element, False)
                schema_args.append(f"{schema_type} {name}_{position}")
                wrapper_params.append(f"{wrapper_type} {name}_{position}")
                pieces.append(f"{name}_{position}")
            call_args.append(f"{base}({', '.join(pieces)})")
            python_params.append(name)
            python_args.append(f"*{name}")  # the caller still passes the tuple; the schema takes its elements
            needs_wrapper = True
            continue
        optional = re.fullmatch(r"(?:std|c10)::optional<(.+)>", base)
        if optional and not _OPTIONAL_TENSOR.match(base):  # an optional scalar: int? float? bool?
            inner = optional.group(1).strip()
            schema_type, wrapper_type, converts = _scalar(inner, False)
            schema_args.append(f"{schema_type}? {name}{default}")
            wrapper_params.append(f"std::optional<{wrapper_type}> {name}")
            call_args.append(f"{name} ? std::optional<{inner}>(static_cast<{inner}>(*{name})) : std::nullopt" if converts else name)
            needs_wrapper = needs_wrapper or converts or reference
            python_params.append(f"{name}{default}")
            python_args.append(name)
            continue
        schema_type, wrapper_type, converts = _scalar(base, reference)
        by_reference = reference and not re.search(r"\bconst\b", cxx_type)
        if schema_type in ("Tensor", "Tensor?", "Tensor[]") and (
                (by_reference and schema_type != "Tensor?") or (body is not None and written_in(body, cxx_name.strip()))):
            # a tensor taken by non-const reference, or written in place, is written to: the schema
            # says so, one alias set each
            schema_type = schema_type.replace("Tensor", f"Tensor({_alias(mutated)}!)")
            wrapper_type = wrapper_type.removeprefix("const ") if by_reference else wrapper_type
            mutated += 1
        elif schema_type in ("Tensor", "Tensor?") and not reference and body is not None and pointer_taken_in(body, cxx_name.strip()):
            # taken by value, its data pointer kept: an output handed in (a const& is taken to be read only)
            kept_pointers.append(name)
        elif schema_type == "Tensor":
            read_only.append(name)
        schema_args.append(f"{schema_type} {name}{default}")
        wrapper_params.append(f"{wrapper_type} {name}")
        call_args.append(f"static_cast<{base}>({name})" if converts and schema_type != "Tensor" else name)
        python_params.append(f"{name}{default}")
        python_args.append(name)
        needs_wrapper = needs_wrapper or converts
    ret_base, _ = _base(returns.replace("inline", "").replace("static", ""))
    if re.fullmatch(_TENSOR, ret_base):
        schema_ret = "Tensor"
    elif ret_base.startswith("std::tuple<") and all(re.fullmatch(_TENSOR, e) for e in _split_template(ret_base)):
        schema_ret = "(" + ", ".join("Tensor" for _ in _split_template(ret_base)) + ")"
    elif re.fullmatch(rf"std::vector<{_TENSOR}>", ret_base):
        schema_ret = "Tensor[]"
    elif ret_base == "void":
        schema_ret = "()"
    elif ret_base in ("int64_t", "std::int64_t", "double", "bool"):
        schema_ret = _scalar(ret_base, False)[0]
    else:
        raise Unconvertible(f"return type {ret_base} has no schema type this step knows")
    schema = f"{binding.name}({', '.join(schema_args)}) -> {schema_ret}"
    unsure = None
    if kept_pointers:
        unsure = (f"{', '.join(kept_pointers)}: {binding.function} keeps a non-const data pointer of each; annotate "
                  "those its kernels write as Tensor(a!) in the schema")
    elif schema_ret == "()" and not mutated and read_only:
        unsure = (f"{binding.name} returns nothing and its schema marks no argument written: annotate the tensors "
                  f"its kernels write ({', '.join(read_only)}: which, the text of {binding.function} does not say) as Tensor(a!)")
    if not needs_wrapper:
        return Operator(schema, f"&{binding.function}", guard=binding.guard, python_params=python_params,
                        python_args=python_args, unsure=unsure)
    wrapper_name = f"{binding.name}_boxed"
    body = f"return {binding.function}({', '.join(call_args)});" if ret_base != "void" else f"{binding.function}({', '.join(call_args)});"
    wrapper = f"{ret_base} {wrapper_name}({', '.join(wrapper_params)}) {{\n  {body}\n}}"
    return Operator(schema, f"&{wrapper_name}", wrapper, guard=binding.guard, python_params=python_params,
                    python_args=python_args, unsure=unsure)


@dataclass
class ModuleEdit:
    start: int
    end: int  # the module's text, closing brace included
    line: int
    replacement: str
    schemas: list[str]
    unsure: list[tuple[str, str]] = field(default_factory=list)  # (schema, what a person must decide about it)


def parse_bindings(code: str, text: str, body_start: int, body_end: int, var: str) -> list[Binding]:
    """The ``var.def(...)`` calls between the braces, with the preprocessor lines open around each."""
    bindings: list[Binding] = []
    for found in re.finditer(rf"\b{re.escape(var)}\s*\.\s*def\s*\(", code[body_start:body_end]):
        at = body_start + found.end() - 1
        close = _close(code, at)
        call = text[at + 1:close]
        head = re.match(r'\s*"(\w+)"\s*,\s*', call)
        cast = re.match(r"static_cast\s*<\s*(.+?)\s*\(\s*\*\s*\)\s*\((.*?)\)\s*>\s*\(\s*&?\s*([\w:]+)\s*\)",
                        call[head.end():] if head else "", re.S)
        target = re.match(r"&?\s*([\w:]+)", call[head.end():]) if head else None
        if head is None or (cast is None and target is None):
            raise Unconvertible(f"{var}.def without a name and a function pointer")
        args = [(m.group(1), m.group(2)) for m in _ARG.finditer(call)]
        binding = Binding(head.group(1), cast.group(3) if cast else target.group(1) if target else "", args,
                          _guard_at(text, body_start, at))
        if cast:  # the overload is spelt out: its types are the signature, the py::arg names its names
            types = [t.strip() for t in cast.group(2).split(",") if t.strip()]
            binding.cast = (cast.group(1).strip(), [f"{t} {name}" for t, (name, _) in zip(types, args or [(f"arg{i}", None) for i in range(len(types))], strict=False)])
        bindings.append(binding)
    return bindings


def _only_defs(body: str, var: str) -> None:
    """A module body this step can replace holds ``var.def(...)`` calls (and ``var.doc()``)
    only: a module handed to a function (``register_apis(m)``), or given attributes, would lose
    what that code registers."""
    for use in re.finditer(rf"\b{re.escape(var)}\b", body):
        after = body[use.end():]
        if re.match(r"\s*\.\s*(?:def|doc)\s*\(", after):
            continue
        call = re.search(r"([\w:]+)\s*\([^()]*$", body[:use.start()])
        what = f"is handed to {call.group(1)}({var})" if call else f"is used other than by {var}.def"
        raise Unconvertible(f"the module {what}: its registrations are elsewhere; convert them by hand")


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


def convert_modules(text: str, namespace: str, dispatch_key: str, pyinit: bool, signature: object,
                    body: Callable[[str], str | None] = lambda _: None) -> tuple[list[ModuleEdit], list[tuple[int, str]]]:
    """The edits that turn each pybind11 module of ``text`` into a stable registration, and
    (line, reason) for each module left as it is. ``signature(name)`` finds a bound
    function's (return type, parameters), ``body(name)`` its definition's body."""
    code = blank_comments_and_strings(text)
    edits: list[ModuleEdit] = []
    declined: list[tuple[int, str]] = []
    for module in _MODULE.finditer(code):
        line = code.count("\n", 0, module.start()) + 1
        try:
            close = _close(code, module.end() - 1)
            _only_defs(code[module.end():close], module.group(2))
            bindings = parse_bindings(code, text, module.end(), close, module.group(2))
            operators = []
            for binding in bindings:
                function = binding.function.split("::")[-1]
                found = binding.cast or signature(function)  # type: ignore[operator]
                if found is None:
                    raise Unconvertible(f"no declaration of {binding.function} found")
                # a spelt-out overload names its parameters after the py::args: the body's names differ
                operators.append(operator_for(binding, found[0], found[1], None if binding.cast else body(function)))
            python = forwarders(namespace, operators, bindings) if pyinit else []
        except Unconvertible as error:
            declined.append((line, str(error)))
            continue
        wrappers = [op.wrapper for op in operators if op.wrapper]
        out = [f"// {GENERATED_MARK} (was a pybind11 module)."]
        if wrappers:
            out += ["namespace {", "", "// What TORCH_BOX takes: int64_t for ints, one argument per tuple element."]
            for op in operators:
                if op.wrapper:
                    out += _guarded(op.wrapper.split("\n"), op.guard)
            out += ["", "}  // namespace", ""]
        out.append(f"STABLE_TORCH_LIBRARY({namespace}, m) {{")
        for op in operators:
            out += _guarded([f'  m.def("{op.schema}");'], op.guard)
        out += ["}", "", f"STABLE_TORCH_LIBRARY_IMPL({namespace}, {dispatch_key}, m) {{"]
        for op, binding in zip(operators, bindings, strict=True):
            out += _guarded([f'  m.impl("{binding.name}", TORCH_BOX({op.impl}));'], op.guard)
        out.append("}")
        if pyinit:
            out += ["", *_pyinit(module.group(1), python)]
        edits.append(ModuleEdit(module.start(), close + 1, line, "\n".join(out), [op.schema for op in operators],
                                [(op.schema, op.unsure) for op in operators if op.unsure]))
    return edits, declined


_TORCH_ALIAS = "_assemble_torch"  # the forwarders' name for torch: not a name a module is likely to define


def forwarders(namespace: str, operators: list[Operator], bindings: list[Binding]) -> list[tuple[list[str], list[str]]]:
    """(guard, Python lines) per operator: a function of the module's old name and parameters
    (py::arg names and defaults) that calls ``torch.ops.<namespace>.<op>``, passing a tuple
    argument as its elements. Callers of the pybind11 module keep working unchanged; a name
    that is not a Python identifier gets ``*args, **kwargs`` (no tuple to split) or is refused."""
    out: list[tuple[list[str], list[str]]] = []
    for op, binding in zip(operators, bindings, strict=True):
        names = [p.split("=", 1)[0] for p in op.python_params]
        target = f"{_TORCH_ALIAS}.ops.{namespace}.{binding.name}"
        if all(n.isidentifier() and not keyword.iskeyword(n) for n in [binding.name, *names]) and len(set(names)) == len(names):
            lines = [f"def {binding.name}({', '.join(op.python_params)}):",
                     f"    return {target}({', '.join(op.python_args)})"]
        elif not any(a.startswith("*") for a in op.python_args) and binding.name.isidentifier() and not keyword.iskeyword(binding.name):
            lines = [f"def {binding.name}(*args, **kwargs):", f"    return {target}(*args, **kwargs)"]
        else:
            raise Unconvertible(f"{binding.name}: a parameter name is not a Python identifier, so its forwarder cannot split the tuple")
        out.append((op.guard, lines))
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
              "    except Exception as e:\n        out.append(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)\n"
              "print(json.dumps(out))\n")
    result = subprocess.run([str(python), "-c", script], input=json.dumps(schemas), capture_output=True, text=True,
                            timeout=300, check=False)
    if result.returncode != 0:
        return [(schema, f"torch could not be asked: {result.stderr.strip().splitlines()[-1:]}") for schema in schemas]
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    return list(zip(schemas, errors, strict=True))
