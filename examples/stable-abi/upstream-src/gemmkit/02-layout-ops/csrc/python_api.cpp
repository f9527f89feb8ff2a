#include <pybind11/pybind11.h>
#include <torch/python.h>

#include "apis/gemm.hpp"
#include "apis/layout.hpp"
#include "apis/runtime.hpp"

#ifndef TORCH_EXTENSION_NAME
#define TORCH_EXTENSION_NAME _C
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "gemmkit: block GEMM kernels";

  gemmkit::gemm::register_apis(m);
  gemmkit::runtime::register_apis(m);
  gemmkit::layout::register_apis(m);
}
