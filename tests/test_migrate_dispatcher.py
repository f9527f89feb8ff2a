"""The generic way round of `assemble migrate` (issue #27 item 6): a Tensor method or at:: function
that torch::stable lacks is called through torch_call_dispatcher by the helper header's
call_aten, every argument of the one overload of the build torch's schema that takes the call
written out (defaults included, each cast to what the stack holds); what has no plain stack
form, fits several overloads, or needs a torch-target below 2.10 is declined at its line."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from assembler.migration import helpers
from assembler.migration.dispatcher import call, parse, schemas_for
from assembler.migration.rewrite import FileRewrite, RewriteSet, apply_step, load_rewrites

# as torch 2.13's registry prints them (torch._C._jit_get_schemas_for_operator)
SCHEMAS = {
    "aten::is_pinned": ("aten::is_pinned(Tensor self, Device? device=None) -> bool",),
    "aten::softmax": ("aten::softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
                      "aten::softmax.Dimname(Tensor self, str dim, *, ScalarType? dtype=None) -> Tensor",
                      "aten::softmax.int_out(Tensor self, int dim, ScalarType? dtype=None, *, Tensor(a!) out) -> "
                      "Tensor(a!)"),
    "aten::argmax": ("aten::argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",),
    "aten::relu_": ("aten::relu_(Tensor(a!) self) -> Tensor(a!)",),
    "aten::permute": ("aten::permute(Tensor(a) self, int[] dims) -> Tensor(a)",),
    "aten::slice": ("aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, "
                    "SymInt step=1) -> Tensor(a)",
                    "aten::slice.t(t[] l, int? start=None, int? end=None, int step=1) -> t[]"),
}


def _rewrites(schemas: dict[str, tuple[str, ...]]) -> RewriteSet:
    loaded = load_rewrites()
    return replace(loaded, rewrites=tuple(replace(r, schemas=schemas) if r.type == "dispatcher" else r
                                          for r in loaded.rewrites))


def _run(text: str, rewrites: RewriteSet, target: str = "2.10") -> FileRewrite:
    file = FileRewrite(text, [True] * (text.count("\n") + 1))
    for step in rewrites.steps:
        apply_step(rewrites.of_step(step), file, target, {})
    return file


def test_the_schema_is_read_with_its_overload_defaults_and_keyword_arguments() -> None:
    schema = parse(SCHEMAS["aten::softmax"][2])
    assert schema is not None and schema.overload == "int_out" and schema.positional == 3
    assert [(a.type, a.name, a.default, a.keyword) for a in schema.arguments] == [
        ("Tensor", "self", None, False), ("int", "dim", None, False), ("ScalarType?", "dtype", "None", False),
        ("Tensor", "out", None, True)]
    assert schema.returns == ("Tensor",)


def test_the_one_overload_that_takes_the_arguments_is_called_with_every_argument() -> None:
    made = call("aten::softmax", SCHEMAS["aten::softmax"], ["x", "d"], method=True)
    assert made.text == ('assemble_stable::call_aten<torch::stable::Tensor>("aten::softmax", "int", x, '
                         "static_cast<int64_t>(d), std::nullopt)")
    made = call("aten::argmax", SCHEMAS["aten::argmax"], ["x", "1"], method=True)
    assert made.text == ('assemble_stable::call_aten<torch::stable::Tensor>("aten::argmax", "", x, '
                         "static_cast<std::optional<int64_t>>(1), false)")  # an int? is an optional on the stack


@pytest.mark.parametrize(("op", "schemas", "values", "reason"), [
    ("aten::add", ("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
                   "aten::add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor"), ["x", "y"], "Scalar"),
    ("aten::sort", ("aten::sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",),
     ["x"], "returns 2 values"),
    ("aten::abs", ("aten::abs(Tensor self) -> Tensor",), ["x", "y"], "no overload of aten::abs takes 2"),
    ("aten::abs", (), ["x"], "the build torch has no operator aten::abs"),
    ("aten::softmax", SCHEMAS["aten::softmax"], ["x", "d", "t", "u"], "no overload"),
])
def test_what_has_no_plain_stack_form_is_declined_with_the_reason(op: str, schemas: tuple[str, ...],
                                                                   values: list[str], reason: str) -> None:
    made = call(op, schemas, values, method=True)
    assert made.text == "" and reason in made.reason


def test_a_list_of_ints_goes_on_the_stack_as_a_vector_its_default_too() -> None:
    made = call("aten::permute", SCHEMAS["aten::permute"], ["x", "{1, 0, 2}"], method=True)
    assert made.text == ('assemble_stable::call_aten<torch::stable::Tensor>("aten::permute", "", x, '
                         "std::vector<int64_t>{1, 0, 2})")
    made = call("aten::permute", SCHEMAS["aten::permute"], ["x", "dims"], method=True)
    assert made.text.endswith("x, std::vector<int64_t>((dims).begin(), (dims).end()))")
    schemas = ("aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) "
               "-> Tensor", "aten::g(Tensor self, int[2] pad=[0, -1]) -> Tensor")
    assert "int[1]?" in call("aten::sum", schemas[:1], ["x", "d"], method=True).reason  # an optional list: declined
    assert call("aten::g", schemas[1:], ["x"], method=True).text.endswith("x, std::vector<int64_t>{0, -1})")


def test_several_fitting_overloads_are_declined_by_name() -> None:
    schemas = ("aten::f.a(Tensor self, int n) -> Tensor", "aten::f.b(Tensor self, float n) -> Tensor")
    assert "aten::f.a, aten::f.b" in call("aten::f", schemas, ["x", "n"], method=True).reason


def test_a_method_on_a_tensor_and_an_at_function_are_rewritten_to_the_helper_and_chained() -> None:
    text = ("at::Tensor f(const at::Tensor& x, int64_t d) {\n"
            "  TORCH_CHECK(x.is_pinned(), \"x\");\n"
            "  auto y = at::softmax(x, d).relu_();\n"
            "  return y.argmax(1, true);\n}\n")
    file = _run(text, _rewrites(SCHEMAS))
    assert file.declined == [] and file.made["dispatcher"] == 4 and file.helpers == {"dispatcher"}
    lines = file.text.splitlines()
    assert lines[1] == ('  STD_TORCH_CHECK(assemble_stable::call_aten<bool>("aten::is_pinned", "", x, std::nullopt), '
                        '"x");')
    assert lines[2] == ('  auto y = assemble_stable::call_aten<torch::stable::Tensor>("aten::relu_", "", '
                        'assemble_stable::call_aten<torch::stable::Tensor>("aten::softmax", "int", x, '
                        "static_cast<int64_t>(d), std::nullopt));")
    assert lines[3].startswith('  return assemble_stable::call_aten<torch::stable::Tensor>("aten::argmax", "", y,')


def test_below_torch_2_10_and_on_what_is_not_a_tensor_it_is_reported_at_its_line() -> None:
    file = _run("bool f(const at::Tensor& x) {\n  return x.is_pinned();\n}\n", _rewrites(SCHEMAS), target="2.9")
    assert "x.is_pinned()" in file.text
    assert [(d.line, d.rewrite) for d in file.declined] == [(2, "dispatcher")] and "2.10" in file.declined[0].reason
    file = _run("bool f(Holder h) {\n  return h.is_pinned();\n}\n", _rewrites(SCHEMAS))
    assert "h.is_pinned()" in file.text and "not declared a tensor" in file.declined[0].reason


@pytest.mark.integration
def test_the_build_torch_gives_the_schemas_once_and_what_is_emitted_compiles_at_2_10(tmp_path: Path) -> None:
    from assembler.builder.header_diagnostics import torch_include_roots
    from assembler.toolchain.torchenv import ensure_build_env

    env = ensure_build_env("2.13.0")
    ops = {"aten::is_pinned", "aten::softmax", "aten::argmax", "aten::relu_", "aten::permute", "aten::slice"}
    schemas = schemas_for(env.path / "bin" / "python", "2.13.0", ops, tmp_path / "cache")
    assert set(schemas) == ops and any(".int(" in s for s in schemas["aten::softmax"])
    assert schemas_for(None, "2.13.0", ops, tmp_path / "cache") == schemas  # the cache answers: torch is not asked
    text = ("#include <torch/csrc/stable/ops.h>\n#include <torch/headeronly/util/Exception.h>\n"
            "at::Tensor f(const at::Tensor& x, int64_t d) {\n"
            "  TORCH_CHECK(x.is_pinned() || x.is_cpu(), \"x\");\n"
            "  auto y = at::softmax(x, d).relu_();\n"
            "  return y.argmax(1, true);\n}\n"
            "at::Tensor g(const std::pair<at::Tensor, at::Tensor>& a, int64_t n) {\n"
            "  const auto& [b, c] = a;\n"
            "  return a.first.permute({1, 0}).slice(1, 0, n).squeeze(0);\n}\n")
    file = _run(text, _rewrites(schemas))
    assert file.made["dispatcher"] == 6 and file.made["squeeze"] == 1 and file.declined == []
    (tmp_path / helpers.NAME).write_text(helpers.header_text(None, file.helpers))
    (tmp_path / "new.cpp").write_text(f'#include "{helpers.NAME}"\n' + file.text)
    (tmp_path / "old.cpp").write_text(_run(text, _rewrites({})).text)  # no schemas: the methods are left
    flags = [flag for root in torch_include_roots(env.torch_dir)[::-1] for flag in ("-isystem", str(root))]
    command = ["g++", "-std=c++17", "-fsyntax-only", "-DTORCH_TARGET_VERSION=0x020a000000000000", *flags]
    new = subprocess.run([*command, str(tmp_path / "new.cpp")], capture_output=True, text=True, check=False)
    assert new.returncode == 0, new.stderr[-4000:]
    old = subprocess.run([*command, str(tmp_path / "old.cpp")], capture_output=True, text=True, check=False)
    assert old.returncode != 0 and "is_pinned" in old.stderr and "permute" in old.stderr


def test_how_a_value_is_spelled_tells_overloads_apart() -> None:
    """A braced list is only an int[], a ScalarType enumerator only a ScalarType, a number never a
    list: squeeze(0) is squeeze.dim, squeeze({0, 1}) squeeze.dims, view(dtype) view.dtype."""
    squeeze = ("aten::squeeze(Tensor(a) self) -> Tensor(a)", "aten::squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)",
               "aten::squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)")
    assert '"dim", x, static_cast<int64_t>(0))' in call("aten::squeeze", squeeze, ["x", "0"], method=True).text
    assert '"dims", x, std::vector<int64_t>{0, 1})' in call("aten::squeeze", squeeze, ["x", "{0, 1}"], method=True).text
    assert "several overloads" in call("aten::squeeze", squeeze, ["x", "d"], method=True).reason  # a name: either
    view = ("aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
            "aten::view.dtype(Tensor(a) self, ScalarType dtype) -> Tensor(a)")
    made = call("aten::view", view, ["x", "torch::headeronly::ScalarType::Int"], method=True)
    assert made.text.endswith('("aten::view", "dtype", x, torch::headeronly::ScalarType::Int)')
