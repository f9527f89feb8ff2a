"""The idioms real trees use (issue #27 item 3), through migrate's rewrites on small C++ of our
own: each is made where the code says enough, and declined at its line otherwise. The shapes
are those measured on real migrations (a C cast of an untemplated data_ptr(), A.sizes()[0],
torch::checkAllContiguous, a pointer declared to const assigned later)."""

from __future__ import annotations

import pytest

from assembler.migration import syntax
from assembler.migration.rewrite import FileRewrite, apply_step, load_rewrites

REWRITES = load_rewrites()


def _run(text: str, target: str = "2.10", active: list[bool] | None = None,
         callees: dict[str, list[syntax.Parameters]] | None = None) -> FileRewrite:
    file = FileRewrite(text, active if active is not None else [True] * (text.count("\n") + 1),
                       callees=callees or {})
    for step in REWRITES.steps:
        apply_step(REWRITES.of_step(step), file, target, {})
    return file


def test_a_cast_of_data_ptr_says_const_by_its_type_or_the_tensor_s_declaration() -> None:
    file = _run("void run(at::Tensor& out, at::Tensor const& x, const torch::Tensor& y) {\n"
                "  Args args{{(cutlass::bfloat16_t *)x.data_ptr(), K},\n"
                "            {(ElementD*)out.data_ptr(), N},\n"
                "            (float const*)y.data_ptr()};\n"
                "}")
    assert file.text == ("void run(torch::stable::Tensor& out, torch::stable::Tensor const& x, const "
                         "torch::stable::Tensor& y) {\n"
                         "  Args args{{static_cast<cutlass::bfloat16_t *>(const_cast<void*>(x.const_data_ptr())), K},\n"
                         "            {static_cast<ElementD*>(out.mutable_data_ptr()), N},\n"
                         "            static_cast<float const*>(y.const_data_ptr())};\n"
                         "}")
    assert file.made["cast-data-ptr"] == 3


def test_a_cast_of_what_is_not_a_tensor_is_declined_at_its_line() -> None:
    file = _run("void f(Buffer b) {\n  auto p = (float*)b.data_ptr();\n}")
    assert "(float*)b.data_ptr()" in file.text
    assert [(d.line, d.rewrite) for d in file.declined] == [(2, "cast-data-ptr")]
    assert "not declared a tensor" in file.declined[0].reason


def test_sizes_and_strides_by_index_nest_and_leave_comments_strings_and_other_lines() -> None:
    text = ("void f(at::Tensor A, std::vector<at::Tensor> v) {\n"
            "  auto const m = A.sizes()[0] * v[1].strides()[A.sizes()[1]];\n"
            '  // A.sizes()[0]\n  const char* s = "A.sizes()[0]";\n'
            "  auto k = A.sizes()[2];\n"
            "  auto n = other.sizes()[0];\n"
            "}")
    file = _run(text, active=[True, True, True, True, False, True, True])
    assert file.text.split("\n")[1] == "  auto const m = A.size(0) * v[1].stride(A.size(1));"
    assert (file.text.split("\n")[2:5]
            == ["  // A.sizes()[0]", '  const char* s = "A.sizes()[0]";', "  auto k = A.sizes()[2];"])
    assert file.text.split("\n")[5] == "  auto n = other.sizes()[0];"
    assert [(d.line, d.rewrite) for d in file.declined] == [(6, "sizes-index")]


def test_the_tensor_checks_of_namespace_torch_go_through_the_helper_header() -> None:
    file = _run('void f(const torch::Tensor& A, const torch::Tensor& B) {\n'
                '  torch::checkAllContiguous("f", {{A, "A", 0}, {B, "B", 1}});\n'
                '  torch::checkDeviceType("f", {A, B}, at::DeviceType::CUDA);\n'
                '  torch::checkAllSameGPU("f", {{A, "A", 0}, {B, "B", 1}});\n}')
    lines = file.text.split("\n")
    assert lines[1].startswith("  assemble_stable::checkAllContiguous(")
    assert lines[2] == '  assemble_stable::checkDeviceType("f", {A, B}, torch::headeronly::DeviceType::CUDA);'
    assert lines[3].startswith("  assemble_stable::checkAllSameGPU(")
    assert file.helpers == {"tensor-checks"}


def test_a_pointer_declared_to_const_then_assigned_reads_const() -> None:
    file = _run("void f(at::Tensor c, at::Tensor o) {\n  int64_t const* dev = nullptr;\n  float* w = nullptr;\n"
                "  if (x) { dev = c.data_ptr<int64_t>(); w = o.data_ptr<float>(); }\n}")
    assert (file.text.split("\n")[3]
            == "  if (x) { dev = c.const_data_ptr<int64_t>(); w = o.mutable_data_ptr<float>(); }")


