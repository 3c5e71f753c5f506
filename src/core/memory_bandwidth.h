// Measures the machine's achievable memory-read bandwidth: the roofline that memory-bound
// kernels (decode GEMV, KV-cache reads) are compared against by the benchmarks and `deepinfer bench`.
#pragma once

#include <cstddef>

namespace deepinfer {

// Sums a freshly allocated buffer of `bytes` (make it much larger than the last-level cache) with
// every OpenMP thread, `repeats` times, and returns the best rate in GB/s (1e9 bytes per second).
// Allocates and frees the buffer on each call; blocks for roughly repeats * bytes / bandwidth.
double measure_read_bandwidth_gbps(size_t bytes, int repeats);

}  // namespace deepinfer
