// A Stable-ABI op library, importable as an abi3 Python module.
//
// Compiled with -DTORCH_TARGET_VERSION=0x020A000000000000 and -DPy_LIMITED_API=0x03090000: any
// torch header outside the Stable ABI is then an #error, so this file can only use the C shim
// and header-only APIs, and the binary keeps loading on every later torch.
#include <Python.h>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

namespace {

using torch::stable::Tensor;

// out = a + alpha * b, elementwise, for float32 CPU tensors with the same number of elements.
Tensor scaled_add(Tensor a, Tensor b, double alpha) {
  STD_TORCH_CHECK(a.numel() == b.numel(), "verifydemo::scaled_add: a and b differ in size");
  STD_TORCH_CHECK(a.scalar_type() == torch::headeronly::ScalarType::Float &&
                      b.scalar_type() == torch::headeronly::ScalarType::Float,
                  "verifydemo::scaled_add: expected float32 tensors");
  Tensor x = torch::stable::contiguous(a);
  Tensor y = torch::stable::contiguous(b);
  Tensor out = torch::stable::empty_like(x);
  const float* xp = x.const_data_ptr<float>();
  const float* yp = y.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  const float scale = static_cast<float>(alpha);
  for (int64_t i = 0; i < x.numel(); ++i) {
    op[i] = xp[i] + scale * yp[i];
  }
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY(verifydemo, m) {
  m.def("scaled_add(Tensor a, Tensor b, float alpha) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(verifydemo, CPU, m) {
  m.impl("scaled_add", TORCH_BOX(&scaled_add));
}

// Importing the module is what registers the ops above; it defines nothing else.
static PyModuleDef verifydemo_module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};

PyMODINIT_FUNC PyInit__C(void) {
  return PyModule_Create(&verifydemo_module);
}
