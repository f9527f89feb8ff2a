#include <torch/extension.h>

namespace rowsum {

// out[i] = x[i, 0] + ... + x[i, n - 1], for a 2-D float32 CPU tensor.
at::Tensor row_sum(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2, "rowsum::row_sum: expected a 2-D tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "rowsum::row_sum: expected a float32 tensor");
  TORCH_CHECK(x.is_cpu(), "rowsum::row_sum: expected a CPU tensor");

  at::Tensor in = x.contiguous();
  const int64_t rows = in.size(0);
  const int64_t cols = in.size(1);
  at::Tensor out = at::empty({rows}, in.options());
  const float* ip = in.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    float sum = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      sum += ip[i * cols + j];
    }
    op[i] = sum;
  }
  return out;
}

}  // namespace rowsum

TORCH_LIBRARY(rowsum, m) {
  m.def("row_sum(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(rowsum, CPU, m) {
  m.impl("row_sum", &rowsum::row_sum);
}

// The module object Python imports; the operators are registered above.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}
