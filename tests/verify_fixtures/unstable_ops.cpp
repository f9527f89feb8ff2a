// The same kind of op library, built the old way against ATen's C++ API.
//
// at::cpu::cholesky_out is an exported C++ symbol of libtorch_cpu.so in torch 2.13.0 and absent
// from 2.14.1: this library builds and works on 2.13.0, and fails to load on 2.14.1 with that
// symbol undefined. Nothing at build time warns; the audit and the verify matrix do.
#include <ATen/ATen.h>
#include <ATen/ops/cholesky_cpu_dispatch.h>
#include <torch/library.h>

namespace {

// Lower Cholesky factor of a symmetric positive-definite matrix.
at::Tensor cholesky_lower(const at::Tensor& a) {
  at::Tensor out = at::empty({0}, a.options());
  at::cpu::cholesky_out(out, a, /*upper=*/false);
  return out;
}

}  // namespace

TORCH_LIBRARY(verifydemo_unstable, m) {
  m.def("cholesky_lower(Tensor a) -> Tensor");
}

TORCH_LIBRARY_IMPL(verifydemo_unstable, CPU, m) {
  m.impl("cholesky_lower", &cholesky_lower);
}
