"""Tensors made from ``TensorOptions`` that name no tensor to allocate like (rewrite type
``options-call``): ``from_blob(data, sizes, [strides,] options)``, ``empty_strided(sizes,
strides, options)``, ``empty_like(t, options)`` and an ``empty(sizes, options)`` that
``new_empty`` cannot take (its device is ``kCUDA``, not a tensor's). The options are read into
a dtype and a device. The dtype is a ScalarType the file spells, or a ``kName`` constant it does
not declare (another header's; the compile proof checks it); the device is ``A.device()`` of a
tensor, ``kCUDA``, or none: the CPU, as in ATen. Else the call is declined at its line. What
each becomes:

- ``torch::stable::from_blob(data, sizes, strides, device, dtype)``; without strides, the
  contiguous ones from the helper header's ``assemble_stable::contiguous_strides(sizes)``;
- ``torch::stable::empty(sizes, dtype, std::nullopt, device)``;
- ``aten::empty_strided``, and ``aten::empty_like`` with options, through the dispatcher
  (``assemble_stable::call_aten``): torch::stable has no function for them."""

from __future__ import annotations

import re

from assembler.migration.dispatcher import HELPER_FUNCTION, vector_of
from assembler.migration.lexer import blank_comments_and_strings, matching_close
from assembler.migration.rewrite import (
    _DEVICE_OF,
    _LINK,
    _OPTIONS_OF,
    TENSOR,
    Declarations,
    Declined,
    FileRewrite,
    Rewrite,
    _apply,
    _eligible,
    _split_arguments,
    _trimmed,
    calls_of,
    declarations_for,
)

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


def options_call(rewrite: Rewrite, file: FileRewrite, torch_target: str) -> None:
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
            name = f"{HELPER_FUNCTION}<torch::stable::Tensor>"
            separators = [", ", ", ", *separators]
        else:
            file.helpers.add("dispatcher")
            made = ['"aten::empty_strided"', '""', vector_of(values[0]), vector_of(values[1]),
                    f"std::optional<torch::headeronly::ScalarType>({dtype})", "std::nullopt",
                    f"std::optional<torch::stable::Device>({device})", "std::nullopt"]
            name = f"{HELPER_FUNCTION}<torch::stable::Tensor>"
            separators = [", ", ", ", *separators]  # the op's name and overload come first
        kept = separators[:len(made) - 1]
        joined = made[0] + "".join(sep + text for sep, text in zip([*kept, *[", "] * len(made)], made[1:],
                                                                     strict=False))
        edits.append((found.start(), closing + 1, f"{name}({joined}{lost})"))
        file.declined = [d for d in file.declined if not (d.line == line + 1 and d.rewrite in _TAKEN_FROM)]
    _apply(edits, rewrite, file)
