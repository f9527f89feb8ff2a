"""The migration rules file (assembler/data/migration_rules.json): every rule matches what it
names and nothing next to it, comments and strings are never uses, a fallback yields to a
specific rule, the hazards are data, each rule's torch release agrees with torch 2.13.0's own
headers, and a broken rules file is an error naming the rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assembler.errors import InputError
from assembler.migration.lexer import blank_comments_and_strings
from assembler.migration.rules import Kind, load_rules, match_rules
from assembler.migration.versions import Versions, declaration_version

RULES = load_rules()

# rule id -> (code it must match, code next to it that it must not)
EXAMPLES: dict[str, tuple[str, str]] = {
    "include-torch-extension": ("#include <torch/extension.h>", "#include <torch/csrc/stable/library.h>"),
    "cuda-check": ("C10_CUDA_KERNEL_LAUNCH_CHECK();", "STD_CUDA_KERNEL_LAUNCH_CHECK();"),
    "include-torch-library": ("#include <torch/library.h>", "#include <torch/csrc/stable/library.h>"),
    "include-aten": ("#include <ATen/ATen.h>", "#include <ATen/cuda/CUDAContext.h>"),
    "include-aten-cuda": ("#include <c10/cuda/CUDAGuard.h>", "#include <cuda_runtime.h>"),
    "include-c10": ("#include <c10/util/Optional.h>", "#include <torch/headeronly/util/Exception.h>"),
    "include-torch-other": ("#include <torch/all.h>", "#include <torch/headeronly/core/ScalarType.h>"),
    "pybind11-module": ("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}", "PYBIND11_OVERRIDE(x)"),
    "pybind11-arg": ('py::arg("x")', "py::args"),
    "torch-library": ("TORCH_LIBRARY(ns, m) {}", "STABLE_TORCH_LIBRARY(ns, m) {}"),
    "torch-library-impl": ("TORCH_LIBRARY_IMPL(ns, CPU, m) {}", "STABLE_TORCH_LIBRARY_IMPL(ns, CPU, m) {}"),
    "impl-unboxed": ('m.impl("op", &ns::op);', 'm.impl("op", TORCH_BOX(&ns::op));'),
    "tensor-type": ("at::Tensor x;", "torch::stable::Tensor x;"),
    "scalar-type": ("x.scalar_type() == at::kHalf", "torch::headeronly::ScalarType::Half"),
    "scalar-type-name": ("at::ScalarType st = x.scalar_type();",
                         "torch::headeronly::ScalarType st = at::ScalarType::Half;"),
    "device": ("torch::Device d = x.device();", "torch::stable::Device d = x.device();"),
    "device-type": ("d.type() == torch::kCUDA", "d.type() == torch::headeronly::DeviceType::CUDA"),
    "int-array-ref": ("c10::IntArrayRef s = x.sizes();", "torch::headeronly::IntHeaderOnlyArrayRef s = x.sizes();"),
    "optional": ("c10::optional<at::Tensor> o = c10::nullopt;",
                 "std::optional<torch::stable::Tensor> o = std::nullopt;"),
    "string-view": ("void f(c10::string_view mode);", "void f(std::string_view mode);"),
    "scalar-type-e8m0": ("at::kFloat8_e8m0fnu", "torch::headeronly::ScalarType::Float8_e8m0fnu"),
    "element-type": ("x.mutable_data_ptr<at::BFloat16>()", "x.mutable_data_ptr<torch::headeronly::BFloat16>()"),
    "tensor-options": ("x.options().dtype(at::kFloat)", "x.optionsFor()"),
    "device-guard": ("const at::DeviceGuard g(x.device());",
                     "torch::stable::accelerator::DeviceGuard g(0); const assemble_stable::TensorDeviceGuard h(x);"),
    "cuda-stream": ("auto s = at::cuda::getCurrentCUDAStream();",
                    "aoti_torch_get_current_cuda_stream(0, &s); auto t = assemble_stable::current_cuda_stream();"),
    "tensor-checks": ('at::TensorArg a{q, "q", 1}; at::checkAllSameGPU("f", {a});',
                      'assemble_stable::TensorArg a{q, "q", 1}; assemble_stable::checkAllSameGPU("f", {a});'),
    "torch-check": ("TORCH_CHECK(ok);", "STD_TORCH_CHECK(ok);"),
    "internal-assert": ("TORCH_INTERNAL_ASSERT(ok);", "STD_TORCH_CHECK(ok);"),
    "c10-check": ("CHECK(ok);", "STD_TORCH_CHECK(ok);"),
    "unsqueeze": ("auto y = x.unsqueeze(0);", "auto y = torch::stable::unsqueeze(x, 0);"),
    "flatten": ("auto y = x.flatten(1);", "auto y = torch::stable::flatten(x, 1);"),
    "select": ("auto y = x.select(0, i);", "auto y = torch::stable::select(x, 0, i);"),
    "c10-check-op": ("CHECK_EQ(a, b);", "STD_TORCH_CHECK((a) == (b));"),
    "dtype": ("q.dtype() == at::kHalf || p->dtype() == d", "q.scalar_type() == d || o.dtype(at::kFloat)"),
    "t": ("auto wt = w.t();", "auto wt = torch::stable::transpose(w, 0, 1); w.at(0); w.t_(); w.it()"),
    "contiguous": ("x.contiguous()", "x.is_contiguous()"),
    "view": ("x.view({-1})", "torch::stable::view(x, {-1})"),
    "reshape": ("x.reshape({2, 3})", "torch::stable::reshape(x, {2, 3})"),
    "transpose": ("x.transpose(0, 1)", "torch::stable::transpose(x, 0, 1)"),
    "clone": ("x.clone()", "torch::stable::clone(x)"),
    "zero": ("x.zero_()", "torch::stable::zero_(x)"),
    "data-ptr": ("x.data_ptr<float>()", "x.const_data_ptr<float>()"),
    "empty-like": ("at::empty_like(x)", "torch::stable::empty_like(x)"),
    "empty": ("at::empty({n}, x.options())", "torch::stable::new_empty(x, {n})"),
    "zeros": ("torch::zeros({n})", "torch::stable::new_zeros(x, {n})"),
    "sum": ("at::sum_out(dk, x, {3})", "torch::stable::sum_out(dk, x, dims)"),
    "has-storage": ("x.has_storage()", "x.storage_offset()"),
    "aten-function": ("at::softmax(x, -1)", "torch::stable::amax(x, 1)"),
    "libtorch-name": ("c10::Scalar n;", "torch::headeronly::HeaderOnlyArrayRef<int64_t> n;"),
    # blog step 2: what moves to Python, listed by assess with that fix
    "autograd-function": ("struct Mul : public torch::autograd::Function<Mul> {};\n"
                          "TORCH_LIBRARY_IMPL(ns, Autograd, m) {}",
                          "TORCH_LIBRARY_IMPL(ns, CUDA, m) {} // torch.autograd.Function"),
    "meta-kernel": ("TORCH_LIBRARY_IMPL(ns, Meta, m) {}\nc10::SymInt n = x.sym_size(0);",
                    "TORCH_LIBRARY_IMPL(ns, CPU, m) {} auto meta = x.is_meta();"),
}


def _rules_matching(code: str) -> list[str]:
    return [match.rule.id for match in match_rules(RULES, blank_comments_and_strings(code))]


def test_every_rule_has_an_example() -> None:
    assert set(EXAMPLES) == {rule.id for rule in RULES.rules}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_matches_its_use_and_not_the_stable_form(rule_id: str) -> None:
    use, other = EXAMPLES[rule_id]
    assert rule_id in _rules_matching(use)
    assert rule_id not in _rules_matching(other)
    rule = RULES.by_id(rule_id)
    assert (rule.kind is Kind.NONE) == (rule.stable is None) and (rule.kind is not Kind.NONE or rule.way_round)


def test_comments_strings_and_inactive_lines_are_not_uses() -> None:
    code = '// at::Tensor in a comment\nconst char* s = "TORCH_CHECK(x)";\n/* x.view({1}) */\nat::Tensor t;\n'
    assert _rules_matching(code) == ["tensor-type"]
    assert match_rules(RULES, blank_comments_and_strings(code), active={1, 2, 3}) == []


def test_a_fallback_yields_to_the_specific_rule() -> None:
    assert _rules_matching("at::empty_like(x); at::softmax(x, 1); c10::Scalar n;") == ["empty-like", "aten-function",
                                                                                       "libtorch-name"]
    assert _rules_matching("#include <torch/extension.h>\nat::Tensor t;") == ["include-torch-extension", "tensor-type"]


def test_the_hazards_are_data() -> None:
    """The braced literal bound to std::optional<IntHeaderOnlyArrayRef>, has_storage from 2.14,
    Float8_e8m0fnu through boxing from 2.11: each rule says so, and raises the floor."""
    assert "braced literal" in (RULES.by_id("sum").hazard or "")
    assert RULES.by_id("has-storage").since == "2.14" and "2.14" in (RULES.by_id("has-storage").hazard or "")
    assert RULES.by_id("scalar-type-e8m0").since == "2.11" and "TORCH_BOX" in (RULES.by_id("scalar-type-e8m0").hazard
                                                                               or "")


def test_declaration_version_reads_the_guards() -> None:
    import re

    header = ("inline Tensor old_op(int x);\n#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0\n"
              "inline Tensor new_op(int x);\n"
              "#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_12_0\ninline Tensor newer_op();\n#endif\n#else\n"
              "inline Tensor alt_op();\n#endif\n")
    baseline = (2, 9, 0)
    assert declaration_version(header, re.compile(r"\bold_op\("), baseline) == (2, 9, 0)
    assert declaration_version(header, re.compile(r"\bnew_op\("), baseline) == (2, 10, 0)
    assert declaration_version(header, re.compile(r"\bnewer_op\("), baseline) == (2, 12, 0)
    # the #else is not "added in 2.10"
    assert declaration_version(header, re.compile(r"\balt_op\("), baseline) == (2, 9, 0)
    assert declaration_version(header, re.compile(r"\bmissing\("), baseline) is None


@pytest.mark.integration
def test_the_rules_releases_are_what_torch_2_13_headers_say(build_env_path: Path) -> None:
    from assembler.toolchain.torchenv import ensure_build_env

    versions = Versions(ensure_build_env("2.13.0").torch_dir / "include")
    checked = 0
    for rule in RULES.rules:
        provided = versions.of(rule)
        if provided.source != "rules data":
            assert provided.since == rule.since, rule.id
            checked += 1
    assert checked >= 25


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["rules"].append(dict(d["rules"][0])), "appears twice"),
    (lambda d: d["rules"][0].update(kind="maybe"), "include-torch-extension"),
    (lambda d: d["rules"][0].update(kind="none", way_round=None), "needs a way_round"),
    (lambda d: d["rules"][0].update(pattern="(unclosed"), "include-torch-extension"),
    (lambda d: d.update(schema=2), "schema 2"),
])
def test_a_broken_rules_file_names_the_rule(tmp_path: Path, change: object, message: str) -> None:
    from assembler.migration.rules import RULES_FILE

    data = json.loads(RULES_FILE.read_text())
    change(data)  # type: ignore[operator]
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=message):
        load_rules(path)
