// An extension on the unstable LibTorch C++ ABI: at::Tensor methods and c10 error reporting.
#include <Python.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

int64_t numel_checked(const at::Tensor& x) {
  TORCH_CHECK(x.defined(), "numel_checked: undefined tensor");
  return x.numel() + x.dim();
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "unstable_ops", nullptr, -1, nullptr};

PyMODINIT_FUNC PyInit_unstable_ops(void) { return PyModule_Create(&module); }
