"""The rewrites of `assemble migrate` (assembler/data/migration_rewrites.json) on text: each
rewrite turns its old form into the stable one, only on the lines the build compiles and
never in comments or strings; the hazards (a braced literal into std::optional<IntHeaderOnlyArrayRef>,
an API newer than torch-target, a receiver behind a pointer) are declined and reported; the
includes are swapped only when nothing unstable is left."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from assembler.migration import helpers
from assembler.migration.lexer import blank_comments_and_strings
from assembler.migration.pybind import ModuleEdit
from assembler.migration.rewrite import FileRewrite, _literal_messages, apply_step, load_rewrites, rewrite_includes

REWRITES = load_rewrites()

# rewrite id -> (before, after), each alone through every step, torch-target 2.10
EXAMPLES: dict[str, tuple[str, str]] = {
    "torch-library": ("TORCH_LIBRARY_IMPL(ns, CPU, m) {}", "STABLE_TORCH_LIBRARY_IMPL(ns, CPU, m) {}"),
    # FA2's launch templates: the check that keeps every .cu unit unstable (through c10/cuda/CUDAException.h)
    "cuda-check": ("C10_CUDA_CHECK(cudaFuncSetAttribute(k, a, s));\nC10_CUDA_KERNEL_LAUNCH_CHECK();\n"
                   "AT_CUDA_CHECK (cudaGetLastError());",
                   "STD_CUDA_CHECK(cudaFuncSetAttribute(k, a, s));\nSTD_CUDA_KERNEL_LAUNCH_CHECK();\n"
                   "STD_CUDA_CHECK (cudaGetLastError());"),
    "impl-box": ('m.impl("op", &ns::op);', 'm.impl("op", TORCH_BOX(&ns::op));'),
    # QuTLASS: TORCH_FN in a file whose pybind11 module migrate converts too
    "impl-fn": ('m.impl("op",   TORCH_FN(ns::op));', 'm.impl("op",   TORCH_BOX(&ns::op));'),
    "tensor-type": ("torch::Tensor f(const at::Tensor& x);",
                    "torch::stable::Tensor f(const torch::stable::Tensor& x);"),
    "scalar-type": ("x.scalar_type() == at::kHalf || y == torch::kInt64",
                    "x.scalar_type() == torch::headeronly::ScalarType::Half || "
                    "y == torch::headeronly::ScalarType::Long"),
    "scalar-type-enum": ("c10::ScalarType::BFloat16", "torch::headeronly::ScalarType::BFloat16"),
    "scalar-type-name": ("at::ScalarType f(torch::Dtype d);",
                         "torch::headeronly::ScalarType f(torch::headeronly::ScalarType d);"),
    "device-type-enum": ("d.type() == torch::kCUDA || d.type() == c10::DeviceType::CPU",
                         "d.type() == torch::headeronly::DeviceType::CUDA || d.type() == "
                         "torch::headeronly::DeviceType::CPU"),
    "device-type-name": ("c10::DeviceType kind;", "torch::headeronly::DeviceType kind;"),
    "device": ("torch::Device d = x.device();", "torch::stable::Device d = x.device();"),
    "device-string": ('at::Device d("cuda:0");', 'torch::stable::Device d("cuda:0");'),
    # FA2's CHECK_SHAPE: a tensor's sizes against a braced list, as its humans wrote it
    "sizes-equal": ('#define CHECK_SHAPE(x, ...) TORCH_CHECK(x.sizes() == torch::IntArrayRef({__VA_ARGS__}), "shape")',
                    '#define CHECK_SHAPE(x, ...) STD_TORCH_CHECK(x.sizes().equals({__VA_ARGS__}), "shape")'),
    "int-array-ref": ("void f(at::IntArrayRef s);", "void f(torch::headeronly::IntHeaderOnlyArrayRef s);"),
    "optional": ("c10::optional<int> n = c10::nullopt;", "std::optional<int> n = std::nullopt;"),
    "string-view": ("void f(c10::string_view mode);", "void f(std::string_view mode);"),
    "bfloat16": ("auto p = x.data_ptr<at::BFloat16>();", "auto p = x.mutable_data_ptr<torch::headeronly::BFloat16>();"),
    "half": ("c10::Half h;", "torch::headeronly::Half h;"),
    "torch-check": ('TORCH_CHECK(ok, "message");', 'STD_TORCH_CHECK(ok, "message");'),
    "dtype": ("void f(const at::Tensor& q) { auto d = q.dtype(); }",
              "void f(const torch::stable::Tensor& q) { auto d = q.scalar_type(); }"),
    "t": ("void f(at::Tensor w) { auto wt = w.t(); }",
          "void f(torch::stable::Tensor w) { auto wt = torch::stable::transpose(w, 0, 1); }"),
    "new-empty": ("void f(at::Tensor x) { auto y = at::empty({2, 3}, x.options().dtype(at::kInt)); }",
                  "void f(torch::stable::Tensor x) { auto y = torch::stable::new_empty(x, {2, 3}, "
                  "torch::headeronly::ScalarType::Int); }"),
    "contiguous": ("auto y = x.contiguous();", "auto y = torch::stable::contiguous(x);"),
    "view": ("auto y = x.contiguous().view({-1});",
             "auto y = torch::stable::view(torch::stable::contiguous(x), {-1});"),
    "reshape": ("auto y = t[0].reshape(s);", "auto y = torch::stable::reshape(t[0], s);"),
    "transpose": ("auto y = ns::make(x).transpose(0, 1);", "auto y = torch::stable::transpose(ns::make(x), 0, 1);"),
    "clone": ("auto y = x.clone();", "auto y = torch::stable::clone(x);"),
    # DeepGEMM's layout helpers: shape ops the stable API has as functions (on a declared tensor)
    "unsqueeze": ("void f(const at::Tensor& sf) { auto y = sf.unsqueeze(0); }",
                  "void f(const torch::stable::Tensor& sf) { auto y = torch::stable::unsqueeze(sf, 0); }"),
    "options-call": ("void f(at::Tensor b, int n) { auto x = at::from_blob(b.data_ptr(), {n}, {1}, "
                     "at::TensorOptions().device(b.device()).dtype(at::kInt)); }",
                     "void f(torch::stable::Tensor b, int n) { auto x = torch::stable::from_blob(b.data_ptr(), "
                     "{n}, {1}, b.device(), torch::headeronly::ScalarType::Int); }"),
    "view-dtype": ("void f(const at::Tensor& sf) { auto y = sf.view(at::kInt).view({-1}); }",
                   "void f(const torch::stable::Tensor& sf) { auto y = torch::stable::view("
                   'assemble_stable::call_aten<torch::stable::Tensor>("aten::view", "dtype", sf, '
                   "torch::headeronly::ScalarType::Int), {-1}); }"),
    "squeeze": ("void f(const std::pair<at::Tensor, at::Tensor>& a) { auto y = a.first.squeeze(0); }",
                "void f(const std::pair<torch::stable::Tensor, torch::stable::Tensor>& a) { auto y = "
                "torch::stable::squeeze(a.first, 0); }"),
    "flatten": ("void f(const at::Tensor& x) { auto y = x.flatten(1, 2); }",
                "void f(const torch::stable::Tensor& x) { auto y = torch::stable::flatten(x, 1, 2); }"),
    "select": ("void f(const at::Tensor& x, int i) { auto row = x.select(0, i); }",
               "void f(const torch::stable::Tensor& x, int i) { auto row = torch::stable::select(x, 0, i); }"),
    "zero": ("out.zero_();", "torch::stable::zero_(out);"),
    # FA2: the padded copies and the softmax_lse fill its humans rewrote by hand
    "fill": ("out.fill_(0);", "torch::stable::fill_(out, 0);"),
    # FlashMLA's sm100 prefill: c10's glog-spelled checks, reached through ATen/Tensor.h
    "c10-check": ("CHECK(q.scalar_type() == k.scalar_type());\nCHECK_EQ(q.size(-1), 64);",
                  "STD_TORCH_CHECK(q.scalar_type() == k.scalar_type());\nSTD_TORCH_CHECK((q.size(-1)) == (64));"),
    "copy": ("out.copy_(padded, true);", "torch::stable::copy_(out, padded, true);"),
    # the guard's type only: torch::stable::Tensor has get_device() too, and the brace form stays
    "cuda-guard": ("at::cuda::CUDAGuard device_guard{(char)q.get_device()};",
                   "torch::stable::accelerator::DeviceGuard device_guard{(char)q.get_device()};"),
    # FA2's braces stay (review's token criterion holds every token but the API's)
    "cuda-guard-device": ("const c10::cuda::OptionalCUDAGuard g(q.device());\n"
                          "at::cuda::CUDAGuard device_guard{q.device()};",
                          "const torch::stable::accelerator::DeviceGuard g(q.get_device_index());\n"
                          "torch::stable::accelerator::DeviceGuard device_guard{q.get_device_index()};"),
    # FA2's sparse API makes its guard in a helper that returns it
    "cuda-guard-cast": ("return at::cuda::CUDAGuard(static_cast<c10::DeviceIndex>(t.get_device()));",
                        "return torch::stable::accelerator::DeviceGuard(t.get_device_index());"),
    "cuda-guard-type": ("inline at::cuda::CUDAGuard make_guard(int index);",
                        "inline torch::stable::accelerator::DeviceGuard make_guard(int index);"),
    # a guard on a tensor's own device and the current stream: through the helper header migrate adds
    "device-guard": ("void f(const at::Tensor& x) { const at::DeviceGuard g(x.device()); }",
                     "void f(const torch::stable::Tensor& x) { const assemble_stable::TensorDeviceGuard g(x); }"),
    # a tensor whose size was read is defined: stable's guard of its index is the original's
    "cuda-guard-of": ("void f(at::Tensor x) { int n = x.size(0); at::cuda::OptionalCUDAGuard g(device_of(x)); }",
                      "void f(torch::stable::Tensor x) { int n = x.size(0); "
                      "torch::stable::accelerator::DeviceGuard g(x.get_device_index()); }"),
    "device-guard-of": ("void f(at::Tensor x) { at::cuda::OptionalCUDAGuard g(device_of(x)); }",
                        "void f(torch::stable::Tensor x) { assemble_stable::TensorDeviceGuard g(x); }"),
    "cuda-stream": ("cudaStream_t s = at::cuda::getCurrentCUDAStream();",
                    "cudaStream_t s = assemble_stable::current_cuda_stream();"),
    "tensor-checks": ('at::TensorArg q_arg{q, "q", 1};\nat::checkAllContiguous("f", {q_arg});',
                      'assemble_stable::TensorArg q_arg{q, "q", 1};\n'
                      'assemble_stable::checkAllContiguous("f", {q_arg});'),
    "device-properties": ("int n = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;",
                          "int n = assemble_stable::current_device_properties()->multiProcessorCount;"),
    # a method torch::stable lacks: through the dispatcher, the stack from the schema (SCHEMAS, as torch prints it)
    "dispatcher": ("bool f(const at::Tensor& x) { return x.is_pinned(); }",
                   'bool f(const torch::stable::Tensor& x) { return '
                   'assemble_stable::call_aten<bool>("aten::is_pinned", "", x, '
                   "std::nullopt); }"),
    "empty-like": ("auto y = at::empty_like(x);", "auto y = torch::stable::empty_like(x);"),
    "sum": ("auto s = at::sum(x, dims, true);", "auto s = torch::stable::sum(x, dims, true);"),
    "sum-out": ("at::sum_out(dk, x, dims);", "torch::stable::sum_out(dk, x, dims);"),
    "reshape-call": ("auto g = at::reshape(dk, {b, s, h});", "auto g = torch::stable::reshape(dk, {b, s, h});"),
    # FA2's kvcache forward pads the head dimension to a multiple of 8
    "pad": ("q_padded = torch::nn::functional::pad(q, torch::nn::functional::PadFuncOptions({0, 8 - d % 8}));",
            "q_padded = torch::stable::pad(q, {0, 8 - d % 8});"),
    # ... and unpads its output
    "index-narrow": ('void f(at::Tensor out) { out = out.index({"...", torch::indexing::Slice(torch::indexing::None, '
                     "d)}); }",
                     "void f(torch::stable::Tensor out) { out = torch::stable::narrow(out, out.dim() - 1, 0, d); }"),
    "scalar-type-e8m0": ("A_sf.scalar_type() == at::kFloat8_e8m0fnu",
                         "A_sf.scalar_type() == torch::headeronly::ScalarType::Float8_e8m0fnu"),
    # QuTLASS's kernels: an untemplated data_ptr() in a C cast, read or written by what the cast says
    "cast-data-ptr": ("void f(const at::Tensor& x, at::Tensor& o) { g((T*)x.data_ptr(), (T const*)x.data_ptr(), "
                      "(T*)o.data_ptr()); }",
                      "void f(const torch::stable::Tensor& x, torch::stable::Tensor& o) { "
                      "g(static_cast<T*>(const_cast<void*>(x.const_data_ptr())), static_cast<T "
                      "const*>(x.const_data_ptr()), "
                      "static_cast<T*>(o.mutable_data_ptr())); }"),
    "sizes-index": ("void f(at::Tensor A) { auto m = A.sizes()[0] * 2; }",
                    "void f(torch::stable::Tensor A) { auto m = A.size(0) * 2; }"),
    "nbytes": ("size_t f(const at::Tensor& w) { return 2 * w.nbytes(); }",
               "size_t f(const torch::stable::Tensor& w) { return 2 * (w.numel() * w.element_size()); }"),
    "strides-index": ("void f(at::Tensor A) { auto s = A.strides()[1]; }",
                      "void f(torch::stable::Tensor A) { auto s = A.stride(1); }"),
    "data-ptr": ("const float* p = x.data_ptr<float>();\nfloat* q = y.data_ptr<float>();",
                 "const float* p = x.const_data_ptr<float>();\nfloat* q = y.mutable_data_ptr<float>();"),
}

TARGETS = {"scalar-type-e8m0": "2.11"}
# an example whose rewrite needs a torch-target above 2.10
SCHEMAS = {"aten::is_pinned": ("aten::is_pinned(Tensor self, Device? device=None) -> bool",)}


def _run(text: str, target: str = "2.10", active: list[bool] | None = None,
         style: dict[str, str] | None = None) -> FileRewrite:
    file = FileRewrite(text, active if active is not None else [True] * (text.count("\n") + 1))
    rewrites = replace(REWRITES, rewrites=tuple(replace(r, schemas=SCHEMAS) if r.type == "dispatcher" else r
                                                for r in REWRITES.rewrites))
    for step in rewrites.steps:
        apply_step(rewrites.of_step(step), file, target, style or {})
    return file


def test_every_rewrite_has_an_example() -> None:
    assert set(EXAMPLES) == {rewrite.id for rewrite in REWRITES.rewrites}


@pytest.mark.parametrize("rewrite_id", sorted(EXAMPLES))
def test_each_rewrite(rewrite_id: str) -> None:
    before, after = EXAMPLES[rewrite_id]
    file = _run(before, target=TARGETS.get(rewrite_id, "2.10"))
    assert file.text == after
    assert file.made[rewrite_id] >= 1 and not file.declined


def test_comments_strings_and_lines_the_build_skips_are_left_alone() -> None:
    text = '// at::Tensor x.contiguous()\nconst char* s = "TORCH_CHECK(x.view({1}))";\nat::Tensor t = u.contiguous();\n'
    assert _run(text).text == ('// at::Tensor x.contiguous()\nconst char* s = "TORCH_CHECK(x.view({1}))";\n'
                               "torch::stable::Tensor t = torch::stable::contiguous(u);\n")
    # the third line is behind an #ifdef the build does not set
    assert _run(text, active=[True, True, False, True]).text == text


def test_a_check_the_build_skips_is_rewritten_only_with_literal_messages_once_proven() -> None:
    """The #else of an arch dispatch: TORCH_CHECK(false, "...") there becomes the stable macro
    once migrate's probe compiled it (unbuilt_proven); a message that streams a local stays."""
    text = ("#if ARCH == 90\nrun();\n#else\nTORCH_CHECK(false, \"no arch\", 90);\n"
            "TORCH_CHECK(n > 0, \"n is \", n);\nTORCH_CHECK(ok);\n#endif\n")
    active = [True, True, True, False, False, False, True, True]
    assert _run(text, active=active).text == text  # not proven: nothing on a skipped line
    proven = replace(REWRITES, rewrites=tuple(replace(r, unbuilt_proven=bool(r.unbuilt)) for r in REWRITES.rewrites))
    file = FileRewrite(text, list(active))
    for step in proven.steps:
        apply_step(proven.of_step(step), file, "2.10", {})
    assert file.text == text.replace('TORCH_CHECK(false', 'STD_TORCH_CHECK(false').replace(
        "TORCH_CHECK(ok)", "STD_TORCH_CHECK(ok)")
    assert file.unbuilt == {"torch-check": 2} and file.made["torch-check"] == 2
    # below the rewrite's torch release, not even there
    below = FileRewrite(text, list(active))
    for step in proven.steps:
        apply_step(proven.of_step(step), below, "2.8", {})
    assert below.text == text


