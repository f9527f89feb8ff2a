#pragma once

#include <torch/all.h>

#include <optional>

namespace attnkit {

// Attention of q (Lq x D) over k and v (Lk x D), written into out (Lq x D); returns the
// log-sum-exp of each query's scaled scores (Lq). bias (Lq x Lk), when given, is added to
// the scores; window_size >= 0 keeps the keys within that distance of the query only;
// is_causal masks the keys after the query.
at::Tensor mha_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& out,
                   const std::optional<at::Tensor>& bias, float softmax_scale, int window_size,
                   bool is_causal);

// The same, allocating the output.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double softmax_scale);

}  // namespace attnkit
