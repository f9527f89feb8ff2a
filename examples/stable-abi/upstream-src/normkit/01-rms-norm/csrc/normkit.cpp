#include "normkit.h"

#include <cmath>

#ifdef NORMKIT_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace normkit {
namespace {

// Rows of the last dimension, and that dimension's length.
std::pair<int64_t, int64_t> rows_and_cols(const at::Tensor& x) {
  const int64_t cols = x.size(-1);
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}

// 1 / sqrt(mean(row * row) + eps)
float inverse_rms(const float* row, int64_t cols, double eps) {
  double sum = 0.0;
  for (int64_t j = 0; j < cols; ++j) {
    sum += static_cast<double>(row[j]) * row[j];
  }
  const double mean = cols == 0 ? 0.0 : sum / static_cast<double>(cols);
  return static_cast<float>(1.0 / std::sqrt(mean + eps));
}

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_input(x, "normkit::rms_norm");
  check_input(weight, "normkit::rms_norm");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1),
              "normkit::rms_norm: weight must have the length of x's last dimension");
  const at::DeviceGuard device_guard(x.device());
#ifdef NORMKIT_WITH_CUDA
  // A CUDA build would launch on the caller's stream.
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  (void)stream;
#endif

  at::Tensor in = x.contiguous();
  at::Tensor w = weight.contiguous();
  at::Tensor out = at::empty_like(in);
  const auto [rows, cols] = rows_and_cols(in);
  const float* ip = in.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    const float scale = inverse_rms(ip + i * cols, cols, eps);
    for (int64_t j = 0; j < cols; ++j) {
      op[i * cols + j] = ip[i * cols + j] * scale * wp[j];
    }
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_stats(const at::Tensor& x, double eps) {
  check_input(x, "normkit::rms_norm_stats");
  at::Tensor in = x.contiguous();
  const auto [rows, cols] = rows_and_cols(in);
  at::Tensor out = at::empty_like(in);
  at::Tensor rstd = at::empty({rows}, in.options().dtype(at::kFloat));
  const float* ip = in.data_ptr<float>();
  float* op = out.data_ptr<float>();
  float* rp = rstd.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    rp[i] = inverse_rms(ip + i * cols, cols, eps);
    for (int64_t j = 0; j < cols; ++j) {
      op[i * cols + j] = ip[i * cols + j] * rp[i];
    }
  }
  std::vector<int64_t> batch(x.sizes().begin(), x.sizes().end() - 1);
  return {out, rstd.view(batch)};
}

at::Tensor group_sum(const at::Tensor& x, const int& groups) {
  check_input(x, "normkit::group_sum");
  TORCH_CHECK(groups > 0 && x.size(-1) % groups == 0,
              "normkit::group_sum: groups must divide the last dimension");
  at::Tensor in = x.contiguous();
  const auto [rows, cols] = rows_and_cols(in);
  const int64_t width = cols / groups;
  at::Tensor out = torch::zeros({rows, static_cast<int64_t>(groups)},
                                torch::TensorOptions().dtype(torch::kFloat32).device(x.device()));
  const float* ip = in.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      op[i * groups + j / width] += ip[i * cols + j];
    }
  }
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = groups;
  return out.view(shape);
}

at::Tensor scale_shift(const at::Tensor& x, const std::tuple<at::Tensor, std::optional<at::Tensor>>& affine) {
  check_input(x, "normkit::scale_shift");
  const at::Tensor& scale = std::get<0>(affine);
  const std::optional<at::Tensor>& shift = std::get<1>(affine);
  check_input(scale, "normkit::scale_shift");
  TORCH_CHECK(scale.numel() == x.size(-1), "normkit::scale_shift: scale must have the length of x's last dimension");
  at::Tensor in = x.contiguous();
  at::Tensor s = scale.contiguous();
  at::Tensor b;
  if (shift.has_value()) {
    check_input(*shift, "normkit::scale_shift");
    TORCH_CHECK(shift->numel() == x.size(-1), "normkit::scale_shift: shift must have the length of x's last dimension");
    b = shift->contiguous();
  }
  at::Tensor out = at::empty_like(in);
  const auto [rows, cols] = rows_and_cols(in);
  const float* ip = in.data_ptr<float>();
  const float* sp = s.data_ptr<float>();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      op[i * cols + j] = ip[i * cols + j] * sp[j] + (bp != nullptr ? bp[j] : 0.0f);
    }
  }
  return out;
}

#ifndef NORMKIT_NO_LEGACY
// The 0.x entry point: unit weight, fixed eps. setup.py builds without it.
at::Tensor rms_norm_unit(const at::Tensor& x) {
  return rms_norm(x, at::ones({x.size(-1)}, x.options()), 1e-6);
}
#endif

}  // namespace normkit

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "normkit: RMS normalisation kernels";
  m.def("rms_norm", &normkit::rms_norm, "RMS-normalise the last dimension",
        py::arg("x"), py::arg("weight"), py::arg("eps") = 1e-6);
  m.def("rms_norm_stats", &normkit::rms_norm_stats, "rms_norm and 1 / rms of each row",
        py::arg("x"), py::arg("eps") = 1e-6);
  m.def("group_sum", &normkit::group_sum, "Sums of groups of the last dimension",
        py::arg("x"), py::arg("groups"));
  m.def("scale_shift", &normkit::scale_shift, "x * scale + shift along the last dimension",
        py::arg("x"), py::arg("affine"));
#ifndef NORMKIT_NO_LEGACY
  m.def("rms_norm_unit", &normkit::rms_norm_unit, py::arg("x"));
#endif
}
