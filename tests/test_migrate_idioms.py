"""The idioms of the real trees (issue #27 item 3), each proven by a compile: a small C++ file
written the old way (ATen through <torch/extension.h>, as FlashAttention-2, FlashKDA and QuTLASS
write it) goes through the real rewrite engine, its unstable includes are removed, and real g++
``-fsyntax-only`` compiles it against the torch 2.13.0 headers of the build environment at
torch-target 2.10 (``TORCH_TARGET_VERSION``: any unstable header left is an ``#error``). The
same file with the idiom's rewrite taken out must not compile, so the compile is what proves the
rewrite; and the old file compiles against the full torch, so the cases are real ATen code.
Where the code does not say enough (a receiver of unknown type, a TypeMeta member, options kept
in a variable) nothing is rewritten and assess's rules report the use at its line."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from assembler.migration import helpers
from assembler.migration.lexer import blank_comments_and_strings
from assembler.migration.rewrite import FileRewrite, RewriteSet, apply_step, load_rewrites, rewrite_includes
from assembler.migration.rules import load_rules, match_rules

REWRITES = load_rewrites()
RULES = load_rules()
TARGET = "2.10"
TARGET_DEFINE = "-DTORCH_TARGET_VERSION=0x020a000000000000"
OLD_INCLUDE = "#include <torch/extension.h>\n"


@dataclass(frozen=True)
class Case:
    name: str
    idioms: tuple[str, ...]  # the rewrites this case proves: without them it must not compile
    body: str  # the old way; each case is its own file, below OLD_INCLUDE
    # rewrites that would take the case if its own did not (options-call writes an allocation
    # new-empty declined): left out too where the case is compiled without its idioms
    fallbacks: tuple[str, ...] = ()


CASES = [
    # .dtype() -> .scalar_type(), FlashAttention-2's checks
    Case("dtype-kept-in-auto", ("dtype",), """\
void check(const at::Tensor& q, const at::Tensor& k) {
  auto q_dtype = q.dtype();
  TORCH_CHECK(q_dtype == torch::kFloat16 || q_dtype == torch::kBFloat16, "only fp16 and bf16");
  TORCH_CHECK(k.dtype() == q_dtype, "query and key must have the same dtype");
  TORCH_CHECK(k.dtype() == q.dtype(), "twice");
}
"""),
    Case("dtype-of-optional-and-pointer", ("dtype",), """\
void check(at::Tensor& q, c10::optional<at::Tensor>& out_, const at::Tensor* bias) {
  if (out_.has_value()) {
    at::Tensor out = out_.value();
    TORCH_CHECK(out.dtype() == q.dtype(), "Output must have the same dtype as inputs");
    TORCH_CHECK(out_->dtype() == q.dtype());
    TORCH_CHECK(out_.value().dtype() == q.dtype());
  }
  if (bias != nullptr) {
    TORCH_CHECK(bias->dtype() == torch::kFloat32, "bias must be float32");
  }
}
"""),
    Case("dtype-of-elements-and-results", ("dtype",), """\
void check(const std::vector<at::Tensor>& xs, const at::Tensor& x) {
  TORCH_CHECK(xs[0].dtype() == at::kHalf);
  auto y = at::empty_like(x);
  auto c = x.contiguous();
  TORCH_CHECK(y.dtype() == c.dtype(), "got ", y.dtype(), " and ", c.dtype());
}
"""),
    # .t() -> torch::stable::transpose(x, 0, 1), FlashKDA's weight
    Case("t-of-a-matrix", ("t",), """\
at::Tensor weight_t(const at::Tensor& w, std::optional<at::Tensor> extra) {
  auto wt = w.t();
  auto wc = w.contiguous().t();
  if (extra.has_value()) {
    return (*extra).t();
  }
  return wt.t();
}
"""),
    # types
    Case("device-type", ("device", "device-type-enum"), """\
int64_t where(const at::Tensor& x, int64_t index) {
  torch::Device device = x.device();
  TORCH_CHECK(device.is_cuda() || device.type() == torch::kCPU, "unsupported device");
  c10::Device other(torch::kCUDA, index);
  TORCH_CHECK(device.type() == c10::DeviceType::CUDA);
  return device == other ? device.index() : -1;
}
"""),
    Case("device-type-name", ("device-type-name",), """\
bool on(const at::Tensor& x, torch::DeviceType kind) {  // at:: and c10:: spell it in the header-only headers too
  return x.device().type() == kind;
}
"""),
    Case("device-from-a-string", ("device-string",), """\
