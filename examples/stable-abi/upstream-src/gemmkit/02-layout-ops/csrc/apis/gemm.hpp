#pragma once

#include <torch/extension.h>

#include <optional>
#include <string>
#include <tuple>

#include "settings.hpp"

namespace gemmkit::gemm {

// A float32 CPU matrix.
static void check_matrix(const torch::Tensor& x, const char* what) {
  TORCH_CHECK(x.dim() == 2, what, ": expected a matrix");
  TORCH_CHECK(x.scalar_type() == at::kFloat, what, ": expected a float32 tensor");
  TORCH_CHECK(x.is_cpu(), what, ": expected a CPU tensor");
}

// a @ b^T, a: [m, k], b: [n, k]; compiled_dims names the dimensions a kernel would be specialised on.
static torch::Tensor gemm_nt(const torch::Tensor& a, const torch::Tensor& b, const std::optional<torch::Tensor>& c,
                             const std::string& compiled_dims) {
  check_matrix(a, "gemmkit::gemm_nt");
  check_matrix(b, "gemmkit::gemm_nt");
  TORCH_CHECK(a.size(1) == b.size(1), "gemmkit::gemm_nt: a and b must have the same k");
  TORCH_CHECK(compiled_dims == "nk" || compiled_dims == "mn", "gemmkit::gemm_nt: compiled_dims is nk or mn");
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  torch::Tensor ac = a.contiguous();
  torch::Tensor bc = b.contiguous();
  torch::Tensor d = at::empty({m, n}, ac.options().dtype(at::kFloat));
  const float* ap = ac.data_ptr<float>();
  const float* bp = bc.data_ptr<float>();
  float* dp = d.data_ptr<float>();
  const float* cp = nullptr;
  torch::Tensor cc;
  if (c.has_value()) {
    check_matrix(*c, "gemmkit::gemm_nt");
    TORCH_CHECK(c->size(0) == m && c->size(1) == n, "gemmkit::gemm_nt: c must be [m, n]");
    cc = c->contiguous();
    cp = cc.data_ptr<float>();
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float sum = cp != nullptr ? cp[i * n + j] : 0.0f;
      for (int64_t l = 0; l < k; ++l) {
        sum += ap[i * k + l] * bp[j * k + l];
      }
      dp[i * n + j] = sum;
    }
  }
  return d;
}

// The absolute maximum of each block of x; block is (rows, columns), the last blocks may be partial.
static torch::Tensor block_amax(const torch::Tensor& x, const std::tuple<int, int>& block) {
  check_matrix(x, "gemmkit::block_amax");
  const int bm = std::get<0>(block), bn = std::get<1>(block);
  TORCH_CHECK(bm > 0 && bn > 0, "gemmkit::block_amax: blocks must not be empty");
  torch::Tensor xc = x.contiguous();
  const int64_t m = xc.size(0), n = xc.size(1);
  const int64_t rows = (m + bm - 1) / bm, cols = (n + bn - 1) / bn;
  torch::Tensor out = torch::zeros({rows, cols}, torch::TensorOptions().dtype(torch::kFloat32).device(x.device()));
  const float* xp = xc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t slot = (i / bm) * cols + j / bn;
      const float value = xp[i * n + j] < 0 ? -xp[i * n + j] : xp[i * n + j];
      op[slot] = value > op[slot] ? value : op[slot];
    }
  }
  return out;
}

static void register_apis(pybind11::module_& m) {
  m.def("gemm_nt", &gemm_nt, py::arg("a"), py::arg("b"), py::arg("c") = std::nullopt,
        py::arg("compiled_dims") = "nk");
  m.def("block_amax", &block_amax, py::arg("x"), py::arg("block") = std::make_tuple(2, 2));
  // a @ b^T + c, with the bias required: what older callers used.
  m.def("gemm_nt_bias", [](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
    return gemm_nt(a, b, c, "nk");
  }, py::arg("a"), py::arg("b"), py::arg("c"));
}

}  // namespace gemmkit::gemm
