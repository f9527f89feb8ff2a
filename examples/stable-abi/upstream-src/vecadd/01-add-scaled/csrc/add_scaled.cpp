#include <ATen/ATen.h>
#include <torch/library.h>

namespace vecadd {

// out[i] = a[i] + alpha * b[i] for two float32 CPU vectors of the same length.
at::Tensor add_scaled(const at::Tensor& a, const at::Tensor& b, double alpha) {
  TORCH_CHECK(a.dim() == 1 && b.dim() == 1, "vecadd::add_scaled: expected 1-D tensors");
  TORCH_CHECK(a.size(0) == b.size(0), "vecadd::add_scaled: a and b must have the same length");
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
              "vecadd::add_scaled: expected float32 tensors");
  TORCH_CHECK(a.is_cpu() && b.is_cpu(), "vecadd::add_scaled: expected CPU tensors");

  at::Tensor x = a.contiguous();
  at::Tensor y = b.contiguous();
  at::Tensor out = at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* yp = y.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float scale = static_cast<float>(alpha);
  for (int64_t i = 0; i < x.numel(); ++i) {
    op[i] = xp[i] + scale * yp[i];
  }
  return out;
}

}  // namespace vecadd

TORCH_LIBRARY(vecadd, m) {
  m.def("add_scaled(Tensor a, Tensor b, float alpha) -> Tensor");
}

TORCH_LIBRARY_IMPL(vecadd, CPU, m) {
  m.impl("add_scaled", &vecadd::add_scaled);
}
