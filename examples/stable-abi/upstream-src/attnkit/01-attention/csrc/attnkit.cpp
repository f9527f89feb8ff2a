#include "attnkit.h"
#include "pytorch_shim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#ifdef ATTNKIT_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace attnkit {
namespace {

void check_input(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dtype() == at::kFloat, "attnkit: ", name, " must be float32");
  TORCH_CHECK(t.dim() == 2, "attnkit: ", name, " must be 2-D");
  TORCH_CHECK(t.is_contiguous(), "attnkit: ", name, " must be contiguous");
}

}  // namespace

at::Tensor mha_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& out,
                   const std::optional<at::Tensor>& bias, float softmax_scale, int window_size,
                   bool is_causal) {
  check_input(q, "q");
  check_input(k, "k");
  check_input(v, "v");
  check_input(out, "out");
  TORCH_CHECK(k.size(1) == q.size(1) && v.size(0) == k.size(0) && v.size(1) == q.size(1),
              "attnkit: q, k and v must agree in their sizes");
  TORCH_CHECK(out.size(0) == q.size(0) && out.size(1) == q.size(1), "attnkit: out must be the size of q");
  const int64_t lq = q.size(0);
  const int64_t lk = k.size(0);
  const int64_t d = q.size(1);
  const float* bp = nullptr;
  if (bias.has_value()) {
    const at::Tensor& b = *bias;
    check_input(b, "bias");
    TORCH_CHECK(b.size(0) == lq && b.size(1) == lk, "attnkit: bias must be Lq x Lk");
    bp = b.data_ptr<float>();
  }
#ifdef ATTNKIT_WITH_CUDA
  // A CUDA build launches on the caller's stream, on q's device.
  const at::cuda::OptionalCUDAGuard device_guard(q.device());
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  (void)stream;
#endif

  at::Tensor lse = at::empty({lq}, q.options());
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  float* lp = lse.data_ptr<float>();
  std::vector<float> scores(static_cast<size_t>(lk));
  for (int64_t i = 0; i < lq; ++i) {
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < lk; ++j) {
      const bool masked = (is_causal && j > i) || (window_size >= 0 && std::abs(i - j) > window_size);
      float s = -std::numeric_limits<float>::infinity();
      if (!masked) {
        s = 0.0f;
        for (int64_t c = 0; c < d; ++c) {
          s += qp[i * d + c] * kp[j * d + c];
        }
        s = s * softmax_scale + (bp != nullptr ? bp[i * lk + j] : 0.0f);
      }
      scores[j] = s;
      top = std::max(top, s);
    }
    float total = 0.0f;
    for (int64_t j = 0; j < lk; ++j) {
      scores[j] = std::isinf(scores[j]) ? 0.0f : std::exp(scores[j] - top);
      total += scores[j];
    }
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < lk; ++j) {
        acc += scores[j] * vp[j * d + c];
      }
      op[i * d + c] = total > 0.0f ? acc / total : 0.0f;
    }
    lp[i] = total > 0.0f ? top + std::log(total) : -std::numeric_limits<float>::infinity();
  }
  return lse;
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double softmax_scale) {
  at::Tensor out = at::empty_like(q);
  mha_fwd(q, k, v, out, std::nullopt, static_cast<float>(softmax_scale), -1, false);
  return out;
}

}  // namespace attnkit

TORCH_LIBRARY(attnkit, m) {
  m.def("fwd(Tensor q, Tensor k, Tensor v, Tensor out, Tensor? bias, float softmax_scale, int window_size, "
        "bool is_causal) -> Tensor");
  m.def("attention(Tensor q, Tensor k, Tensor v, float softmax_scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(attnkit, CPU, m) {
  m.impl("fwd", make_pytorch_shim(&attnkit::mha_fwd));
  m.impl("attention", TORCH_FN(attnkit::attention));
}
