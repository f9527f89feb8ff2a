#pragma once

#include <cstdint>

namespace scalekit {

constexpr int kThreadsPerBlock = 256;

// out[i] = s * in[i], one element per thread.
__global__ void scale_kernel(const float* __restrict__ in, float* __restrict__ out, float s, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = s * in[i];
  }
}

}  // namespace scalekit
