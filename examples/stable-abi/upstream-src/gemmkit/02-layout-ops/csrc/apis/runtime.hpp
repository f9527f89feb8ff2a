#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "settings.hpp"

namespace gemmkit {
namespace runtime {

static void register_apis(pybind11::module_& m) {
  m.def("set_num_threads", [&](const int& num_threads) {
    settings().num_threads = num_threads;
  }, py::arg("num_threads"));
  m.def("get_num_threads", [&]() {
    return settings().get_num_threads();
  });
  m.def("set_tile_policy", [](const std::string& policy) {
    TORCH_CHECK(policy == "square" || policy == "wide", "gemmkit: the tile policy is square or wide");
    settings().tile_policy = policy;
  }, py::arg("policy") = "square");
  m.def("get_tile_policy", []() -> std::string { return settings().tile_policy; });
}

}  // namespace runtime
}  // namespace gemmkit
