// Wall-clock seconds for measurements (benchmarks, the speculative verifier's cost split).
#pragma once

#include <chrono>

namespace deepinfer {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace deepinfer
