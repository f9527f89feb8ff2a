#pragma once

#include <torch/extension.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "settings.hpp"

namespace gemmkit::layout {

static void check_float_matrix(const torch::Tensor& x, const char* what) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, what, ": expected a float32 matrix");
  TORCH_CHECK(x.is_cpu(), what, ": expected a CPU tensor");
}

// Rows [0, at) and [at, m) of x, each a new contiguous matrix.
static std::pair<torch::Tensor, torch::Tensor> split_rows(const torch::Tensor& x, int64_t at) {
  check_float_matrix(x, "gemmkit::split_rows");
  TORCH_CHECK(at >= 0 && at <= x.size(0), "gemmkit::split_rows: at is outside the rows");
  torch::Tensor xc = x.contiguous();
  const int64_t m = xc.size(0), n = xc.size(1);
  torch::Tensor top = at::empty({at, n}, xc.options());
  torch::Tensor bottom = at::empty({m - at, n}, xc.options());
  const float* xp = xc.data_ptr<float>();
  float* tp = top.data_ptr<float>();
  float* bp = bottom.data_ptr<float>();
  for (int64_t i = 0; i < m * n; ++i) {
    if (i < at * n) {
      tp[i] = xp[i];
    } else {
      bp[i - at * n] = xp[i];
    }
  }
  return {top, bottom};
}

// values * scales[:, None] (+ bias), in dtype (float32 or float64); a is (values, row scales).
static torch::Tensor dequantize(const std::pair<torch::Tensor, torch::Tensor>& a,
                                std::optional<const at::Tensor>& bias, const at::ScalarType& dtype) {
  const torch::Tensor& values = a.first;
  const torch::Tensor& scales = a.second;
  check_float_matrix(values, "gemmkit::dequantize");
  TORCH_CHECK(scales.dim() == 1 && scales.size(0) == values.size(0), "gemmkit::dequantize: one scale per row");
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble, "gemmkit::dequantize: float32 or float64 out");
  torch::Tensor vc = values.contiguous();
  torch::Tensor sc = scales.contiguous();
  const int64_t m = vc.size(0), n = vc.size(1);
  const float* vp = vc.data_ptr<float>();
  const float* sp = sc.data_ptr<float>();
  const float* zp = nullptr;
  if (bias.has_value()) {
    TORCH_CHECK(bias->numel() == n && bias->is_contiguous(), "gemmkit::dequantize: bias is one contiguous row");
    zp = bias->data_ptr<float>();
  }
  torch::Tensor out = at::empty({m, n}, vc.options().dtype(dtype));
  if (dtype == at::kFloat) {
    float* op = out.data_ptr<float>();
    for (int64_t i = 0; i < m * n; ++i) {
      op[i] = vp[i] * sp[i / n] + (zp != nullptr ? zp[i % n] : 0.0f);
    }
  } else {
    double* op = out.data_ptr<double>();
    for (int64_t i = 0; i < m * n; ++i) {
      op[i] = static_cast<double>(vp[i]) * sp[i / n] + (zp != nullptr ? zp[i % n] : 0.0);
    }
  }
  return out;
}

// The rows of x named by rows, in that order.
static torch::Tensor gather_rows(const torch::Tensor& x, const std::vector<int64_t>& rows) {
  check_float_matrix(x, "gemmkit::gather_rows");
  torch::Tensor xc = x.contiguous();
  const int64_t m = xc.size(0), n = xc.size(1);
  torch::Tensor out = at::empty({static_cast<int64_t>(rows.size()), n}, xc.options());
  const float* xp = xc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (size_t r = 0; r < rows.size(); ++r) {
    TORCH_CHECK(rows[r] >= 0 && rows[r] < m, "gemmkit::gather_rows: row ", rows[r], " is outside x");
    for (int64_t j = 0; j < n; ++j) {
      op[r * n + j] = xp[rows[r] * n + j];
    }
  }
  return out;
}

// The column sums of each matrix.
static std::vector<torch::Tensor> column_sums(const std::vector<torch::Tensor>& xs) {
  std::vector<torch::Tensor> sums;
  for (const torch::Tensor& x : xs) {
    check_float_matrix(x, "gemmkit::column_sums");
    torch::Tensor xc = x.contiguous();
    const int64_t m = xc.size(0), n = xc.size(1);
    torch::Tensor out = at::zeros({n}, xc.options());
    const float* xp = xc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t j = 0; j < n; ++j) {
      float& total = op[j];
      for (int64_t i = 0; i < m; ++i) {
        total += xp[i * n + j];
      }
    }
    sums.push_back(out);
  }
  return sums;
}

// The sizes of x, as a list.
static std::vector<int64_t> shape_of(const torch::Tensor& x) {
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < x.dim(); ++d) {
    sizes.push_back(x.size(d));
  }
  return sizes;
}

// x scaled by factor, or by -factor when mode is "negate".
static torch::Tensor scale_rows_by(const torch::Tensor& x, double factor, c10::string_view mode) {
  check_float_matrix(x, "gemmkit::scale_rows_by");
  TORCH_CHECK(mode == "keep" || mode == "negate", "gemmkit::scale_rows_by: mode is keep or negate");
  const float f = static_cast<float>(mode == "negate" ? -factor : factor);
  torch::Tensor xc = x.contiguous();
  torch::Tensor out = at::empty_like(xc);
  const float* xp = xc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < xc.numel(); ++i) {
    op[i] = xp[i] * f;
  }
  return out;
}

static void register_apis(pybind11::module_& m) {
  m.def("split_rows", &split_rows, py::arg("x"), py::arg("at"));
  m.def("dequantize", &dequantize, py::arg("a"), py::arg("bias") = std::nullopt, py::arg("dtype") = torch::kFloat32);
  m.def("gather_rows", &gather_rows, py::arg("x"), py::arg("rows"));
  m.def("column_sums", &column_sums, py::arg("xs"));
  m.def("shape_of", &shape_of, py::arg("x"));
  m.def("scale_rows_by", &scale_rows_by, py::arg("x"), py::arg("factor"), py::arg("mode") = "keep");
  // a block multiple is one int for both dimensions, or (rows, columns)
  m.def("set_block_multiple", [](const std::variant<int, std::tuple<int, int>>& value) {
    if (std::holds_alternative<int>(value)) {
      settings().block_rows = settings().block_cols = std::get<int>(value);
    } else {
      settings().block_rows = std::get<0>(std::get<1>(value));
      settings().block_cols = std::get<1>(std::get<1>(value));
    }
  }, py::arg("value"));
}

}  // namespace gemmkit::layout
