#pragma once

// The dispatcher boxes a schema's int as int64_t and its float as double; the kernels take int
// and float. make_pytorch_shim(&f) registers f through a function that takes what the
// dispatcher passes and narrows it. Torch-free: it names no torch type.

#include <cstdint>
#include <type_traits>

namespace attnkit_shim {

template <typename T>
struct Passed {
  using type = T;
};
template <>
struct Passed<int> {
  using type = int64_t;
};
template <>
struct Passed<float> {
  using type = double;
};

template <auto F, typename Signature>
struct Shim;

template <auto F, typename R, typename... Args>
struct Shim<F, R (*)(Args...)> {
  static R call(typename Passed<Args>::type... args) { return F(static_cast<Args>(args)...); }
};

}  // namespace attnkit_shim

#define make_pytorch_shim(f) TORCH_FN((attnkit_shim::Shim<f, decltype(f)>::call))
