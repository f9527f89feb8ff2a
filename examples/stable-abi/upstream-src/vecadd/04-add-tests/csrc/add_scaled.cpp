#include <ATen/ATen.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>
#include <torch/library.h>

namespace vecadd {

// out = a + alpha * b, elementwise, for two float32 CPU tensors of the same shape.
at::Tensor add_scaled(const at::Tensor& a, const at::Tensor& b, double alpha) {
  STD_TORCH_CHECK(a.sizes() == b.sizes(), "vecadd::add_scaled: a and b must have the same shape");
  STD_TORCH_CHECK(a.scalar_type() == torch::headeronly::ScalarType::Float &&
                      b.scalar_type() == torch::headeronly::ScalarType::Float,
                  "vecadd::add_scaled: expected float32 tensors");
  STD_TORCH_CHECK(a.is_cpu() && b.is_cpu(), "vecadd::add_scaled: expected CPU tensors");

  // Work on flat contiguous views; the result takes the shape of a.
  at::Tensor x = a.contiguous().view({-1});
  at::Tensor y = b.contiguous().view({-1});
  at::Tensor out = at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* yp = y.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float scale = static_cast<float>(alpha);
  for (int64_t i = 0; i < x.numel(); ++i) {
    op[i] = xp[i] + scale * yp[i];
  }
  return out.view(a.sizes());
}

}  // namespace vecadd

TORCH_LIBRARY(vecadd, m) {
  m.def("add_scaled(Tensor a, Tensor b, float alpha) -> Tensor");
}

TORCH_LIBRARY_IMPL(vecadd, CPU, m) {
  m.impl("add_scaled", &vecadd::add_scaled);
}