@pytest.mark.parametrize(("call", "literal"), [
    ('TORCH_CHECK(false, "Unsupported CUDA arch")', True), ("TORCH_CHECK(x < 3)", True),
    ('TORCH_CHECK(a, "x" "y", 1.5e-3f, 0x1Fu, 1\'000)', True), ('TORCH_CHECK(a, "x", n)', False),
    ("TORCH_CHECK(a, 1_kb)", False), ('TORCH_CHECK(std::is_same<A, B>::value, "m")', False),
    ('TORCH_CHECK(a, u8"x")', False), ('TORCH_CHECK(a, at::toString(t))', False)])
def test_literal_messages(call: str, literal: bool) -> None:
    code = blank_comments_and_strings(call)
    assert _literal_messages(code, code.index("(")) is literal


def test_a_braced_literal_into_an_optional_array_ref_names_its_vector() -> None:
    """A braced dims argument would bind to std::optional<IntHeaderOnlyArrayRef> and dangle: it
    becomes a std::vector temporary, alive to the end of the call (FA2's backward). A braced
    list inside another argument is that call's own."""
    file = _run("at::sum_out(dk, at::reshape(dkx, {b, s, 2}), {3});\nauto s = at::sum(x, {0, 1});")
    assert file.text == ("torch::stable::sum_out(dk, torch::stable::reshape(dkx, {b, s, 2}), "
                         "std::vector<int64_t>{3});\nauto s = torch::stable::sum(x, std::vector<int64_t>{0, 1});")
    assert not file.declined


def test_index_with_one_bounded_slice_is_a_narrow() -> None:
    text = ("void f(at::Tensor kc, int n) {\n"
            "  kc.copy_(kc.index({torch::indexing::Slice(), torch::indexing::Slice(2, n + 1)}));\n"
            '  auto z = kc.index({"...", torch::indexing::Slice(3)});\n'
            "  auto w = kc.index({0, torch::indexing::Slice(3)});\n}\n")
    file = _run(text)
    lines = file.text.splitlines()
    assert lines[1] == "  torch::stable::copy_(kc, torch::stable::narrow(kc, 1, 2, (n + 1) - 2));"
    assert lines[2] == "  auto z = torch::stable::narrow(kc, kc.dim() - 1, 3, kc.size(kc.dim() - 1) - 3);"
    assert [(d.line, d.rewrite) for d in file.declined] == [(4, "index-narrow")]  # an integer index: select


def test_a_temporary_receiver_of_copy_is_named_in_a_block_on_its_line() -> None:
    """copy_/fill_/zero_ take their tensor by non-const reference: the view FA2 copies into is
    named first (a block, so an unbraced if body stays one statement); in an expression it is declined."""
    text = ("void f(at::Tensor out, std::optional<at::Tensor> out_, int n) {\n"
            "  if (out_.has_value()) out_.value().view({n, 2}).copy_(out);\n"
            "  auto k = out.view({n}).zero_();\n}\n")
    file = _run(text)
    assert file.text.splitlines()[1] == ("  if (out_.has_value()) { torch::stable::Tensor out_view = "
                                         "torch::stable::view(out_.value(), {n, 2}); torch::stable::copy_(out_view, "
                                         "out); }")
    assert [(d.line, d.rewrite) for d in file.declined] == [(3, "zero")]


