#pragma once

#include <string>

namespace gemmkit {

// Process-wide settings of the kernels, set from Python.
struct Settings {
  int num_threads = 1;
  std::string tile_policy = "square";
  int block_rows = 1;
  int block_cols = 1;

  int get_num_threads() const { return num_threads; }
};

inline Settings& settings() {
  static Settings instance;
  return instance;
}

}  // namespace gemmkit
