// A CUDA-only Stable-ABI op library: its op is registered for the CUDA dispatch key and it links
// libcudart, so it cannot load on a CPU-only torch, and its smoke call needs a GPU. It copies
// with cudaMemcpy instead of launching a kernel, so plain g++ builds it (no nvcc in the test).
#include <cuda_runtime_api.h>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

namespace {

using torch::stable::Tensor;

// A copy of the float32 CUDA tensor x, made by the CUDA runtime.
Tensor device_copy(Tensor x) {
  STD_TORCH_CHECK(x.scalar_type() == torch::headeronly::ScalarType::Float,
                  "verifydemo_cuda::device_copy: expected a float32 tensor");
  Tensor in = torch::stable::contiguous(x);
  Tensor out = torch::stable::empty_like(in);
  const cudaError_t err = cudaMemcpy(out.mutable_data_ptr(), in.const_data_ptr(),
                                     static_cast<size_t>(in.numel()) * sizeof(float), cudaMemcpyDeviceToDevice);
  STD_TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY(verifydemo_cuda, m) {
  m.def("device_copy(Tensor x) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(verifydemo_cuda, CUDA, m) {
  m.impl("device_copy", TORCH_BOX(&device_copy));
}
