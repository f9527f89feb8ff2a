#include <algorithm>

#include <ATen/ATen.h>
#include <torch/library.h>

#include "scale_kernel.cuh"

namespace scalekit {

// Returns s * x for a float32 CUDA tensor of any shape.
at::Tensor scale(const at::Tensor& x, double s) {
  TORCH_CHECK(x.is_cuda(), "scalekit::scale: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "scalekit::scale: expected a float32 tensor");

  at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  const int64_t n = in.numel();
  const int64_t blocks = std::min<int64_t>((n + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks);
  scale_kernel<<<static_cast<unsigned int>(blocks), kThreadsPerBlock>>>(
      in.data_ptr<float>(), out.data_ptr<float>(), static_cast<float>(s), n);
  return out;
}

}  // namespace scalekit

TORCH_LIBRARY(scalekit, m) {
  m.def("scale(Tensor x, float s) -> Tensor");
}

TORCH_LIBRARY_IMPL(scalekit, CUDA, m) {
  m.impl("scale", &scalekit::scale);
}