@pytest.mark.parametrize(("target", "made"), [("2.10", False), ("2.11", True)])
def test_float8_e8m0_needs_torch_2_11(target: str, made: bool) -> None:
    file = _run("TORCH_CHECK(s.scalar_type() == at::kFloat8_e8m0fnu);", target=target)
    assert ("ScalarType::Float8_e8m0fnu" in file.text) is made
    assert bool(file.declined) is not made


def test_the_syntax_layer_reads_spans_in_characters_and_nests_outermost_first() -> None:
    text = "// ü é\nint n = v[0].sizes()[x.sizes()[0]];"
    found = list(syntax.matches(text, "$X.sizes()[$I]"))
    assert [text[m.start:m.end] for m in found] == ["v[0].sizes()[x.sizes()[0]]", "x.sizes()[0]"]
    assert [m.line for m in found] == [1, 1]
    assert [m.captures["X"] for m in syntax.outermost(iter(found))] == ["v[0]"]
    assert found[0].expand("$X.size($I)") == "v[0].size(x.sizes()[0])"


def test_options_a_variable_builds_from_a_tensor_s_device_allocate_like_it() -> None:
    """QuTLASS: auto opts = TensorOptions().dtype(kFloat).device(A.device()); torch::tensor(0.0f, opts)."""
    file = _run("void f(at::Tensor A) {\n"
                "  auto opts = torch::TensorOptions().dtype(torch::kFloat).device(A.device());\n"
                "  auto zero = torch::tensor(0.0f, opts);\n"
                "  auto buf = torch::empty({4}, opts);\n"
                "  auto two = torch::tensor(2.0f, A.options());\n}")
    assert file.text.split("\n")[1:5] == [
        "", "  auto zero = torch::stable::new_zeros(A, {}, torch::headeronly::ScalarType::Float);",
        "  auto buf = torch::stable::new_empty(A, {4}, torch::headeronly::ScalarType::Float);",
        "  auto two = torch::tensor(2.0f, A.options());"]
    assert [(d.line, d.rewrite) for d in file.declined] == [(5, "new-empty")]
    assert "other than zero" in file.declined[0].reason


@pytest.mark.parametrize(("text", "short"), [
    ("#include <t.h>\ntorch::stable::Tensor f(torch::stable::Tensor x);\nauto d = torch::headeronly::ScalarType::Half;",
     {"Tensor", "ScalarType"}),
    ("#include <t.h>\nusing namespace at;\ntorch::stable::Tensor f();", set()),  # at::Tensor is a Tensor too
    ("#include <t.h>\nstruct Tensor;\ntorch::stable::Tensor f();\nauto d = torch::headeronly::ScalarType::Half;",
     {"ScalarType"}),  # the file's own Tensor stays its own
])
def test_short_names_only_where_they_can_mean_nothing_else(text: str, short: set[str]) -> None:
    from assembler.migration.rewrite import use_short_names

    file = FileRewrite(text, [True] * (text.count("\n") + 1))
    use_short_names(file)
    assert {name for name in ("Tensor", "ScalarType") if f"using torch::stable::{name};" in file.text
            or f"using torch::headeronly::{name};" in file.text} == short
    assert file.text.split("\n")[1].startswith("using torch::") == bool(short)
    assert len(file.active) == file.text.count("\n") + 1


def test_qutlass_s_unstable_includes_go_once_no_use_is_left() -> None:
    from assembler.migration.rewrite import rewrite_includes

    text = ("#include <ATen/ATen.h>\n#include <torch/types.h>\n#include <ATen/cuda/CUDAContextLight.h>\n"
            "#include <c10/cuda/CUDAGuard.h>\n#include <cuda_runtime.h>\n\nvoid f(at::Tensor x, cudaStream_t s);\n")
    file = _run(text)
    rewrite_includes(file, file.includes, REWRITES.unstable_includes, False, (), REWRITES.replaced_includes)
    # the CUDA runtime's umbrella header is there already: the context header's line goes, nothing is added
    assert file.text == ("#include <torch/csrc/stable/tensor.h>\n#include <cuda_runtime.h>\n"
                         "\nvoid f(torch::stable::Tensor x, cudaStream_t s);\n")


def test_a_macro_whose_every_use_passes_a_tensor_reads_its_parameter_as_one() -> None:
    file = _run('#define CHECK_FLOAT(x) \\\n  TORCH_CHECK((x).dtype() == at::kFloat, #x " must be float32")\n'
                "#define CHECK_ANY(x) TORCH_CHECK((x).dtype() == at::kFloat)\n"
                "void f(const at::Tensor& a, std::optional<at::Tensor> o, int n) {\n"
                "  CHECK_FLOAT(a);\n  CHECK_FLOAT(*o);\n  CHECK_ANY(a);\n  CHECK_ANY(n);\n}")
    lines = file.text.split("\n")
    assert (lines[1]
            == '  STD_TORCH_CHECK((x).scalar_type() == torch::headeronly::ScalarType::Float, #x " must be float32")')
    assert "(x).dtype()" in lines[2]  # CHECK_ANY(n): not every use is a tensor
    assert [(d.line, d.rewrite) for d in file.declined] == [(3, "dtype")]


