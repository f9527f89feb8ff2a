// A Stable-ABI extension: only the torch C shim (through torch/csrc/stable) and the CPython limited API.
#include <Python.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

using torch::stable::Tensor;

Tensor twice(const Tensor& x) {
  Tensor out = torch::stable::empty_like(x);
  torch::stable::copy_(out, x);
  return out;
}

STABLE_TORCH_LIBRARY(audit_stable, m) {
  m.def("twice(Tensor x) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(audit_stable, CPU, m) {
  m.impl("twice", TORCH_BOX(&twice));
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "stable_ops", nullptr, -1, nullptr};

PyMODINIT_FUNC PyInit_stable_ops(void) { return PyModule_Create(&module); }