def test_a_function_taking_options_to_allocate_takes_the_tensor() -> None:
    """FA2's set_params_splitkv(..., c10::TensorOptions opts), called with q's options: it takes
    q, its allocations become new_empty, and the callers' options variable goes."""
    text = ("void split(int n, struct c10::TensorOptions opts) {\n"
            "  at::Tensor acc = torch::empty({n, 4}, opts.dtype(at::kFloat));\n}\n"
            "void fwd(at::Tensor& q) {\n  auto opts = q.options();\n"
            "  auto lse = torch::empty({2, 3}, opts.dtype(at::kFloat));\n  split(2, opts);\n}\n"
            "void other(int n, at::TensorOptions o) { auto p = o.device(); }\n")
    lines = _run(text).text.splitlines()
    assert lines[0] == "void split(int n, const torch::stable::Tensor& opts) {"
    assert lines[1] == ("  torch::stable::Tensor acc = torch::stable::new_empty(opts, {n, 4}, "
                        "torch::headeronly::ScalarType::Float);")
    assert lines[4] == "" and lines[6] == "  split(2, q);"
    assert lines[8] == "void other(int n, at::TensorOptions o) { auto p = o.device(); }"  # not only to allocate


@pytest.mark.parametrize(("old", "new"), [
    ("torch::kFloat8_e4m3fn", "Float8_e4m3fn"), ("at::kFloat8_e5m2", "Float8_e5m2"),
    ("c10::kComplexFloat", "ComplexFloat"),
    ("at::kComplexDouble", "ComplexDouble"),
])
def test_every_scalar_type_assess_calls_mechanical_is_rewritten(old: str, new: str) -> None:
    """What the scalar-type rule of assess marks mechanical, the rewrite makes (DeepGEMM's
    torch::kFloat8_e4m3fn was left before)."""
    from assembler.migration.rules import load_rules, match_rules

    assert [m.rule.id for m in match_rules(load_rules(), f"auto t = {old};", {1})] == ["scalar-type"]
    assert _run(f"auto t = {old};").text == f"auto t = torch::headeronly::ScalarType::{new};"


def test_nothing_newer_than_the_torch_target() -> None:
    file = _run("auto y = x.contiguous();\nTORCH_CHECK(ok);", target="2.9")
    assert file.text == "auto y = x.contiguous();\nSTD_TORCH_CHECK(ok);"  # STD_TORCH_CHECK is 2.9, contiguous 2.10
    assert [(d.line, d.rewrite) for d in file.declined] == [(1, "contiguous")]
    assert "torch-target 2.9" in file.declined[0].reason


@pytest.mark.parametrize(("text", "reason"), [
    ("auto y = p->contiguous();", "pointer"),
    ("auto y = x.contiguous(at::MemoryFormat::ChannelsLast);", "more than 0 arguments"),
    ("auto y = at::empty_like(x, x.options());", "TensorOptions"),
])
def test_what_is_not_mechanical_is_declined_with_the_reason(text: str, reason: str) -> None:
    file = _run(text)
    assert any(reason in declined.reason for declined in file.declined)
    assert "contiguous(" in file.text or "empty_like(" in file.text
    assert "torch::stable::contiguous" not in file.text and "torch::stable::empty_like" not in file.text


def test_data_ptr_through_an_optional_tensor() -> None:
    """The stable tensor has no templated data_ptr: opt->data_ptr<T>() is const or mutable like x.data_ptr<T>()."""
    text = ("void f(const std::optional<at::Tensor>& b, std::optional<const at::Tensor>& c, Params* p) {\n"
            "  const float* bp = b->data_ptr<float>();\n  float* wp = b->data_ptr<float>();\n"
            "  const float* cp = c->data_ptr<float>();\n  auto* q = p->data_ptr<float>();\n}")
    lines = _run(text).text.splitlines()
    assert lines[1:5] == ["  const float* bp = b->const_data_ptr<float>();",
                          "  float* wp = b->mutable_data_ptr<float>();",
                          "  const float* cp = c->const_data_ptr<float>();",
                          "  auto* q = p->data_ptr<float>();"]


@pytest.mark.parametrize(("use", "method"), [
    ("float& v = p[i];\n  v = 1.0f;", "mutable_data_ptr"),  # written through a reference to the element
    ("auto& v = p[i];\n  v += 1.0f;", "mutable_data_ptr"),
    ("const float& v = p[i];\n  s += v;", "const_data_ptr"),
    ("s += p[i];", "const_data_ptr"),
])
def test_an_element_bound_to_a_non_const_reference_is_written(use: str, method: str) -> None:
    text = f"void f(at::Tensor o, int i, float s) {{\n  float* p = o.data_ptr<float>();\n  {use}\n}}"
    assert f"p = o.{method}<float>();" in _run(text).text


def test_data_ptr_style_mutable() -> None:
    assert _run("const float* p = x.data_ptr<float>();",
                style={"data-ptr": "mutable"}).text == "const float* p = x.mutable_data_ptr<float>();"


def test_a_chain_continued_on_the_next_line_keeps_its_line_break() -> None:
    """FlashMLA's ``q = q.view(...).transpose(2, 3)`` then ``.reshape({...});`` on the next line:
    the receiver is the whole chain above, not an empty one, and the line count holds."""
    text = "void f(at::Tensor q, int64_t b) {\n  q = q.view({b, 4}).transpose(0, 1)\n      .reshape({4, b});\n}"
    file = _run(text)
    assert file.text == ("void f(torch::stable::Tensor q, int64_t b) {\n  q = "
                         "torch::stable::reshape(torch::stable::transpose("
                         "torch::stable::view(q, {b, 4}), 0, 1),\n      {4, b});\n}")
    assert not file.declined


def test_includes_swap_only_when_nothing_unstable_is_left() -> None:
    text = "#include <torch/extension.h>\n#include <vector>\n#include <ATen/ATen.h>\nat::Tensor f();"
    functional = _run("#include <torch/nn/functional.h>\n#include <vector>\nat::Tensor f();")  # FlashMLA's, FA2's
    rewrite_includes(functional, functional.includes, REWRITES.unstable_includes, keep_unstable=False)
    assert functional.text == "#include <torch/csrc/stable/tensor.h>\n#include <vector>\ntorch::stable::Tensor f();"
    file = _run(text)
    rewrite_includes(file, file.includes, REWRITES.unstable_includes, keep_unstable=False)
    assert file.text == "#include <torch/csrc/stable/tensor.h>\n#include <vector>\ntorch::stable::Tensor f();"
    kept = _run(text)
    rewrite_includes(kept, kept.includes, REWRITES.unstable_includes, keep_unstable=True)
    assert kept.text.splitlines()[:4] == ["#include <torch/extension.h>", "#include <vector>", "#include <ATen/ATen.h>",
                                          "#include <torch/csrc/stable/tensor.h>"]


def test_a_cuda_header_gives_its_own_line_once_nothing_needs_it() -> None:
    """The CUDA context header becomes the CUDA runtime's on its own line, inside its #ifdef;
    the guard's header goes; while a use is left, both stay."""
    text = ("#include <torch/extension.h>\n#ifdef WITH_CUDA\n#include <ATen/cuda/CUDAContext.h>\n"
            "#include <c10/cuda/CUDAGuard.h>\n#endif\nat::Tensor f(cudaStream_t s);")
    file = _with_includes(text)
    assert file.text == ("#include <torch/csrc/stable/tensor.h>\n#ifdef WITH_CUDA\n#include <cuda_runtime.h>\n"
                         "#endif\ntorch::stable::Tensor f(cudaStream_t s);")
    assert len(file.active) == file.text.count("\n") + 1
    # a file that calls nothing of the runtime, and includes no header of its own after, does without it
    # (FA2's flash_api_torch_lib.cpp included c10/cuda/CUDAStream.h last)
    unused = _run(text.replace("cudaStream_t s", ""))
    rewrite_includes(unused, unused.includes, REWRITES.unstable_includes, False, (), REWRITES.replaced_includes)
    assert unused.text == "#include <torch/csrc/stable/tensor.h>\n#ifdef WITH_CUDA\n#endif\ntorch::stable::Tensor f();"
    assert len(unused.active) == unused.text.count("\n") + 1
    kept = _run(text)
    rewrite_includes(kept, kept.includes, REWRITES.unstable_includes, True, (), REWRITES.replaced_includes)
    assert "#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAGuard.h>" in kept.text


@pytest.mark.parametrize(("parameters", "args", "returns", "schema", "wrapped"), [
    (["const at::Tensor& x", "double eps"], [("x", None), ("eps", "1e-6")], "at::Tensor",
     "f(Tensor x, float eps=1e-6) -> Tensor", False),
    (["const at::Tensor& x", "const int& groups"], [], "at::Tensor", "f(Tensor x, int groups) -> Tensor", True),
    (["const std::tuple<at::Tensor, std::optional<at::Tensor>>& affine"], [("affine", None)],
     "std::tuple<at::Tensor, at::Tensor>",
     "f(Tensor affine_0, Tensor? affine_1) -> (Tensor, Tensor)", True),
    (["std::optional<int> n", "bool flag"], [("n", "py::none()"), ("flag", "true")], "void",
     "f(int? n=None, bool flag=True) -> ()", True),
    (["const std::vector<at::Tensor>& xs"], [], "std::vector<at::Tensor>", "f(Tensor[] xs) -> Tensor[]", False),
    (["int64_t T", "int64_t H"], [("T", None), ("H", None)], "int64_t", "f(int T, int H) -> int", False),
    (["std::optional<torch::Tensor> state = std::nullopt"], [("state", "py::none()")], "torch::Tensor",
     "f(Tensor? state=None) -> Tensor", False),
    # DeepGEMM's shapes: a pair taken and returned, a tuple of tensors and ints returned, a dtype defaulted
    (["const std::pair<torch::Tensor, torch::Tensor>& a"], [], "std::pair<torch::Tensor, torch::Tensor>",
     "f(Tensor a_0, Tensor a_1) -> (Tensor, Tensor)", True),
    (["const at::Tensor& x", "const at::ScalarType& dtype"], [("x", None), ("dtype", "torch::kFloat32")],
     "std::tuple<at::Tensor, at::Tensor, int, int>",
     "f(Tensor x, ScalarType dtype=float32) -> (Tensor, Tensor, int, int)", True),
    (["const std::vector<int64_t>& rows", "std::vector<int> sizes"], [], "std::vector<int64_t>",
     "f(int[] rows, int[] sizes) -> int[]", True),
    (["at::IntArrayRef shape"], [], "at::Tensor", "f(int[] shape) -> Tensor", True),
    (["const std::optional<const at::Tensor>& bias"], [], "at::Tensor", "f(Tensor? bias) -> Tensor", True),
    (["c10::string_view mode"], [("mode", '"fast"')], "void", "f(str mode='fast') -> ()", True),
])
def test_a_pybind11_binding_becomes_a_schema(parameters: list[str], args: list[tuple[str, str | None]], returns: str,
                                             schema: str, wrapped: bool) -> None:
    from assembler.migration.pybind import Binding, operator_for

    operator = operator_for(Binding("f", "ns::f", args), returns, parameters)
    assert operator.schema == schema
    assert (operator.wrapper is not None) == wrapped
    assert operator.impl == ("&f_boxed" if wrapped else "&ns::f")


