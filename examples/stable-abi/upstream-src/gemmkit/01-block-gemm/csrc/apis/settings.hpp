#pragma once

#include <string>

namespace gemmkit {

// Process-wide settings of the kernels, set from Python.
struct Settings {
  int num_threads = 1;
  std::string tile_policy = "square";

  int get_num_threads() const { return num_threads; }
};

inline Settings& settings() {
  static Settings instance;
  return instance;
}

}  // namespace gemmkit
