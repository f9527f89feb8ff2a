#pragma once

#include <torch/extension.h>

#include <optional>
#include <tuple>

namespace normkit {

// What every operator accepts: a float32 CPU tensor with at least one dimension.
inline void check_input(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.dim() >= 1, op, ": expected at least one dimension");
  TORCH_CHECK(x.scalar_type() == at::kFloat, op, ": expected a float32 tensor");
  TORCH_CHECK(x.is_cpu(), op, ": expected a CPU tensor");
}

// y = x / sqrt(mean(x * x over the last dimension) + eps) * weight
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The normalised x and 1 / rms of each row (shape: x's without the last dimension).
std::tuple<at::Tensor, at::Tensor> rms_norm_stats(const at::Tensor& x, double eps);

// Sums of consecutive groups of the last dimension: [..., n] -> [..., groups].
at::Tensor group_sum(const at::Tensor& x, const int& groups);

// x * scale + shift along the last dimension; the shift is optional.
at::Tensor scale_shift(const at::Tensor& x, const std::tuple<at::Tensor, std::optional<at::Tensor>>& affine);

}  // namespace normkit
