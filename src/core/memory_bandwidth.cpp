// Multithreaded streaming-read bandwidth measurement (see memory_bandwidth.h).
#include "core/memory_bandwidth.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "core/check.h"

namespace deepinfer {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

double measure_read_bandwidth_gbps(size_t bytes, int repeats) {
  DI_CHECK(bytes >= 4096 && repeats >= 1, "bytes " << bytes << ", repeats " << repeats);
  const size_t num_words = bytes / sizeof(uint64_t);
  const size_t alloc_bytes = (num_words * sizeof(uint64_t) + 63) / 64 * 64;
  std::unique_ptr<void, FreeDeleter> buffer(std::aligned_alloc(64, alloc_bytes));
  DI_CHECK(buffer != nullptr, "cannot allocate " << alloc_bytes << " bytes");
  auto* words = static_cast<uint64_t*>(buffer.get());

  // First touch with the same static split as the reads, so each thread's pages are local.
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < num_words; ++i) words[i] = i;

  double best_seconds = 0.0;
  uint64_t checksum = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (size_t i = 0; i < num_words; ++i) sum += words[i];
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    checksum += sum;
    if (r == 0 || seconds < best_seconds) best_seconds = seconds;
  }
  // The sum of 0..n-1 is known: checking it keeps the compiler from dropping the reads.
  const uint64_t n = num_words;
  const uint64_t triangle = n % 2 == 0 ? (n / 2) * (n - 1) : n * ((n - 1) / 2);
  const uint64_t expected = static_cast<uint64_t>(repeats) * triangle;  // both sides wrap mod 2^64
  DI_CHECK(checksum == expected, "bandwidth read loop summed " << checksum << ", expected " << expected);
  return static_cast<double>(num_words * sizeof(uint64_t)) / best_seconds / 1e9;
}

}  // namespace deepinfer