@pytest.mark.parametrize(("parameters", "returns", "reason"), [
    (["const std::vector<std::string>& names"], "at::Tensor", "std::vector"),
    (["const at::Tensor& x"], "at::Tensor*", "return type"),
    # DeepGEMM's get_symm_buffer_size_for_mega_moe: a size and a callable that slices a buffer
    (["const int& n"], "std::tuple<int64_t, std::function<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&)>>",
     r"return type std::tuple<int64_t, std::function<std::tuple<at::Tensor, at::Tensor>\(const at::Tensor&\)>> "
     "holds a std::function"),
    (["std::function<void(int)> callback"], "void", "is a std::function"),
])
def test_a_binding_without_a_schema_type_is_refused(parameters: list[str], returns: str, reason: str) -> None:
    from assembler.migration.pybind import Binding, Unconvertible, operator_for

    with pytest.raises(Unconvertible, match=reason):
        operator_for(Binding("f", "ns::f", []), returns, parameters)


def test_a_check_macro_the_project_defines_or_that_streams_a_message_is_left() -> None:
    """c10's CHECK is no use where the project #defines its own (assess counts none, migrate
    rewrites none); ``CHECK(c) << "m";`` has no stable form of its own: declined at its line."""
    from assembler.migration.rules import defined_macros, load_rules, match_rules

    text = 'void f(int a) {\n  CHECK(a > 0) << "a must be positive";\n  CHECK(a < 9);\n}\n'
    file = FileRewrite(text, [True] * 5)
    apply_step(REWRITES.of_step("headers-and-types"), file, "2.10", {})
    assert file.text.split("\n")[1:3] == ['  CHECK(a > 0) << "a must be positive";', "  STD_TORCH_CHECK(a < 9);"]
    assert [(d.line, d.rewrite) for d in file.declined] == [(2, "c10-check")]
    assert "streamed after it" in file.declined[0].reason
    own = defined_macros(["#pragma once\n#  define CHECK(x) assert(x)\n"])
    assert own == frozenset({"CHECK"})
    mine = FileRewrite(text, [True] * 5, macros=own)
    apply_step(REWRITES.of_step("headers-and-types"), mine, "2.10", {})
    assert mine.text == text and not mine.declined
    rules = load_rules()
    assert [m.rule.id for m in match_rules(rules, text)] == ["c10-check", "c10-check"]
    assert match_rules(rules, text, defined=own) == []


def test_a_signature_the_token_reading_misses_is_read_from_the_tree() -> None:
    """A return type with parentheses in its template arguments (DeepGEMM's mega.hpp) was
    reported as "no declaration found"; the tree gives its signature, so the reason is the
    real one."""
    from assembler.migration.assess import _signature

    code = ("static std::tuple<int64_t, std::function<std::tuple<torch::Tensor>(const torch::Tensor&)>>\n"
            "get_sizes(\n    const int& num_ranks,\n    const std::string& activation) {\n  return {};\n}\n")
    assert _signature({Path("mega.hpp"): code}, "get_sizes") == (
        "std::tuple<int64_t, std::function<std::tuple<torch::Tensor>(const torch::Tensor&)>>",
        ["const int& num_ranks", "const std::string& activation"])
    assert _signature({Path("mega.hpp"): code}, "get_other") is None


MUTATED = [  # (parameters, the schema's arguments): a tensor taken by non-const reference is written to
    (["at::Tensor& out", "const at::Tensor& x"], "Tensor(a!) out, Tensor x"),
    (["torch::Tensor &out", "at::Tensor const& x", "at::Tensor& lse"], "Tensor(a!) out, Tensor x, Tensor(b!) lse"),
    (["std::vector<at::Tensor>& outs", "int64_t n"], "Tensor(a!)[] outs, int n"),
    (["at::Tensor x", "const torch::Tensor& y"], "Tensor x, Tensor y"),  # by value or const: read only
]


@pytest.mark.parametrize(("parameters", "arguments"), MUTATED)
def test_a_tensor_taken_by_non_const_reference_is_mutated(parameters: list[str], arguments: str) -> None:
    from assembler.migration.pybind import Binding, operator_for

    operator = operator_for(Binding("f", "ns::f", []), "void", parameters)
    assert operator.schema == f"f({arguments}) -> ()"
    assert operator.wrapper is None and operator.impl == "&ns::f"  # TORCH_BOX hands a reference to its unboxed value


def test_the_wrappers_hand_the_function_its_own_types() -> None:
    """What TORCH_BOX unboxes (a std::optional<Tensor>, int64_t vectors, a std::tuple) becomes what the
    function takes (an optional<const Tensor> it may hold by reference, a pair, std::vector<int>) and back."""
    from assembler.migration.pybind import Binding, operator_for

    optional = operator_for(Binding("f", "ns::f", []), "at::Tensor", ["std::optional<const at::Tensor>& bias"])
    assert optional.wrapper == ("at::Tensor f_boxed(const std::optional<at::Tensor>& bias) {\n"
                                "  std::optional<const at::Tensor> bias_arg = bias;\n  return ns::f(bias_arg);\n}")
    pair = operator_for(Binding("f", "ns::f", [("a", None)]), "std::pair<at::Tensor, at::Tensor>",
                        ["const std::pair<at::Tensor, at::Tensor>& a"])
    assert pair.wrapper is not None and "std::tuple<at::Tensor, at::Tensor> f_boxed(" in pair.wrapper
    joined = "std::pair<at::Tensor, at::Tensor>(a_0, a_1)"
    assert f"return std::tuple<at::Tensor, at::Tensor>(ns::f({joined}));" in pair.wrapper
    assert pair.python_params == ["a"] and pair.python_args == ["*a"]  # the caller still passes the pair
    vectors = operator_for(Binding("f", "ns::f", []), "std::vector<int>", ["std::vector<int> sizes"])
    assert vectors.wrapper == ("std::vector<int64_t> f_boxed(std::vector<int64_t> sizes) {\n"
                               "  auto result = ns::f(std::vector<int>(sizes.begin(), sizes.end()));\n"
                               "  return std::vector<int64_t>(result.begin(), result.end());\n}")
    dtype = operator_for(Binding("f", "ns::f", [("x", None), ("dtype", "at::ScalarType::Half")]), "at::Tensor",
                         ["const at::Tensor& x", "at::ScalarType dtype"])
    assert dtype.schema == "f(Tensor x, ScalarType dtype=float16) -> Tensor" and dtype.wrapper is None
    assert dtype.python_params == ["x", "dtype=_assemble_torch.float16"]  # the forwarder's default is torch's


def test_a_variant_is_declined_by_name() -> None:
    from assembler.migration.pybind import Binding, Unconvertible, operator_for

    with pytest.raises(Unconvertible, match=r"std::variant<int, std::tuple<int, int>> has no schema form"):
        operator_for(Binding("f", "ns::f", []), "void", ["const std::variant<int, std::tuple<int, int>>& value"])


def test_a_mutated_tensor_keeps_its_reference_through_a_wrapper() -> None:
    from assembler.migration.pybind import Binding, operator_for

    operator = operator_for(Binding("f", "ns::f", []), "void", ["at::Tensor& out", "const int& groups"])
    assert operator.schema == "f(Tensor(a!) out, int groups) -> ()"
    assert operator.wrapper is not None and "void f_boxed(at::Tensor& out, int64_t groups)" in operator.wrapper


def test_alias_letters_are_distinct_past_z() -> None:
    from assembler.migration.pybind import _alias

    letters = [_alias(i) for i in range(30)]
    assert letters[:3] == ["a", "b", "c"] and letters[25:28] == ["z", "aa", "ab"] and len(set(letters)) == 30


