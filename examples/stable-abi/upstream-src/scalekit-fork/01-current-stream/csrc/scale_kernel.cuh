#pragma once

#include <cstdint>

namespace scalekit {

constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxBlocks = 4096;

// out[i] = s * in[i]; a grid-stride loop, so any n works with a bounded grid.
__global__ void scale_kernel(const float* __restrict__ in, float* __restrict__ out, float s, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = s * in[i];
  }
}

}  // namespace scalekit
