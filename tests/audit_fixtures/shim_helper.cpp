// A bundled library (no PyInit_*) calling the C shim directly, including one shim function
// no torch release declares: the audit must flag it as unknown instead of guessing a version.
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

extern "C" AOTITorchError torch_audit_fixture_future_api(AtenTensorHandle tensor);

extern "C" int64_t helper_numel(AtenTensorHandle tensor) {
  int64_t n = 0;
  if (aoti_torch_get_numel(tensor, &n) != AOTI_TORCH_SUCCESS) return -1;
  if (torch_audit_fixture_future_api(tensor) != AOTI_TORCH_SUCCESS) return -2;
  return n;
}