bool on_first_gpu(const at::Tensor& x) {
  at::Device first("cuda:0");
  return x.device() == first;
}
"""),
    Case("scalar-type-as-a-type", ("scalar-type-name",), """\
int64_t bits(c10::ScalarType type) {
  switch (type) {
    case at::ScalarType::Half:
    case at::ScalarType::BFloat16:
      return 16;
    default:
      return 32;
  }
}
int64_t bits_of(const at::Tensor& x) {
  at::ScalarType type = x.scalar_type();
  torch::Dtype same = type;
  return bits(same);
}
"""),
    Case("int-array-ref", ("int-array-ref",), """\
int64_t rows(const at::Tensor& x, c10::IntArrayRef expected) {
  at::IntArrayRef sizes = x.sizes();
  TORCH_CHECK(sizes.size() == expected.size() && sizes.vec() == expected.vec(), "shape");
  TORCH_CHECK(x.sizes() == torch::IntArrayRef({sizes[0], sizes.back()}));
  return sizes.empty() ? 0 : sizes[0];
}
"""),
    # TORCH_CHECK in #define bodies: FlashAttention-2's CHECK_SHAPE, and a macro continued over lines
    Case("torch-check-in-a-macro", ("torch-check",), """\
#define CHECK_SHAPE(x, ...) TORCH_CHECK(x.sizes() == torch::IntArrayRef({__VA_ARGS__}), #x " is not " #__VA_ARGS__)
#define CHECK_INPUT(x)                                 \\
  do {                                                 \\
    TORCH_CHECK(x.is_cuda(), #x " must be on CUDA");   \\
    TORCH_CHECK(x.is_contiguous(), #x " must be contiguous"); \\
  } while (0)
void check(const at::Tensor& q, int64_t b, int64_t h) {
  CHECK_INPUT(q);
  CHECK_SHAPE(q, b, h);
}
"""),
    # allocation whose options come from a tensor -> new_empty / new_zeros
    Case("empty-of-options-dtype", ("new-empty",), """\
at::Tensor stats(const at::Tensor& in, int64_t rows) {
  at::Tensor rstd = at::empty({rows}, in.options().dtype(at::kFloat));
  return rstd;
}
""", ("options-call",)),
    Case("zeros-of-dtype-and-device", ("new-empty",), """\
at::Tensor sums(const at::Tensor& x, int64_t rows, const int& groups) {
  at::Tensor out = torch::zeros({rows, static_cast<int64_t>(groups)},
                                torch::TensorOptions().dtype(torch::kFloat32).device(x.device()));
  return out;
}
"""),
    Case("empty-of-device-then-dtype", ("new-empty",), """\
std::vector<at::Tensor> seeds(const at::Tensor& q, std::vector<int64_t> shape) {
  auto rng_state = torch::empty({2}, torch::dtype(torch::kInt64).device(q.device()));
  auto same = torch::empty(q.sizes(), torch::device(q.device()).dtype(q.dtype()));
  auto plain = at::empty(shape, q.options());
  return {rng_state, same, plain};
}
""", ("options-call",)),
    Case("empty-of-a-dtype-variable", ("new-empty",), """\
at::Tensor lse(const at::Tensor& q, int64_t b, int64_t h) {
  auto q_dtype = q.dtype();
  at::ScalarType acc = at::kFloat;
  auto kept = at::empty({b, h}, q.options().dtype(q_dtype));
  return at::empty({b, h}, q.options().dtype(acc));
}
""", ("options-call",)),
    Case("empty-of-an-options-variable", ("new-empty",), """\
std::vector<at::Tensor> mha_fwd(const at::Tensor& q, int64_t b, int64_t h) {
  auto opts = q.options();
  auto softmax_lse = torch::empty({b, h}, opts.dtype(at::kFloat));
  at::Tensor p;
  p = torch::empty({ 0 }, opts);
  auto rng_state = torch::empty({2}, opts.dtype(torch::kInt64));
  return {softmax_lse, p, rng_state};
}
"""),
    # const_data_ptr where the code only reads through the pointer, else mutable_data_ptr (FlashKDA's inputs)
    Case("data-ptr-read-or-written", ("data-ptr",), """\
void launch(const float* in, float* out, int64_t n);
void scale(const at::Tensor& x, const at::Tensor& w, at::Tensor& out, int64_t n) {
  const float* ip = x.data_ptr<float>();
  float* wp = w.data_ptr<float>();
  auto* vp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    op[i] = ip[i] * wp[i] + vp[i];
    op[i] += 1.0f;
  }
  auto half_in = reinterpret_cast<const uint16_t*>(x.data_ptr<at::Half>());
  auto raw_in = static_cast<const float*>(x.data_ptr());
  launch(x.data_ptr<float>(), out.data_ptr<float>(), n + half_in[0] + static_cast<int64_t>(raw_in[0]));
}
"""),
    # an optional's method through ->: passed on as *p
    Case("method-through-an-optional", ("contiguous",), """\
at::Tensor shifted(const std::optional<at::Tensor>& shift) {
  at::Tensor b;
  if (shift.has_value()) {
    b = shift->contiguous();
  }
  return b;
}
"""),
    # QuTLASS's host code: C casts of an untemplated data_ptr(), sizes by index, an options
    # variable made from a tensor's device, a zero scalar from it
    Case("casts-sizes-and-options", ("tensor-type", "cast-data-ptr", "sizes-index", "new-empty"), """\
struct Args { float* out; const float* in; float* scratch; long m; long n; };
Args args_of(at::Tensor& out, at::Tensor const& x) {
  auto const m = x.sizes()[0];
  auto const n = out.sizes()[1] * 2;
  return Args{(float *)out.data_ptr(), (float const*)x.data_ptr(), (float*)x.data_ptr(), m, n};
}
at::Tensor scale_like(const at::Tensor& A) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat).device(A.device());
  auto global_scale = torch::tensor(0.0f, opts);
  auto buf = torch::empty({4}, opts);
  return global_scale;
}
"""),
]


def _rewrite(text: str, rewrites: RewriteSet, target: str = TARGET, includes: bool = True) -> FileRewrite:
    """Every step of the real engine, then (``includes``) the unstable includes removed, as
    migrate does once nothing unstable is left."""
    file = FileRewrite(text, [True] * (text.count("\n") + 1))
    for step in rewrites.steps:
        apply_step(rewrites.of_step(step), file, target, {})
    if includes:
        rewrite_includes(file, file.includes, rewrites.unstable_includes, keep_unstable=False)
    return file


def _without(idioms: tuple[str, ...]) -> RewriteSet:
    return RewriteSet(REWRITES.version, REWRITES.steps, REWRITES.unstable_includes,
                      tuple(r for r in REWRITES.rewrites if r.id not in idioms))


def _remaining(text: str) -> list[tuple[int, str]]:
    every_line = set(range(1, text.count("\n") + 2))
    return [(m.line, m.rule.id) for m in match_rules(RULES, blank_comments_and_strings(text), every_line)]


def test_every_case_is_rewritten_whole_and_leaves_no_use() -> None:
    """No compiler needed: each idiom is made, nothing is declined, and assess's rules find no
    use left in the result."""
    for case in CASES:
        file = _rewrite(OLD_INCLUDE + case.body, REWRITES)
        assert all(file.made[idiom] >= 1 for idiom in case.idioms), (case.name, dict(file.made))
        assert file.declined == [], (case.name, file.declined)
        assert _remaining(file.text) == [], (case.name, file.text)
        assert "torch/extension.h" not in file.text


def test_the_idioms_read_as_a_person_writes_them() -> None:
    """What the humans' migrations added (FlashAttention-2, FlashKDA, normkit's manual patch)."""
    texts = {case.name: _rewrite(OLD_INCLUDE + case.body, REWRITES).text for case in CASES}
    assert "auto q_dtype = q.scalar_type();" in texts["dtype-kept-in-auto"]
    assert "STD_TORCH_CHECK(out_->scalar_type() == q.scalar_type());" in texts["dtype-of-optional-and-pointer"]
    assert "auto wc = torch::stable::transpose(torch::stable::contiguous(w), 0, 1);" in texts["t-of-a-matrix"]
    assert "return torch::stable::transpose((*extra), 0, 1);" in texts["t-of-a-matrix"]
    assert "torch::stable::Device other(torch::headeronly::DeviceType::CUDA, index);" in texts["device-type"]
    f32 = "torch::headeronly::ScalarType::Float"
    assert f"torch::stable::Tensor rstd = torch::stable::new_empty(in, {{rows}}, {f32});" in (
        texts["empty-of-options-dtype"])
    assert ("torch::stable::Tensor out = torch::stable::new_zeros(x, {rows, static_cast<int64_t>(groups)},\n"
            f"                                {f32});") in texts["zeros-of-dtype-and-device"]
    assert "auto same = torch::stable::new_empty(q, q.sizes(), q.scalar_type());" in texts["empty-of-device-then-dtype"]
    assert "auto plain = torch::stable::new_empty(q, shape);" in texts["empty-of-device-then-dtype"]
    assert "    STD_TORCH_CHECK(x.is_cuda(), #x \" must be on CUDA\");   \\\n" in texts["torch-check-in-a-macro"]
    assert "b = torch::stable::contiguous(*shift);" in texts["method-through-an-optional"]
    pointers = texts["data-ptr-read-or-written"]
    assert "  const float* wp = w.const_data_ptr<float>();\n  auto* vp = x.const_data_ptr<float>();\n" in pointers
    assert "  float* op = out.mutable_data_ptr<float>();\n" in pointers
    assert "reinterpret_cast<const uint16_t*>(x.const_data_ptr<torch::headeronly::Half>())" in pointers
    assert "static_cast<const float*>(x.const_data_ptr())" in pointers
    # what launch does with its arguments is not in this code: both stay mutable
    assert "launch(x.mutable_data_ptr<float>(), out.mutable_data_ptr<float>()" in pointers
    # the options variable no call names any more goes; its line stays, empty, so line numbers hold
    lines = texts["empty-of-an-options-variable"].splitlines()
    at = next(i for i, line in enumerate(lines) if "mha_fwd" in line)
    assert lines[at:at + 4] == [
        "std::vector<torch::stable::Tensor> mha_fwd(const torch::stable::Tensor& q, int64_t b, int64_t h) {", "",
        "  auto softmax_lse = torch::stable::new_empty(q, {b, h}, torch::headeronly::ScalarType::Float);",
        "  torch::stable::Tensor p;"]


def test_an_options_variable_still_named_stays() -> None:
    text = ("at::Tensor f(const at::Tensor& q) {\n  auto opts = q.options();\n  auto a = at::empty({2}, opts);\n"
            "  return at::zeros({2}, opts.requires_grad(true));\n}\n")
    file = _rewrite(text, REWRITES, includes=False)
    assert file.text.splitlines()[1:3] == ["  auto opts = q.options();", "  auto a = torch::stable::new_empty(q, {2});"]
    assert (2, "tensor-options") in _remaining(file.text) and (4, "zeros") in _remaining(file.text)


# (old code, the rewrite that declines it, the rule that reports it, a word of the reason)
DECLINED = [
    # a receiver whose type the file does not spell: a macro's parameter, a struct's field
    # a macro's parameter is a tensor only where every use passes one (here a Meta's too)
    ("#define DT(x) x.dtype()\nbool f(const at::Tensor& q, const Meta& m) { return DT(q) == DT(m); }", "dtype", "dtype",
     "not declared a tensor"),
    ("struct P { at::Tensor q; };\nbool f(const P& p) { return p.q.dtype() == at::kHalf; }", "dtype", "dtype",
     "not declared"),
    # what dtype() returns used as a caffe2::TypeMeta
    ("size_t f(const at::Tensor& q) { return q.dtype().itemsize(); }", "dtype", "dtype", "TypeMeta"),
    ("const char* f(const at::Tensor& q) {\n  auto d = q.dtype();\n  return d.name().data();\n}", "dtype", "dtype",
     "d keeps"),
    # a .t() of something that is not declared a tensor
    ("struct M { M t() const; };\nM f(const M& m) { return m.t(); }", "t", "t", "not declared a tensor"),
    # options kept in a variable, no tensor to take the device from, options of another form
    ("at::Tensor f() {\n  at::TensorOptions opts = at::TensorOptions().dtype(at::kFloat);\n"
     "  return at::empty({2}, opts);\n}",
     "new-empty", "empty", "options"),
    ("at::Tensor f() { return torch::empty({2}); }", "new-empty", "empty", "no tensor"),
    ("at::Tensor f(const at::Tensor& q) { return at::zeros({2}, q.options().dtype(at::kFloat).requires_grad(true)); }",
     "new-empty", "zeros", "options"),
    ("at::Tensor f(const at::Tensor& q, caffe2::TypeMeta d) { return at::empty({2}, q.options().dtype(d)); }",
     "new-empty", "empty", "ScalarType"),
    # an optional of unknown type through ->
    ("template <class T> int f(T* p) { return p->contiguous().dim(); }", "contiguous", "contiguous", "pointer"),
    # a guard on something the file does not declare a tensor; the stream object itself, not its cudaStream_t
    ("template <class T> void f(const T& t) {\n  at::DeviceGuard g(t.device());\n}", "device-guard", "device-guard",
     "not declared a tensor"),
    ("void f() {\n  at::cuda::CUDAStream s = at::cuda::getCurrentCUDAStream();\n}", "cuda-stream", "cuda-stream",
     "kept as at::cuda::CUDAStream"),
    ("int64_t f() {\n  return at::cuda::getCurrentCUDAStream().id();\n}", "cuda-stream", "cuda-stream", "(.id)"),
    ("void f() {\n  auto s = c10::cuda::getCurrentCUDAStream(0);\n  s.synchronize();\n}", "cuda-stream", "cuda-stream",
     "s keeps what it returns"),
]


@pytest.mark.parametrize(("text", "rewrite", "rule", "reason"), DECLINED)
def test_what_the_code_does_not_say_is_reported_at_its_line(text: str, rewrite: str, rule: str, reason: str) -> None:
    file = _rewrite(text, REWRITES, includes=False)
    declined = [d for d in file.declined if d.rewrite == rewrite]
    assert declined and reason in declined[0].reason, file.declined
    line = declined[0].line
    assert (line, rule) in _remaining(file.text), (_remaining(file.text), file.text)


def test_a_device_from_a_string_waits_for_torch_2_10() -> None:
    text = 'bool f(const at::Tensor& x) { at::Device d("cuda:0"); return x.device() == d; }'
    file = _rewrite(text, REWRITES, target="2.9", includes=False)
    assert [(d.rewrite, d.reason.split(",")[0]) for d in file.declined] == [("device-string", "needs torch 2.10")]
    assert "at::Device d(" in file.text and (1, "device") in _remaining(file.text)


def test_a_macro_body_the_build_skips_stays() -> None:
    """Only a body continued from a compiled line is code: behind an #ifdef the build does not
    set, the whole macro is left alone."""
    text = "#ifdef NEVER\n#define C(x) \\\n  TORCH_CHECK(x)\n#endif\n#define D(x) \\\n  TORCH_CHECK(x)\n"
    file = FileRewrite(text, [True, False, False, True, True, False, True])
    apply_step(REWRITES.of_step("headers-and-types"), file, TARGET, {})
    assert file.text == text.replace("#define D(x) \\\n  TORCH_CHECK(x)", "#define D(x) \\\n  STD_TORCH_CHECK(x)")
    assert [m.line for m in match_rules(RULES, blank_comments_and_strings(text), {1, 4, 5})] == [6]


def test_a_declaration_holds_in_its_own_function_only() -> None:
    """The same name is a tensor in one function and something else in the next."""
    text = ("bool f(const at::Tensor& x) { return x.dtype() == at::kHalf; }\n"
            "struct A { int dtype() const; };\n"
            "bool g(const A& x) { return x.dtype() == 1; }\n")
    file = _rewrite(text, REWRITES, includes=False)
    assert file.text.splitlines()[0] == ("bool f(const torch::stable::Tensor& x) { return x.scalar_type() == "
                                         "torch::headeronly::ScalarType::Half; }")
    assert file.text.splitlines()[2] == "bool g(const A& x) { return x.dtype() == 1; }"
    assert [(d.line, d.rewrite) for d in file.declined] == [(3, "dtype")]


# ---- the compile proofs: real g++, the build environment's torch 2.13.0 headers --------------


def _compile(paths: list[Path], includes: list[str]) -> subprocess.Popen[str]:
    """g++ -fsyntax-only of ``paths`` (each its own translation unit), started."""
    return subprocess.Popen(["g++", "-std=c++17", "-fsyntax-only", *includes, *(str(p) for p in paths)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        _, stderr = process.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
    return process.returncode, stderr


def _failed(paths: list[Path], stderr: str) -> set[str]:
    """The files g++ reported an error in (directly, or in a header one of them includes)."""
    failed = set()
    current = None
    for line in stderr.splitlines():
        for path in paths:
            if line.startswith(f"{path}:") or line.startswith(f"In file included from {path}:"):
                current = path.name
        if current and re.search(r"\berror\b", line):
            failed.add(current)
    return failed


@pytest.fixture(scope="module", name="torch_flags")
def torch_flags_fixture(build_env_path: Path) -> tuple[list[str], Path]:
    from assembler.builder.header_diagnostics import torch_include_roots
    from assembler.check.compilers import python_include_dir
    from assembler.toolchain.torchenv import ensure_build_env

    env = ensure_build_env("2.13.0")
    roots = torch_include_roots(env.torch_dir)[::-1]  # torch/include first, as check orders them
    return [flag for root in roots for flag in ("-isystem", str(root))], python_include_dir(env.path / "bin" / "python")


@pytest.mark.integration
def test_each_rewritten_case_compiles_and_would_not_without_its_rewrite(tmp_path: Path,
                                                                       torch_flags: tuple[list[str], Path]) -> None:
    flags, _ = torch_flags
    stable = [TARGET_DEFINE, *flags]
    rewritten, without = [], []
    for case in CASES:
        done = _rewrite(OLD_INCLUDE + case.body, REWRITES)
        rewritten.append(tmp_path / "rewritten" / f"{case.name}.cpp")
        rewritten[-1].parent.mkdir(exist_ok=True)
        rewritten[-1].write_text(done.text)
        undone = _rewrite(OLD_INCLUDE + case.body, _without(case.idioms + case.fallbacks))
        assert undone.text != done.text, case.name
        without.append(tmp_path / "without" / f"{case.name}.cpp")
        without[-1].parent.mkdir(exist_ok=True)
        without[-1].write_text(undone.text)
    compiled, uncompiled = _compile(rewritten, stable), _compile(without, stable)  # both at once
    (returncode, stderr), (_, without_stderr) = _finish(compiled), _finish(uncompiled)
    assert _failed(rewritten, stderr) == set() and returncode == 0, stderr[-6000:]
    assert _failed(without, without_stderr) == {path.name for path in without}, without_stderr[-6000:]


@pytest.mark.integration
def test_the_old_cases_are_real_aten_code(tmp_path: Path, torch_flags: tuple[list[str], Path]) -> None:
    """All the cases at once, the old way, against the full torch (no torch-target): one
    translation unit, as <torch/extension.h> alone takes most of a minute to parse."""
    flags, python_include = torch_flags
    source = tmp_path / "old.cpp"
    source.write_text(OLD_INCLUDE + "".join(f"namespace case_{i} {{\n{case.body}}}\n" for i, case in enumerate(CASES)))
    returncode, stderr = _finish(_compile([source], [*flags, f"-I{python_include}"]))
    assert returncode == 0, stderr[-6000:]


# ---- the device guard and the current stream, through the helper header migrate adds -------------

HELPED = """\
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