@pytest.mark.integration
def test_torch_parses_the_mutation_annotations(build_env_path: Path) -> None:
    """The build torch's torch._C.parse_schema takes every generated schema, and reads each
    mutated argument as written to in its own alias set."""
    from assembler.migration.pybind import Binding, operator_for, parse_schemas

    schemas = [operator_for(Binding("f", "ns::f", []), "at::Tensor", parameters).schema for parameters, _ in MUTATED]
    schemas += ["f(Tensor x, ScalarType dtype=float32) -> (Tensor, Tensor, int, int)", "f(int[] rows) -> int[]"]
    assert parse_schemas(build_env_path / "bin" / "python", schemas) == [(schema, None) for schema in schemas]
    probe = ("import sys, torch\ns = torch._C.parse_schema(sys.argv[1])\n"
             "print([(a.name, a.alias_info.is_write, sorted(a.alias_info.before_set)) for a in s.arguments if "
             "a.alias_info])")
    result = subprocess.run([str(build_env_path / "bin" / "python"), "-c", probe, schemas[1]], capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == "[('out', True, ['a']), ('lse', True, ['b'])]"


HANDED_OVER = """\
namespace api {
static void register_apis(pybind11::module_& m) {
    m.def("gemm", &gemm, py::arg("a"), py::arg("b") = 1);
    m.def("layout", &layout);
}
}
PYBIND11_MODULE(_C, m) {
    m.doc() = "doc";
    api::register_apis(m);
}
"""


def test_the_surface_counts_the_defs_of_a_function_the_module_is_handed_to(tmp_path: Path) -> None:
    from assembler.migration.assess import pybind11_surface
    from assembler.migration.lexer import blank_comments_and_strings

    surface = pybind11_surface({tmp_path / "api.cpp": blank_comments_and_strings(HANDED_OVER)})
    assert (surface.modules, surface.helpers, surface.defs, surface.args) == (1, 1, 2, 2)


FORWARDED = """\
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale_shift", &ns::scale_shift, py::arg("x"), py::arg("affine"), py::arg("eps") = 1e-5f);
#ifdef WITH_LEGACY
  m.def("legacy", &ns::legacy);
#endif
}
"""
SIGNATURES = {"scale_shift": ("at::Tensor",
                              ["const at::Tensor& x", "const std::tuple<at::Tensor, std::optional<at::Tensor>>& affine",
                                             "double eps"]),
              "legacy": ("at::Tensor", ["const at::Tensor& x", "bool flag"])}


def test_the_generated_module_keeps_the_pybind11_functions_as_forwarders() -> None:
    """A setuptools build imports the module by its old name: its functions stay, with their
    py::arg names and defaults, each calling torch.ops; the tuple the caller passes is split
    into the schema's arguments; a guarded binding's forwarder keeps its guard."""
    from assembler.migration.pybind import convert_modules

    edits, declined = convert_modules(FORWARDED, "dep", "CUDA", True, SIGNATURES.get)
    assert declined == [] and edits[0].schemas == ["scale_shift(Tensor x, Tensor affine_0, Tensor? affine_1, "
                                                   "float eps=1e-5) -> Tensor",
                                                   "legacy(Tensor x, bool flag) -> Tensor"]
    text = edits[0].replacement
    assert ('    "def scale_shift(x, affine, eps=1e-5):\\n"\n'
            '    "    return _assemble_torch.ops.dep.scale_shift(x, *affine, eps)\\n"\n') in text
    assert ('#ifdef WITH_LEGACY\n    "def legacy(x, flag):\\n"\n'
            '    "    return _assemble_torch.ops.dep.legacy(x, flag)\\n"\n#endif') in text
    assert "Py_CompileString(assemble_forwarders" in text and "PyEval_EvalCode(code, globals, globals)" in text
    # a helper or cmake build makes its own PyInit: no forwarders there
    helper, _ = convert_modules(FORWARDED, "dep", "CUDA", False, SIGNATURES.get)
    assert "assemble_forwarders" not in helper[0].replacement
    # ... but upstream's setup.py builds it: the PyInit of the module that setup.py names (only torch's
    # BuildExtension defines TORCH_EXTENSION_NAME; this way the proof compiles the PyInit in any build)
    upstream, _ = convert_modules(FORWARDED, "dep", "CUDA", True, SIGNATURES.get, pyinit_module="_CUDA")
    assert "// _CUDA: the module the project's own setup.py builds from this file." in upstream[0].replacement
    assert "ASSEMBLE_PYINIT(_CUDA)(void)" in upstream[0].replacement
    assert "TORCH_EXTENSION_NAME" not in upstream[0].replacement
    # and a module named by itself keeps its name
    named, _ = convert_modules(FORWARDED.replace("TORCH_EXTENSION_NAME", "_C"), "dep", "CUDA", True,
                               SIGNATURES.get, pyinit_module="_CUDA")
    assert "ASSEMBLE_PYINIT(_C)(void)" in named[0].replacement and "setup.py builds" not in named[0].replacement


def test_a_forwarder_for_a_name_python_cannot_spell() -> None:
    """A py::arg named like a Python keyword: the forwarder passes everything through, or, where
    it would have to split a tuple, the module is declined with the reason."""
    from assembler.migration.pybind import convert_modules

    plain = FORWARDED.replace('py::arg("eps")', 'py::arg("lambda")')
    edits, declined = convert_modules(plain.replace('py::arg("affine"), ', "").replace("scale_shift", "scale"), "dep",
                                      "CPU", True,
                                      {"scale": ("at::Tensor", ["const at::Tensor& x", "double lambda_"]),
                                       **SIGNATURES}.get)
    assert declined == [] and '"def scale(*args, **kwargs):\\n"' in edits[0].replacement
    edits, declined = convert_modules(plain, "dep", "CPU", True, SIGNATURES.get)
    assert edits == [] and declined == [(1, "scale_shift: a parameter name is not a Python identifier, so its "
                                            "forwarder cannot split the tuple")]


@pytest.mark.integration
def test_the_forwarders_compile_and_run_in_the_limited_api(tmp_path: Path, build_env_path: Path) -> None:
    """The generated PyInit, compiled with g++ against the build env's Python headers with
    Py_LIMITED_API, creates a module whose forwarders call torch.ops (an operator defined here
    with torch.library), the tuple split."""
    from assembler.migration.pybind import _pyinit, forwarders, operator_for, parse_bindings

    code = FORWARDED.replace("TORCH_EXTENSION_NAME", "fwd_probe")
    body_start, body_end = code.index("{") + 1, code.rindex("}")
    bindings = parse_bindings(code, code, body_start, body_end, "m")
    operators = [operator_for(b, *SIGNATURES[b.name]) for b in bindings]
    source = "#include <Python.h>\n" + "\n".join(_pyinit("fwd_probe",
                                                         forwarders("probe_ns", operators, bindings))) + "\n"
    (tmp_path / "probe.cpp").write_text(source)
    python = build_env_path / "bin" / "python"
    include = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(["g++", "-shared", "-fPIC", "-DPy_LIMITED_API=0x03090000", f"-I{include}", "probe.cpp", "-o",
                    "fwd_probe.abi3.so"],
                   cwd=tmp_path, check=True)
    probe = """\
import sys, torch
lib = torch.library.Library("probe_ns", "DEF")
lib.define("scale_shift(Tensor x, Tensor affine_0, Tensor? affine_1, float eps=1e-5) -> Tensor")
lib.impl("scale_shift", lambda x, s, b, eps=1e-5: x * s + (b if b is not None else 0) + eps, "CPU")
sys.path.insert(0, sys.argv[1])
import fwd_probe
x, s, b = torch.ones(3), torch.full((3,), 2.0), torch.full((3,), 0.5)
print(fwd_probe.scale_shift(x, (s, b), eps=0.0).tolist(), round(fwd_probe.scale_shift(x, (s, None)).tolist()[0], 5),
      hasattr(fwd_probe, "legacy"))
"""
    result = subprocess.run([str(python), "-c", probe, str(tmp_path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["[2.5,", "2.5,", "2.5]", "2.00001", "False"]


@pytest.mark.parametrize(("parameters", "body", "schema", "unsure"), [
    # written in place, however it is taken: mutated, one alias set each
    (["at::Tensor out", "const at::Tensor& x", "at::Tensor acc"], "out.zero_();\nat::sum_out(acc, x, {1});",
     "f(Tensor(a!) out, Tensor x, Tensor(b!) acc) -> ()", None),
    (["const at::Tensor& out"], "float* p = out.mutable_data_ptr<float>();", "f(Tensor(a!) out) -> ()", None),
    (["at::Tensor out"], "torch::stable::fill_(out, 1.0);", "f(Tensor(a!) out) -> ()", None),
    # a data pointer kept non-const: which the kernel writes is not in the text, so it is marked
    # written (the safe side), and the m.def says why
    (["at::Tensor out", "at::Tensor x"], "float* o = out.data_ptr<float>();\nconst float* i = x.data_ptr<float>();",
     "f(Tensor(a!) out, Tensor x) -> ()", None),
    (["at::Tensor o"], "Params params;\nparams.o_ptr = o.data_ptr();\nrun(params);", "f(Tensor(a!) o) -> ()", None),
    # through a view, an optional, or an auto pointer; a pointer cast to const reads
    (["at::Tensor out", "at::Tensor q"], "auto out_3d = out.reshape({t, h, d});\n"
     "auto o = reinterpret_cast<bf16*>(out_3d.data_ptr<at::BFloat16>());\n"
     "auto p = reinterpret_cast<bf16 const*>(q.data_ptr<at::BFloat16>());", "f(Tensor(a!) out, Tensor q) -> ()",
     None),
    (["std::optional<at::Tensor> state"], "void* raw = state.has_value() ? state->data_ptr() : nullptr;",
     "f(Tensor(a!)? state) -> ()", None),
    (["std::optional<at::Tensor> state"], "auto& s = state.value();\ns.zero_();", "f(Tensor(a!)? state) -> ()", None),
    # nothing returned and nothing marked written: the schema cannot be right as it stands
    (["at::Tensor q", "at::Tensor o", "int n"], "run_kernel(q, o, n);", "f(Tensor q, Tensor o, int n) -> ()",
     "f returns nothing and its schema marks no argument written: annotate the tensors its kernels write (q, o:"),
    # returns nothing, reads only: still a question, as nothing it does would show
    (["const at::Tensor& x"], "const float* p = x.data_ptr<float>();\nauto y = x.sizes();", "f(Tensor x) -> ()",
     "f returns nothing"),
])
def test_what_the_function_body_writes_is_in_the_schema_or_in_the_report(parameters: list[str], body: str, schema: str,
                                                                        unsure: str | None) -> None:
    from assembler.migration.pybind import Binding, operator_for

    operator = operator_for(Binding("f", "ns::f", []), "void", parameters, body)
    assert operator.schema == schema
    assert (operator.unsure is None) == (unsure is None) and (unsure is None or unsure in str(operator.unsure))


def test_a_pointer_the_data_ptr_rewrite_makes_const_is_not_a_question() -> None:
    """FlashKDA's fwd keeps ``auto A_log_ptr = A_log.data_ptr<float>()`` and hands it to a
    launcher declared ``float const*`` there: once the body reads as the rewrite leaves it,
    A_log is read only; out, handed to ``float*``, is marked written, and the m.def says why."""
    from assembler.migration import syntax
    from assembler.migration.pybind import Binding, operator_for
    from assembler.migration.rewrite import with_pointers_decided

    callees = syntax.pointer_parameters("void launch(float const* a, float* o);")
    body = "auto a_ptr = a.data_ptr<float>();\nauto o_ptr = o.data_ptr<float>();\nlaunch(a_ptr, o_ptr);\n"
    decided = with_pointers_decided(body, REWRITES, callees, "2.10")
    assert "a.const_data_ptr<float>()" in decided and "o.data_ptr<float>()" in decided
    operator = operator_for(Binding("f", "ns::f", []), "void", ["at::Tensor a", "at::Tensor o"], decided)
    assert operator.schema == "f(Tensor a, Tensor(a!) o) -> ()" and operator.unsure is None
    assert operator.marked == "o: marked written, as ns::f keeps a non-const data pointer of it"
    before = operator_for(Binding("f", "ns::f", []), "void", ["at::Tensor a", "at::Tensor o"], body)
    assert before.schema == "f(Tensor(a!) a, Tensor(b!) o) -> ()"
    assert before.marked == "a, o: marked written, as ns::f keeps a non-const data pointer of each"
    # below the release that has const_data_ptr, nothing is decided, and both stay questions
    assert with_pointers_decided(body, REWRITES, callees, "2.9") == body


def test_a_tensor_returned_is_not_a_question_and_a_lookalike_name_is_not_the_parameter() -> None:
    from assembler.migration.pybind import Binding, operator_for

    returned = operator_for(Binding("f", "ns::f", []), "at::Tensor", ["const at::Tensor& x"], "return x.clone();")
    assert returned.schema == "f(Tensor x) -> Tensor" and returned.unsure is None
    other = operator_for(Binding("f", "ns::f", []), "at::Tensor", ["const at::Tensor& x"],
                         "auto y = x; y.zero_(); ax.zero_(); return y;")
    assert other.schema == "f(Tensor x) -> Tensor"


def test_migrate_reads_the_bound_functions_definition() -> None:
    """convert_modules hands each binding the body of its definition (not a declaration's)."""
    from assembler.migration.assess import _definition_body
    from assembler.migration.pybind import convert_modules

    text = ("void fill(at::Tensor out, double v);\n"
            "void fill(at::Tensor out, double v) {\n  out.fill_(v);\n}\n"
            'PYBIND11_MODULE(_C, m) {\n  m.def("fill", &fill);\n}\n')
    codes = {Path("a.cpp"): text}
    assert _definition_body(codes, "fill") == "\n  out.fill_(v);\n"
    # with the lines the build drops (a macro's) read from the whole file, at the same place
    macro = "void g(int a) {\n#define M(x) \\\n  h(x)\n  M(a);\n}\n"
    active = {Path("b.cpp"): "void g(int a) {\n\n\n  M(a);\n}\n"}
    assert _definition_body(active, "g") == "\n\n\n  M(a);\n"
    assert _definition_body(active, "g", {Path("b.cpp"): macro}) == "\n#define M(x) \\\n  h(x)\n  M(a);\n"
    edits, _ = convert_modules(text, "dep", "CPU", False, lambda name: ("void", ["at::Tensor out", "double v"]),
                               lambda name: _definition_body(codes, name))
    assert edits[0].schemas == ["fill(Tensor(a!) out, float v) -> ()"] and edits[0].unsure == []


def _converted(text: str, key: str) -> tuple[list[ModuleEdit], str]:
    """The module edits of one file ``text`` (its functions found in it, as migrate finds them)
    and their replacement text together; nothing declined."""
    from assembler.migration.assess import _definition_body, _signature
    from assembler.migration.pybind import convert_modules

    codes = {Path("a.cpp"): text}
    edits, declined = convert_modules(text, "dep", key, False, lambda name: _signature(codes, name),
                                      lambda name: _definition_body(codes, name), codes)
    assert declined == []
    return edits, "".join(edit.replacement for edit in edits)


def test_a_plain_name_a_helper_finds_in_an_enclosing_namespace_is_called_through_a_wrapper() -> None:
    """DeepGEMM's layout helper (deep_gemm::layout) registers &get_mn_major_tma_aligned_tensor,
    which C++ finds in deep_gemm: naming it deep_gemm::layout::... did not compile. A wrapper
    beside the helper calls it by the plain name, as the original did."""
    text = ("namespace outer {\nat::Tensor scale(const at::Tensor& x) { return x; }\nnamespace inner {\n"
            "at::Tensor twice(const at::Tensor& x) { return x; }\n"
            "static void register_apis(pybind11::module_& m) {\n"
            '    m.def("scale", &scale);\n    m.def("twice", &twice);\n}\n}  // namespace inner\n'
            "}  // namespace outer\nPYBIND11_MODULE(_C, m) {\n    outer::inner::register_apis(m);\n}\n")
    _, replaced = _converted(text, "CPU")
    assert "inline at::Tensor scale_boxed(const at::Tensor& x) {\n  return scale(x);\n}" in replaced
    assert 'm.impl("scale", TORCH_BOX(&outer::inner::scale_boxed));' in replaced
    assert 'm.impl("twice", TORCH_BOX(&outer::inner::twice));' in replaced  # declared in the helper's own


def test_an_operator_the_library_only_mentions_in_a_comment_is_registered_by_the_module_that_joins_it() -> None:
    """QuTLASS's TORCH_LIBRARY holds ``//m.def("backward_t_bf16(...)")``, commented out, and its
    pybind11 module binds backward_t_bf16: the fragment the module became left it out, as if the
    library defined it, and the op was lost (12 of 14)."""
    text = ("at::Tensor scale(const at::Tensor& x) { return x; }\n"
            "at::Tensor twice(const at::Tensor& x) { return x; }\n"
            'TORCH_LIBRARY(dep, m) {\n  m.def("scale(Tensor x) -> Tensor");\n'
            '  //m.def("twice(Tensor x) -> Tensor");\n  /* m.def("twice(Tensor x) -> Tensor"); */\n}\n'
            "PYBIND11_MODULE(_C, m) {\n"
            '  m.def("scale", &scale, "scale");\n  m.def("twice", &twice, "twice");\n}\n')
    edits, replaced = _converted(text, "CUDA")
    assert "STABLE_TORCH_LIBRARY_FRAGMENT(dep, m)" in replaced
    assert edits[0].schemas == ["twice(Tensor x) -> Tensor"]  # scale is the library's already
    assert 'm.impl("twice", TORCH_BOX(&twice));' in replaced and '"scale"' not in replaced


def test_a_const_reference_whose_pointer_is_kept_is_taken_to_be_read() -> None:
    """FlashMLA's inputs are const at::Tensor& whose data_ptr() goes into a params struct: not a question."""
    from assembler.migration.pybind import Binding, operator_for

    operator = operator_for(Binding("f", "ns::f", []), "at::Tensor", ["const at::Tensor& k"],
                            "params.k_ptr = k.data_ptr();\nreturn out;")
    assert operator.schema == "f(Tensor k) -> Tensor" and operator.unsure is None


@pytest.mark.parametrize("text", [
    "at::cuda::CUDAGuard g(device_of(q));",  # device_of takes an optional: which device is for a person
    "const at::DeviceGuard g(x.device());",  # any device: on a CPU tensor the stable guard would want an accelerator
    "at::cuda::CUDAGuard g(shift->device());",  # a receiver behind a pointer or an optional
])
def test_a_device_guard_only_of_a_cuda_tensors_own_device_is_rewritten(text: str) -> None:
    assert _run(text).text == text


def test_the_stable_includes_never_go_behind_a_condition() -> None:
    """A file whose only unstable include is behind an #ifdef (or whose last include is) gets
    its stable headers after its last unconditional include; a header guard's #ifndef, around
    every include, is no such condition."""
    text = ('#include "mine.h"\n#include <cmath>\n#ifdef WITH_CUDA\n#include <ATen/cuda/CUDAContext.h>\n#endif\n'
            "at::Tensor f(cudaStream_t s);")
    file = _run(text)
    rewrite_includes(file, file.includes, REWRITES.unstable_includes, False, ('"helpers.h"',),
                     REWRITES.replaced_includes)
    assert file.text == ('#include "mine.h"\n#include <cmath>\n#include <torch/csrc/stable/tensor.h>\n'
                         '#include "helpers.h"\n'
                         "#ifdef WITH_CUDA\n#include <cuda_runtime.h>\n#endif\n"
                         "torch::stable::Tensor f(cudaStream_t s);")
    guarded = "#ifndef MINE_H\n#define MINE_H\n#include <vector>\n#include <torch/extension.h>\nat::Tensor f();\n#endif"
    file = _run(guarded)
    rewrite_includes(file, file.includes, REWRITES.unstable_includes, False)
    assert file.text == ("#ifndef MINE_H\n#define MINE_H\n#include <vector>\n#include <torch/csrc/stable/tensor.h>\n"
                         "torch::stable::Tensor f();\n#endif")
    assert len(file.active) == file.text.count("\n") + 1


def test_what_the_code_needs_goes_above_it_not_after_an_include_at_the_end() -> None:
    """An include after the code (a template's .inl at the end, a pybind11 header appended) is
    no place for the stable headers or the short names' using-declarations: the code above it
    would not compile."""
    text = ('#include "mine.h"\n#include <vector>\nat::Tensor f(const at::Tensor& x) { return x; }\n'
            '#include "mine.inl"\n')
    file = _run(text)
    rewrite_includes(file, file.includes, REWRITES.unstable_includes, False, (), REWRITES.replaced_includes,
                     short=True)
    assert file.text == ('#include "mine.h"\n#include <vector>\n#include <torch/csrc/stable/tensor.h>\n'
                         "using torch::stable::Tensor;\n"
                         'Tensor f(const Tensor& x) { return x; }\n#include "mine.inl"\n')
    assert len(file.active) == file.text.count("\n") + 1


def _with_includes(text: str) -> FileRewrite:
    """``text`` through every step, then its includes rewritten as for a file with no use left."""
    file = _run(text)
    rewrite_includes(file, file.includes, REWRITES.unstable_includes, False, (), REWRITES.replaced_includes)
    return file


def test_an_include_inside_a_string_is_no_include() -> None:
    """DeepGEMM's JIT runtimes hold kernel source, #include lines and all, in raw strings: the
    stable headers go after the file's own last include, above the code that uses them, and a
    raw string's #include <torch/extension.h> is neither dropped nor replaced."""
    text = ('#include <torch/python.h>\n#include "mine.h"\n'
            "at::Tensor f(const at::Tensor& x) { return x.unsqueeze(0); }\n"
            'static const char* kSource = R"(\n#include <torch/extension.h>\n#include <cuda_runtime.h>\n)";\n')
    file = _with_includes(text)
    assert file.text == ("#include <torch/csrc/stable/ops.h>\n#include <torch/csrc/stable/tensor.h>\n"
                         '#include "mine.h"\n'
                         "torch::stable::Tensor f(const torch::stable::Tensor& x) { "
                         "return torch::stable::unsqueeze(x, 0); }\n"
                         'static const char* kSource = R"(\n#include <torch/extension.h>\n'
                         '#include <cuda_runtime.h>\n)";\n')


@pytest.mark.integration
def test_the_cuda_check_rewrite_compiles_at_2_10_where_the_old_macro_does_not(tmp_path: Path, toolchains: Path) -> None:
    """C10_CUDA_CHECK needs c10/cuda (refused under TORCH_TARGET_VERSION); STD_CUDA_CHECK from
    the stable macros header compiles there, against the CUDA runtime's headers, with the USE_CUDA
    that assemble defines for a CUDA unit (the shim declares the check's functions under it)."""
    from assembler.builder.header_diagnostics import torch_include_roots
    from assembler.toolchain.cuda import select_cuda
    from assembler.toolchain.torchenv import ensure_build_env

    env, cuda = ensure_build_env("2.13.0"), select_cuda("13.2")
    text = ("#include <cuda_runtime_api.h>\n#include <c10/cuda/CUDAException.h>\n"
            "void launched(cudaStream_t s) {\n  C10_CUDA_CHECK(cudaStreamSynchronize(s));\n"
            "  C10_CUDA_KERNEL_LAUNCH_CHECK();\n}\n")
    file = _run(text, target="2.10")
    assert file.made["cuda-check"] == 2 and not file.declined
    # with no use of c10/cuda left, its exception header gives its line to the CUDA runtime's
    needed = {header for r in REWRITES.rewrites if r.id == "cuda-check" for header in r.includes}
    rewrite_includes(file, file.includes | needed, REWRITES.unstable_includes, keep_unstable=False,
                     replaced=REWRITES.replaced_includes)
    assert "c10/cuda/CUDAException.h" not in file.text and "#include <torch/csrc/stable/macros.h>" in file.text
    # ... and to <cstdio>, whose stderr FA2's hardware_info.h read through it (the runtime's header was there already)
    assert file.text.startswith("#include <cuda_runtime_api.h>\n#include <cstdio>\n")
    flags = [flag for root in torch_include_roots(env.torch_dir)[::-1] for flag in ("-isystem", str(root))]
    command = ["g++", "-std=c++17", "-fsyntax-only", "-DTORCH_TARGET_VERSION=0x020a000000000000", "-DUSE_CUDA",
               *flags, "-isystem", str(cuda.root / "include")]
    for name, source in (("new.cpp", file.text), ("old.cpp", text)):
        (tmp_path / name).write_text(source)
    new = subprocess.run([*command, str(tmp_path / "new.cpp")], capture_output=True, text=True, check=False)
    assert new.returncode == 0, new.stderr[-4000:]
    old = subprocess.run([*command, str(tmp_path / "old.cpp")], capture_output=True, text=True, check=False)
    assert old.returncode != 0


def test_every_declarator_of_a_plain_declaration_is_a_tensor() -> None:
    """FA2's backward declares ``at::Tensor dq, dk, dv;``: dk's and dv's .dtype() were declined as
    "not declared a tensor". A declaration with an initialiser or a call stays the first name's only."""
    text = ("void bwd(const at::Tensor& q) {\n  at::Tensor dq, dk, dv;\n  TORCH_CHECK(dk.dtype() == q.dtype());\n"
            "  TORCH_CHECK(dv.dtype() == q.dtype());\n  at::Tensor x = q.contiguous(), y;\n"
            "  TORCH_CHECK(y.dtype() == q.dtype());\n}\n")
    file = _run(text)
    assert "dk.scalar_type() == q.scalar_type()" in file.text and "dv.scalar_type() == q.scalar_type()" in file.text
    assert [(d.line, d.rewrite) for d in file.declined] == [(6, "dtype")]  # y: not read as declared


def _syntax_check_at_2_10(tmp_path: Path, build_env_path: Path, name: str,
                          source: str) -> subprocess.CompletedProcess[str]:
    """g++ -fsyntax-only of ``source`` against the build torch's headers at TORCH_TARGET_VERSION 2.10."""
    from assembler.builder.header_diagnostics import torch_include_roots

    (tmp_path / name).write_text(source)
    torch_dir = next((build_env_path / "lib").glob("python3*/site-packages/torch"))
    flags = [flag for root in torch_include_roots(torch_dir)[::-1] for flag in ("-isystem", str(root))]
    command = ["g++", "-std=c++17", "-fsyntax-only", "-DTORCH_TARGET_VERSION=0x020a000000000000", *flags,
               str(tmp_path / name)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


@pytest.mark.integration
def test_fill_and_copy_compile_at_2_10(tmp_path: Path, build_env_path: Path) -> None:
    """What the fill and copy rewrites write compiles against the stable headers alone, at 2.10;
    also on a receiver declared const (DeepGEMM's ``const torch::Tensor& d``, written through as
    ATen's const methods allowed: ``c ? d.copy_(c.value()) : d.zero_();``)."""
    text = ("#include <torch/csrc/stable/tensor.h>\n#include <torch/csrc/stable/ops.h>\n#include <optional>\n"
            "void pad_into(at::Tensor out, at::Tensor padded) {\n  out.fill_(0);\n  out.copy_(padded, true);\n}\n"
            "void accumulate(const at::Tensor& d, const std::optional<at::Tensor>& c) {\n"
            "  c.has_value() ? d.copy_(c.value()) : d.zero_();\n}\n")
    file = _run(text, target="2.10")
    assert file.made["fill"] == 1 and file.made["copy"] == 2 and file.made["zero"] == 1 and not file.declined
    assert ("c.has_value() ? torch::stable::copy_(const_cast<torch::stable::Tensor&>(d), c.value()) "
            ": torch::stable::zero_(const_cast<torch::stable::Tensor&>(d));") in file.text
    assert "torch::stable::fill_(out, 0);" in file.text  # not const: as written
    done = _syntax_check_at_2_10(tmp_path, build_env_path, "new.cpp", file.text)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.mark.integration
def test_shape_ops_checks_and_const_arguments_compile_at_2_10(tmp_path: Path, build_env_path: Path) -> None:
    """unsqueeze/flatten/select, c10's CHECK and CHECK_EQ, and a data pointer made const by the
    launcher's own declaration: what migrate writes compiles against the stable headers alone."""
    from assembler.migration import syntax

    text = ("#include <torch/csrc/stable/tensor.h>\n#include <torch/csrc/stable/ops.h>\n"
            "#include <torch/headeronly/util/Exception.h>\n"
            "void launch(const void* in, void* out, long n);\n"
            "void run(const at::Tensor& x, at::Tensor out) {\n"
            "  auto y = x.unsqueeze(0);\n  auto z = y.flatten(0, 1);\n  auto row = z.select(0, 0);\n"
            "  CHECK(row.dim() == 1);\n  CHECK_EQ(out.numel(), x.numel());\n"
            "  launch(x.data_ptr(), out.data_ptr(), x.numel());\n}\n")
    file = FileRewrite(text, [True] * (text.count("\n") + 1), callees=syntax.pointer_parameters(text))
    for step in REWRITES.steps:
        apply_step(REWRITES.of_step(step), file, "2.10", {})
    assert not file.declined
    assert {name: file.made[name] for name in ("unsqueeze", "flatten", "select", "c10-check", "data-ptr")} == {
        "unsqueeze": 1, "flatten": 1, "select": 1, "c10-check": 2, "data-ptr": 1}
    assert "launch(x.const_data_ptr(), out.data_ptr(), x.numel());" in file.text
    done = _syntax_check_at_2_10(tmp_path, build_env_path, "new.cpp", file.text)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.mark.integration
def test_fa2_shaped_rewrites_compile_at_2_10(tmp_path: Path, build_env_path: Path) -> None:
    """What the rewrites of FA2's API idioms write (a function taking options to allocate, the
    padding, a narrow for an index, sum_out with braced dims, a copy into a view, a guard made in
    a helper) compiles against the stable headers alone, at 2.10; the old form does not."""
    text = """#include <torch/csrc/stable/tensor.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/accelerator.h>
#include <optional>
#include <vector>
inline at::cuda::CUDAGuard make_guard(const at::Tensor& t) {
  return at::cuda::CUDAGuard(static_cast<c10::DeviceIndex>(t.get_device()));
}
std::tuple<at::Tensor, at::Tensor> split(int n, struct c10::TensorOptions opts) {
  at::Tensor lse = torch::empty({n, 4}, opts.dtype(at::kFloat));
  at::Tensor acc = torch::empty({n, 4, 8}, opts);
  return std::make_tuple(lse, acc);
}
void fwd(at::Tensor q, at::Tensor dk, at::Tensor dkx, std::optional<at::Tensor> out_, int d) {
  auto device_guard = make_guard(q);
  auto opts = q.options();
  at::Tensor lse, acc;
  std::tie(lse, acc) = split(2, opts);
  at::Tensor q_padded = torch::nn::functional::pad(q, torch::nn::functional::PadFuncOptions({0, 8 - d % 8}));
  at::Tensor out = q_padded.index({"...", torch::indexing::Slice(torch::indexing::None, d)});
  at::sum_out(dk, at::reshape(dkx, {2, 3, 4, 5}), {3});
  if (out_.has_value()) out_.value().view({2, d}).copy_(out);
}
"""
    file = _run(text, target="2.10")
    assert not file.declined, file.declined
    for made in ("new-empty", "pad", "index-narrow", "sum-out", "reshape-call", "copy", "cuda-guard-cast",
                 "cuda-guard-type"):
        assert file.made[made] >= 1, made
    new = _syntax_check_at_2_10(tmp_path, build_env_path, "new.cpp", file.text)
    assert new.returncode == 0, file.text + new.stderr[-4000:]
    assert _syntax_check_at_2_10(tmp_path, build_env_path, "old.cpp", text).returncode != 0


def test_a_conditional_left_empty_by_the_includes_going_goes_too() -> None:
    """QuTLASS held <torch/extension.h> alone in ``#ifndef QUTLASS_DISABLE_PYBIND``: once it goes,
    the empty block goes, with one of the two blank lines around it; a block that keeps a line stays."""
    text = ("#include <ATen/ATen.h>\n#include <cuda_runtime.h>\n\n#ifndef DISABLE_PYBIND\n"
            "#include <torch/extension.h>\n#endif\n\n#include <vector>\n#ifdef WITH_MORE\n#include <torch/types.h>\n"
            "#include <cmath>\n#endif\nat::Tensor f();")
    file = _with_includes(text)
    assert file.text == ("#include <torch/csrc/stable/tensor.h>\n#include <cuda_runtime.h>\n\n#include <vector>\n"
                         "#ifdef WITH_MORE\n#include <cmath>\n#endif\ntorch::stable::Tensor f();")
    assert len(file.active) == file.text.count("\n") + 1


def test_the_elements_of_a_pair_a_tuple_and_their_structured_bindings_are_tensors() -> None:
    """DeepGEMM passes ``std::pair<Tensor, Tensor>`` and ``std::tuple<Tensor, optional<Tensor>>``
    and unpacks them (``const auto& [q_fp, q_sf] = q``, ``= preprocess_sf(sf)``): their tensor
    elements take the same rewrites as a tensor the file declares."""
    text = ("static std::tuple<int, at::Tensor> prep(const at::Tensor& sf) { return {1, sf}; }\n"
            "void f(const std::pair<at::Tensor, at::Tensor>& a, const std::tuple<at::Tensor, "
            "std::optional<at::Tensor>>& q) {\n"
            "  const auto& [q_fp, q_sf] = q;\n"
            "  const auto [n, batched] = prep(a.second);\n"
            "  auto l = at::empty({n, 4}, q_fp.options().dtype(at::kFloat));\n"
            "  auto m = at::empty({n}, a.first.options());\n"
            "  auto s = batched.squeeze(0);\n"
            "  auto t = std::get<0>(q).squeeze(1);\n}\n")
    file = _run(text)
    assert file.declined == []
    lines = file.text.splitlines()
    assert lines[4] == ("  auto l = torch::stable::new_empty(q_fp, {n, 4}, "
                        "torch::headeronly::ScalarType::Float);")
    assert lines[5] == "  auto m = torch::stable::new_empty(a.first, {n});"
    assert lines[6:8] == ["  auto s = torch::stable::squeeze(batched, 0);",
                          "  auto t = torch::stable::squeeze(std::get<0>(q), 1);"]


def test_an_overload_stable_lacks_and_a_receiver_read_twice_are_declined() -> None:
    file = _run("size_t f(at::Tensor x) {\n  auto y = x.squeeze();\n  return x.contiguous().nbytes();\n}\n")
    assert "x.squeeze()" in file.text and "torch::stable::contiguous(x).nbytes()" in file.text
    assert {(d.line, d.rewrite) for d in file.declined} >= {(2, "squeeze"), (3, "nbytes")}
    assert any("evaluated twice" in d.reason for d in file.declined)


@pytest.mark.integration
def test_tensors_made_from_options_naming_no_tensor_compile_at_2_10(tmp_path: Path, build_env_path: Path) -> None:
    """DeepGEMM's from_blob (with and without strides), empty_strided and an empty on kCUDA: the
    options read into a dtype and a device; without strides the helper header's contiguous ones,
    empty_strided through the dispatcher. What is written compiles at 2.10 with the stable headers;
    a from_blob on kCUDA (ATen asked the pointer for the device) is declined."""
    text = ("#include <torch/csrc/stable/ops.h>\n#include <torch/csrc/stable/device.h>\n"
            "at::Tensor ws;\nvoid make() { ws = at::empty({1024}, at::dtype(at::kByte).device(at::kCUDA)); }\n"
            "std::tuple<at::Tensor, at::Tensor, at::Tensor> f(const at::Tensor& buffer, const at::Tensor& sf, "
            "int n, int h) {\n"
            "  auto x = at::from_blob(buffer.data_ptr(), {n, h}, at::TensorOptions().dtype(at::kFloat8_e4m3fn)"
            ".device(buffer.device()));\n"
            "  auto y = at::from_blob(buffer.data_ptr(), {n, h}, {1, n}, at::TensorOptions().dtype(at::kInt));\n"
            "  const auto z = at::empty_strided({n, h}, {1, n}, sf.options());\n"
            "  const auto e = at::empty_like(sf, sf.options().dtype(at::kFloat));\n"
            "  auto w = at::from_blob(buffer.data_ptr(), {n}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA));\n"
            "  return std::make_tuple(x, y, z);\n}\n")
    file = _run(text, target="2.10")
    assert file.made["options-call"] == 5 and file.helpers == {"strides", "dispatcher"}
    assert [(d.line, d.rewrite) for d in file.declined] == [(10, "options-call")]  # not empty-like's at line 9
    assert "torch::stable::Device(torch::headeronly::DeviceType::CPU), torch::headeronly::ScalarType::Int)" in file.text
    lines = file.text.splitlines()
    lines[9] = ""  # the declined from_blob: a person's
    (tmp_path / helpers.NAME).write_text(helpers.header_text(None, file.helpers))
    source = f'#include "{helpers.NAME}"\n' + "\n".join(lines) + "\n"
    done = _syntax_check_at_2_10(tmp_path, build_env_path, "new.cpp", source)
    assert done.returncode == 0, done.stderr[-4000:]


_DEEPGEMM_SHAPED = ("void f(const at::Tensor& sf, at::Tensor& logits, int n, int m) {\n"
                    "  const auto r = (sf.dim() == 2) ? sf.unsqueeze(0) : sf;\n"
                    "  auto s = r.view(at::kInt);\n"
                    "  s.slice(1, 0, n).copy_(r);\n"
                    "  const auto out = at::empty({n}, sf.options());\n"
                    "  out.copy_(r);\n"
                    "  logits = logits.index({torch::indexing::Slice(0, n), torch::indexing::Slice(0, m)});\n}\n")


def test_deepgemm_shaped_receivers_a_conditional_a_chain_a_const_auto_and_two_slices() -> None:
    """A tensor from ``c ? a : b``; ``x.slice(..).copy_(y)`` (a temporary receiver for a function
    taking Tensor&: named first, in a block on its line); ``copy_`` on a ``const auto`` tensor
    (const_cast, as on a const Tensor&); ``index`` with two bounded slices (the outer narrow
    through the dispatcher, as torch::stable::narrow takes a Tensor&)."""
    file = _run(_DEEPGEMM_SHAPED)
    lines = file.text.splitlines()
    assert lines[2] == ('  auto s = assemble_stable::call_aten<torch::stable::Tensor>("aten::view", "dtype", r, '
                        "torch::headeronly::ScalarType::Int);")
    assert lines[3].startswith("  { torch::stable::Tensor s_slice = ") and lines[3].endswith(
        "torch::stable::copy_(s_slice, r); }")
    assert lines[5] == "  torch::stable::copy_(const_cast<torch::stable::Tensor&>(out), r);"
    assert lines[6] == ('  logits = assemble_stable::call_aten<torch::stable::Tensor>("aten::narrow", "", '
                        "torch::stable::narrow(logits, 0, 0, n), static_cast<int64_t>(1), static_cast<int64_t>(0), "
                        "static_cast<int64_t>(m));")
    assert "dispatcher" in file.helpers


@pytest.mark.integration
def test_the_deepgemm_shaped_receivers_compile_at_2_10(tmp_path: Path, build_env_path: Path) -> None:
    from assembler.migration.dispatcher import schemas_for

    text = "#include <torch/csrc/stable/ops.h>\n" + _DEEPGEMM_SHAPED
    schemas = schemas_for(build_env_path / "bin" / "python", "2.13.0", {"aten::slice"}, tmp_path / "cache")
    file = FileRewrite(text, [True] * (text.count("\n") + 1))
    rewrites = replace(REWRITES, rewrites=tuple(replace(r, schemas=schemas) if r.type == "dispatcher" else r
                                                 for r in REWRITES.rewrites))
    for step in rewrites.steps:
        apply_step(rewrites.of_step(step), file, "2.10", {})
    assert file.made["dispatcher"] == 1 and not file.declined
    (tmp_path / helpers.NAME).write_text(helpers.header_text(None, file.helpers))
    done = _syntax_check_at_2_10(tmp_path, build_env_path, "new.cpp", f'#include "{helpers.NAME}"\n' + file.text)
    assert done.returncode == 0, done.stderr[-4000:]


def test_a_dtype_constant_another_file_declares_is_taken_and_one_declared_otherwise_is_not() -> None:
    """DeepGEMM's kPackedFP4 comes from another header: taken as a ScalarType (the compile proof
    checks it); a name the file declares as something else is not."""
    text = ("void f(at::Tensor b, int n, int kBlock) {\n"
            "  auto x = at::from_blob(b.data_ptr(), {n}, {1}, at::TensorOptions().dtype(kPackedFP4));\n"
            "  auto y = at::from_blob(b.data_ptr(), {n}, {1}, at::TensorOptions().dtype(kBlock));\n}\n")
    file = _run(text)
    lines = file.text.splitlines()
    assert lines[1].endswith("torch::stable::Device(torch::headeronly::DeviceType::CPU), kPackedFP4);")
    assert "at::from_blob" in lines[2] and [(d.line, d.rewrite) for d in file.declined] == [(3, "options-call")]


def test_a_tensor_the_projects_own_function_returns_is_a_tensor_whatever_it_is_called_on() -> None:
    """DeepGEMM's ``const auto workspace = device_runtime->get_cublaslt_workspace();`` (declared
    ``torch::Tensor get_cublaslt_workspace()`` in another header): migrate reads every file for
    the functions declared returning a tensor, so ``workspace.nbytes()`` is rewritten."""
    from assembler.migration.rewrite import RETURNS_TENSOR

    header = "struct Runtime {\n  torch::Tensor get_cublaslt_workspace() const;\n  int arch() const;\n};\n"
    own = frozenset(found.group("name") for found in RETURNS_TENSOR.finditer(header))
    assert own == {"get_cublaslt_workspace"}
    text = ("size_t f(Runtime* device_runtime) {\n  const auto workspace = device_runtime->get_cublaslt_workspace();\n"
            "  const auto arch = device_runtime->arch();\n  return workspace.nbytes() + arch.nbytes();\n}\n")
    file = FileRewrite(text, [True] * 5, own_tensor_functions=own)
    for step in REWRITES.steps:
        apply_step(REWRITES.of_step(step), file, "2.10", {})
    assert "return (workspace.numel() * workspace.element_size()) + arch.nbytes();" in file.text
    assert [(d.line, d.rewrite) for d in file.declined] == [(4, "nbytes")]  # arch: an int's


def test_an_optionals_value_is_the_tensor_it_holds_not_a_temporary_to_name() -> None:
    """FA2's ``if (out_.has_value()) { out_.value().copy_(out); }``: value() returns the tensor the
    optional holds (an lvalue), so copy_ takes it as it is; a slice of it is a temporary."""
    file = _run("void f(std::optional<at::Tensor>& out_, at::Tensor out) {\n"
                "  if (out_.has_value()) { out_.value().copy_(out); }\n}\n")
    assert "  if (out_.has_value()) { torch::stable::copy_(out_.value(), out); }" in file.text


def test_a_dtype_view_on_what_is_not_declared_a_tensor_is_not_written_as_a_sizes_view() -> None:
    """view(dtype) is view-dtype's (aten::view.dtype), only on a tensor the file declares; the
    view rewrite does not write it as torch::stable::view(x, ScalarType), which takes sizes."""
    file = _run("void f(Holder h) {\n  auto y = h.t.view(at::kInt);\n  auto z = h.t.view({-1});\n}\n")
    assert "auto y = h.t.view(torch::headeronly::ScalarType::Int);" in file.text
    assert "auto z = torch::stable::view(h.t, {-1});" in file.text
    assert {(d.line, d.rewrite) for d in file.declined} == {(2, "view-dtype"), (2, "view")}
