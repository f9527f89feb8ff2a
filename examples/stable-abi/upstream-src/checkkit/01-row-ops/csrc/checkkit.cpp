#include <torch/all.h>
#include <ATen/TensorUtils.h>
#include <torch/library.h>

#include <cstdint>

#define CHECK_FLOAT(x) TORCH_CHECK((x).dtype() == at::kFloat, #x " must be float32")

namespace checkkit {

at::Tensor row_scale(const at::Tensor& x, const at::Tensor& w) {
  torch::checkAllContiguous("row_scale", {{x, "x", 0}, {w, "w", 1}});
  torch::checkDeviceType("row_scale", {x, w}, at::DeviceType::CPU);
  CHECK_FLOAT(x);
  CHECK_FLOAT(w);
  TORCH_CHECK(x.dim() == 2 && w.dim() == 1, "x must be 2-D and w 1-D");
  const int64_t rows = x.sizes()[0];
  const int64_t cols = x.sizes()[1];
  TORCH_CHECK(w.sizes()[0] == cols, "w must have one weight per column");
  auto out = at::empty({rows, cols}, x.options().dtype(at::kFloat));
  const float* xp = (const float*)x.data_ptr();
  const float* wp = (const float*)w.data_ptr();
  float* op = (float*)out.data_ptr();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      op[i * cols + j] = xp[i * cols + j] * wp[j];
    }
  }
  return out;
}

at::Tensor total(const at::Tensor& x) {
  torch::checkAllContiguous("total", {{x, "x", 0}});
  CHECK_FLOAT(x);
  // a page-locked (pinned) x is summed where it is: the kernel reads host memory either way
  TORCH_CHECK(x.is_pinned() || x.is_cpu(), "x must be in host memory");
  auto opts = torch::TensorOptions().dtype(torch::kFloat).device(x.device());
  auto sum = torch::tensor(0.0f, opts);
  float* sp = (float*)sum.data_ptr();
  const float* xp = (const float*)x.data_ptr();
  for (int64_t i = 0; i < x.numel(); ++i) {
    *sp += xp[i];
  }
  return sum;
}

}  // namespace checkkit

TORCH_LIBRARY(checkkit, m) {
  m.def("row_scale(Tensor x, Tensor w) -> Tensor");
  m.def("total(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(checkkit, CPU, m) {
  m.impl("row_scale", &checkkit::row_scale);
  m.impl("total", &checkkit::total);
}