void launch(const float* in, cudaStream_t stream);

void run(const at::Tensor& x, const std::optional<at::Tensor>& bias, int device) {
  const at::DeviceGuard device_guard(x.device());
  if (bias.has_value()) {
    c10::cuda::OptionalCUDAGuard bias_guard(device_of(*bias));
  }
  c10::OptionalDeviceGuard same{at::device_of(x)};
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  auto on = c10::cuda::getCurrentCUDAStream(device);
  launch(x.data_ptr<float>(), c10::cuda::getCurrentCUDAStream().stream());
  launch(x.data_ptr<float>(), on.stream());
  launch(x.data_ptr<float>(), on);
  launch(x.data_ptr<float>(), stream);
}

void check(const at::Tensor& q, const at::Tensor& k) {
  at::TensorArg q_arg{q, "q", 1}, k_arg{k, "k", 2};
  const at::CheckedFrom c = "flash_fwd";
  at::checkAllSameGPU(c, {q_arg, k_arg});
  at::checkAllContiguous(c, {q_arg, k_arg});
  at::checkDeviceType(c, {q, k}, at::kCUDA);
}
"""
HELPER_IDIOMS = ("device-guard", "device-guard-of", "cuda-stream", "tensor-checks")


def _rewrite_helped(text: str, rewrites: RewriteSet, directory: Path) -> FileRewrite:
    """Every step, then the includes as migrate writes them: the helper header's quoted include,
    the CUDA headers replaced on their lines; the header itself written beside the file."""
    file = _rewrite(text, rewrites, includes=False)
    local = ('"assemble_stable_helpers.h"',) if file.helpers else ()
    rewrite_includes(file, file.includes, rewrites.unstable_includes, False, local, rewrites.replaced_includes)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "run.cpp").write_text(file.text)
    if file.helpers:
        (directory / helpers.NAME).write_text(helpers.header_text(None, file.helpers))
    return file


def test_the_guards_and_streams_are_rewritten_to_the_helper_and_nothing_is_left(tmp_path: Path) -> None:
    file = _rewrite_helped(HELPED, REWRITES, tmp_path)
    assert file.helpers == {"device-guard", "cuda-stream", "tensor-checks"} and file.declined == []
    made = file.made
    assert (made["device-guard"], made["device-guard-of"], made["cuda-stream"], made["tensor-checks"]) == (1, 2, 3, 5)
    lines = file.text.splitlines()
    # <torch/extension.h> gives its line to the stable headers and the helper's; the CUDA stream's to the CUDA runtime
    assert lines[:5] == ['#include <torch/csrc/stable/tensor.h>', '#include <torch/headeronly/core/DeviceType.h>',
                         '#include "assemble_stable_helpers.h"', '#include <cuda_runtime.h>', '']
    assert "  const assemble_stable::TensorDeviceGuard device_guard(x);" in lines
    assert "    assemble_stable::TensorDeviceGuard bias_guard(*bias);" in lines
    assert "  assemble_stable::TensorDeviceGuard same{x};" in lines
    assert "  cudaStream_t stream = assemble_stable::current_cuda_stream();" in lines
    assert "  auto on = assemble_stable::current_cuda_stream(device);" in lines
    assert "  launch(x.mutable_data_ptr<float>(), assemble_stable::current_cuda_stream().stream());" in lines
    assert '  assemble_stable::TensorArg q_arg{q, "q", 1}, k_arg{k, "k", 2};' in lines
    assert "  assemble_stable::checkDeviceType(c, {q, k}, torch::headeronly::DeviceType::CUDA);" in lines
    assert _remaining(file.text) == []


def test_the_helper_header_gets_a_piece_once() -> None:
    """A later migration adds only the pieces the header lacks, and one already there (edited
    by a person, say) is left as it is."""
    first = helpers.header_text(None, {"device-guard"})
    assert helpers.pieces_in(first) == {"device-guard"} and helpers.MARK in first
    edited = first.replace("tensor.get_device_index() >= 0", "tensor.is_cuda()")
    second = helpers.header_text(edited, {"device-guard", "cuda-stream"})
    assert second.startswith(edited.rstrip("\n")) and helpers.pieces_in(second) == {"device-guard", "cuda-stream"}
    assert second.count("class TensorDeviceGuard") == 1 and second.count("inline CUDAStream current_cuda_stream(") == 1
    assert helpers.header_text(second, {"cuda-stream", "device-guard"}) == second


@pytest.fixture(scope="module", name="cuda_include")
def cuda_include_fixture(toolchains: Path) -> Path:
    from assembler.toolchain.cuda import select_cuda
    from tests.build_support import HERMETIC_CUDA

    return select_cuda(HERMETIC_CUDA).root / "include"


@pytest.mark.integration
def test_the_guards_and_streams_compile_through_the_helper_and_would_not_without(
        tmp_path: Path, torch_flags: tuple[list[str], Path], cuda_include: Path) -> None:
    """The rewritten file and the header compile at torch-target 2.10 with only stable torch
    headers and the CUDA runtime's (cudaStream_t is CUstream_st*, the header's own type), also
    where the shim itself declares the stream function (-DUSE_CUDA); without the helper
    rewrites the file does not; and the old file is real ATen code (full torch, CUDA headers)."""
    flags, python_include = torch_flags
    cuda = ["-isystem", str(cuda_include)]
    stable = [TARGET_DEFINE, *flags, *cuda]
    _rewrite_helped(HELPED, REWRITES, tmp_path / "helped")
    undone = _rewrite_helped(HELPED, _without(HELPER_IDIOMS), tmp_path / "without")
    assert "getCurrentCUDAStream" in undone.text and not undone.helpers  # the CUDA headers stay: uses are left
    old = tmp_path / "old" / "run.cpp"
    old.parent.mkdir()
    old.write_text(HELPED)
    # the build torch (a CPU wheel) ships c10/cuda's headers but not CMake's generated one: an empty stand-in, as assess
    # preprocesses a header the machine lacks
    generated = tmp_path / "stand-in" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    generated.parent.mkdir(parents=True)
    generated.write_text("")
    runs = [_compile([tmp_path / "helped" / "run.cpp"], stable),
            _compile([tmp_path / "helped" / "run.cpp"], [*stable, "-DUSE_CUDA"]),
            _compile([tmp_path / "without" / "run.cpp"], stable),
            _compile([old], [*flags, *cuda, f"-I{python_include}", f"-I{tmp_path / 'stand-in'}"])]
    (helped, helped_err), (shim, shim_err), (without, without_err), (aten, aten_err) = [_finish(run) for run in runs]
    assert helped == 0, helped_err[-6000:]
    assert shim == 0, shim_err[-6000:]
    assert without != 0 and "getCurrentCUDAStream" in without_err + undone.text, without_err[-3000:]
    assert aten == 0, aten_err[-6000:]


def test_a_decline_before_the_include_step_is_at_its_line_after_it(tmp_path: Path) -> None:
    """A rewrite declined in an early step names its line in the file as committed, after the
    include step has added lines above it."""
    from assembler.migration.migrate import MigrateReport, _run_file

    text = ('#include <torch/extension.h>\n\nbool on_first_gpu(const at::Tensor& x) {\n  at::Device first("cuda:0");\n'
            "  return x.device() == first;\n}\n")
    path = tmp_path / "first.cpp"
    path.write_text(text)
    needed = {"torch/csrc/stable/device.h", "torch/csrc/stable/tensor.h", "torch/headeronly/core/DeviceType.h"}
    run = _run_file(path, FileRewrite(text, [True] * (text.count("\n") + 1)), REWRITES, "2.9", {}, {}, needed,
                    True, tmp_path, MigrateReport("first", REWRITES.version, True))
    [declined] = [d for d in run.final.declined if d.rewrite == "device-string"]
    assert declined.line == 8 and 'at::Device first("cuda:0");' in run.final.text.splitlines()[declined.line - 1]
    assert (declined.line, "device") in _remaining(run.final.text)


def test_a_header_of_the_forks_own_with_the_name_is_never_written_over(tmp_path: Path) -> None:
    """A file named like the helper header but without its mark is the project's: the helper
    goes beside it under another name, which a later run finds and review skips the include of."""
    (tmp_path / "csrc").mkdir()
    mine = tmp_path / "csrc" / helpers.NAME
    mine.write_text("// the project's own\n")
    users = [tmp_path / "csrc" / "a.cpp", tmp_path / "csrc" / "ops" / "b.cpp"]
    placement = helpers.place(tmp_path, users, helpers.find(tmp_path, [f"csrc/{helpers.NAME}"]))
    assert placement.path == tmp_path / "csrc" / "assemble_stable_helpers_1.h" and not placement.existing
    assert placement.include(users[1]) == '"../assemble_stable_helpers_1.h"'
    placement.path.write_text(helpers.header_text(None, {"device-guard"}))
    tracked = [f"csrc/{helpers.NAME}", "csrc/assemble_stable_helpers_1.h"]
    assert helpers.find(tmp_path, tracked) == placement.path and mine.read_text() == "// the project's own\n"
    assert helpers.INCLUDE.match('#include "../assemble_stable_helpers_1.h"')


@pytest.mark.integration
def test_short_names_after_using_declarations_compile(tmp_path: Path, torch_flags: tuple[list[str], Path]) -> None:
    """A C++ source spells Tensor and ScalarType short, as QuTLASS's and FlashAttention-2's
    authors did; the result compiles at the torch-target."""
    flags, _ = torch_flags
    text = OLD_INCLUDE + "namespace q {\n" + next(c.body for c in CASES if c.name == "casts-sizes-and-options") + (
        "bool is_byte(const at::Tensor& t) { return t.scalar_type() == at::kByte; }\n}\n")
    file = FileRewrite(text, [True] * (text.count("\n") + 1))
    for step in REWRITES.steps:
        apply_step(REWRITES.of_step(step), file, TARGET, {})
    rewrite_includes(file, file.includes, REWRITES.unstable_includes, keep_unstable=False, short=True)
    assert "using torch::stable::Tensor;\nusing torch::headeronly::ScalarType;\n" in file.text
    assert "torch::stable::Tensor&" not in file.text and "return t.scalar_type() == ScalarType::Byte;" in file.text
    assert "torch::stable::new_zeros(A, {}, ScalarType::Float)" in file.text and file.declined == []
    source = tmp_path / "short.cpp"
    source.write_text(file.text)
    returncode, stderr = _finish(_compile([source], [TARGET_DEFINE, *flags]))
    assert returncode == 0, stderr[-4000:]