def test_a_named_cast_of_data_ptr_says_const_or_mutable_and_stays_itself() -> None:
    """QuTLASS's gemm.cu: static_cast<ElementD*>(D.data_ptr()) is where the kernel writes."""
    file = _run("void f(at::Tensor& D, const at::Tensor& A) {\n"
                "  g(static_cast<E*>(D.data_ptr()), static_cast<E const*>(A.data_ptr()), "
                "reinterpret_cast<E*>(A.data_ptr()));\n}")
    assert file.text.split("\n")[1] == (
        "  g(static_cast<E*>(D.mutable_data_ptr()), static_cast<E const*>(A.const_data_ptr()), "
        "reinterpret_cast<E*>(const_cast<void*>(A.const_data_ptr())));")


HOST_DECLARATIONS = ("int launch_cuda(const void*, void const* scales, void*, void* const out, const int n,\n"
                     "                cudaStream_t stream);\n"
                     "void either(const void* p);\nvoid either(void* p);\n"
                     "void pick(const void* p);\nvoid pick(void* p, int n);\n"
                     "void twice(const float** p);\n")


def test_a_data_ptr_passed_to_a_declared_function_is_const_where_the_parameter_points_to_const() -> None:
    callees = syntax.pointer_parameters(HOST_DECLARATIONS)
    text = ("void op(const at::Tensor& x, const at::Tensor& s, at::Tensor& y, at::Tensor& z) {\n"
            "  launch_cuda(x.data_ptr(), s.data_ptr(),\n"
            "              y.data_ptr(), z.data_ptr(), 4, nullptr);\n"
            "  either(x.data_ptr());\n"
            "  pick(x.data_ptr());\n"
            "  pick(y.data_ptr(), 2);\n"
            "  undeclared(x.data_ptr());\n"
            "  launch_cuda(x.data_ptr<float>(), s.data_ptr<float>(), y.data_ptr<float>(), z.data_ptr<float>(), 4, 0);\n"
            "  launch_cuda((x.data_ptr()), s.data_ptr(), y.data_ptr() + 1, z.data_ptr(), 4, nullptr);\n"
            "}")
    file = _run(text, callees=callees)
    lines = file.text.split("\n")
    assert lines[1] == "  launch_cuda(x.const_data_ptr(), s.const_data_ptr(),"
    # an untemplated data_ptr() is the stable mutable pointer already: left as written
    assert lines[2] == "              y.data_ptr(), z.data_ptr(), 4, nullptr);"
    assert lines[3] == "  either(x.data_ptr());"  # two overloads of one arity that disagree
    assert lines[4] == "  pick(x.const_data_ptr());"  # the arity picks the declaration
    assert lines[5] == "  pick(y.data_ptr(), 2);"
    assert lines[6] == "  undeclared(x.data_ptr());"
    assert lines[7] == ("  launch_cuda(x.const_data_ptr<float>(), s.const_data_ptr<float>(), "
                        "y.mutable_data_ptr<float>(), z.mutable_data_ptr<float>(), 4, 0);")
    assert lines[8] == ("  launch_cuda((x.data_ptr()), s.const_data_ptr(), y.data_ptr() + 1, z.data_ptr(), 4, "
                        "nullptr);")  # a parenthesized or offset pointer is not the argument itself
    assert file.made["data-ptr"] == 8


def test_pointer_parameters_read_the_pointee_s_const_not_the_pointer_s() -> None:
    found = syntax.pointer_parameters(HOST_DECLARATIONS
                                      + "struct R { bool run(float* __restrict__ a, int n = 2, ...); };\n"
                                      "void none(void);\nvoid (*callback)(const void*);\n")
    assert found["launch_cuda"][0].pointees == (True, True, False, False, None, None)
    assert found["twice"][0].pointees == (None,)
    run = found["run"][0]
    assert (run.pointees, run.required, run.variadic) == ((False, None), 1, True)
    assert run.takes(1) and run.takes(5) and not run.takes(0)
    assert found["none"][0].pointees == () and "callback" not in found


def test_a_cuda_guard_of_a_tensor_known_defined_is_stable_s_device_guard() -> None:
    text = ("void run(const at::Tensor& x, const at::Tensor& y, const at::Tensor& z, at::Tensor w) {\n"
            "  auto* p = x.data_ptr<float>();\n"
            "  if (w.dim() > 2) { return; }\n"
            "  {\n"
            "    const at::cuda::OptionalCUDAGuard g1(device_of(x));\n"
            "  }\n"
            "  const at::cuda::OptionalCUDAGuard g2(device_of(y));\n"
            "  if (flag) { int n = z.size(0); }\n"
            "  const at::cuda::OptionalCUDAGuard g3(device_of(z));\n"
            "  w = make();\n"
            "  const at::cuda::OptionalCUDAGuard g4(device_of(w));\n"
            "  Args args{{static_cast<int>(M)}, {(float*)y.data_ptr(), K}};\n"
            "  const at::cuda::OptionalCUDAGuard g5(device_of(y));\n"
            "  auto f = [&]() { return z.dim(); };\n"
            "  const at::cuda::OptionalCUDAGuard g6(device_of(z));\n"
            "  int n = flag ? w.size(0) : 0;\n"
            "  const at::cuda::OptionalCUDAGuard g7(device_of(w));\n"
            "}")
    file = _run(text)
    lines = file.text.split("\n")
    assert lines[4] == "    const torch::stable::accelerator::DeviceGuard g1(x.get_device_index());"
    assert lines[6] == "  const assemble_stable::TensorDeviceGuard g2(y);"  # no use of y before
    assert lines[8] == "  const assemble_stable::TensorDeviceGuard g3(z);"  # its only use sat in a closed block
    assert lines[10] == "  const assemble_stable::TensorDeviceGuard g4(w);"  # assigned since its use
    # y was read in an initializer, which is no block
    assert lines[12] == "  const torch::stable::accelerator::DeviceGuard g5(y.get_device_index());"
    assert lines[14] == "  const assemble_stable::TensorDeviceGuard g6(z);"  # a lambda's body may never run
    assert lines[16] == "  const assemble_stable::TensorDeviceGuard g7(w);"  # read only when flag holds
    assert file.made["cuda-guard-of"] == 2 and file.made["device-guard-of"] == 5
    assert "torch/csrc/stable/accelerator.h" in file.includes and file.helpers == {"device-guard"}


def test_a_tensor_passed_to_a_function_that_reads_it_first_is_known_defined() -> None:
    """QuTLASS's gemm.cu: runGemm hands A to args_from_options, which reads A.data_ptr() inside
    a nested initializer before anything returns: the call throws on an undefined A as the read
    would, so the guard after it is stable's DeviceGuard. A callee that reads it only under a
    condition, after a return, or in a call that is itself conditional is no such evidence."""
    text = ("template <typename G>\n"
            "typename G::Arguments args_from(at::Tensor& D, at::Tensor const& A, int M) {\n"
            "  typename G::Arguments arguments{ {static_cast<E const*>(A.data_ptr()), M} };\n"
            "  return arguments;\n"
            "}\n"
            "void maybe(at::Tensor const& A) { if (M) { A.size(0); } }\n"
            "void early(at::Tensor const& A) { if (M) return; A.size(0); }\n"
            "void run(at::Tensor& D, at::Tensor const& A, at::Tensor const& B, int M) {\n"
            "  auto arguments = args_from<G>(D, A, M);\n"
            "  const at::cuda::OptionalCUDAGuard g1(device_of(A));\n"
            "  maybe(B); early(B);\n"
            "  if (M) { args_from<G>(D, B, M); }\n"
            "  const at::cuda::OptionalCUDAGuard g2(device_of(B));\n"
            "}")
    lines = _run(text).text.split("\n")
    assert lines[9] == "  const torch::stable::accelerator::DeviceGuard g1(A.get_device_index());"
    assert lines[12] == "  const assemble_stable::TensorDeviceGuard g2(B);"


def test_a_pointer_variable_passed_where_a_const_pointer_is_taken_is_read_only() -> None:
    """FlashKDA's shape: ``auto p = t.data_ptr<float>();`` handed, in a macro body, to a
    launcher declared with ``float const*`` there: const; one handed to ``float*``: mutable."""
    callees = syntax.pointer_parameters("template <int D>\nvoid launch(float const* bias, float* out, int n);\n")
    text = ("void op(const at::Tensor& bias, at::Tensor& out) {\n"
            "  auto bias_ptr = bias.data_ptr<float>();\n"
            "  auto out_ptr = out.data_ptr<float>();\n"
            "  #define LAUNCH(N) \\\n"
            "    launch<N>( \\\n"
            "        bias_ptr, out_ptr, \\\n"
            "        4)\n"
            "  LAUNCH(128);\n"
            "}")
    file = _run(text, callees=callees)
    lines = file.text.split("\n")
    assert lines[1] == "  auto bias_ptr = bias.const_data_ptr<float>();"
    assert lines[2] == "  auto out_ptr = out.mutable_data_ptr<float>();"
    without = _run(text)  # no declaration known: it may write
    assert without.text.split("\n")[1] == "  auto bias_ptr = bias.mutable_data_ptr<float>();"
