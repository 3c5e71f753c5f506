// Multithreaded streaming-read bandwidth measurement (see memory_bandwidth.h).
#include "core/memory_bandwidth.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>

#include <omp.h>

#include "core/check.h"

namespace deepinfer {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// 64 bytes of eight lanes: GCC lowers it to one AVX-512 register, or to pairs/quads of narrower ones.
typedef uint64_t Lanes __attribute__((vector_size(64)));
constexpr size_t kWordsPerLanes = sizeof(Lanes) / sizeof(uint64_t);
// Reads ahead of the loads: the hardware prefetchers alone leave a core's bandwidth well below
// what the decode GEMV (which also streams several rows at once) reaches, and the probe must be
// the ceiling, not a weaker reader (measured on the H200 host: 94 -> 105 GB/s on 16 threads).
constexpr size_t kPrefetchWords = 512;

// Sums words[begin, end) with four independent wide accumulators, so the loop is bound by memory,
// not by one dependency chain. Cloned per ISA and picked at run time (the core layer is built
// without -march flags).
__attribute__((target_clones("avx512f", "avx2", "default"))) uint64_t sum_words(const uint64_t* words, size_t begin,
                                                                             size_t end) {
  Lanes acc[4] = {};
  size_t i = begin;
  const size_t step = 4 * kWordsPerLanes;
  for (; i + step <= end; i += step) {
    __builtin_prefetch(words + i + kPrefetchWords);
    for (size_t a = 0; a < 4; ++a) {
      Lanes chunk;
      __builtin_memcpy(&chunk, words + i + a * kWordsPerLanes, sizeof(chunk));
      acc[a] += chunk;
    }
  }
  uint64_t sum = 0;
  for (size_t a = 0; a < 4; ++a) {
    for (size_t lane = 0; lane < kWordsPerLanes; ++lane) sum += acc[a][lane];
  }
  for (; i < end; ++i) sum += words[i];
  return sum;
}

}  // namespace

double measure_read_bandwidth_gbps(size_t bytes, int repeats) {
  DI_CHECK(bytes >= 4096 && repeats >= 1, "bytes " << bytes << ", repeats " << repeats);
  const size_t num_words = bytes / sizeof(uint64_t);
  const size_t alloc_bytes = (num_words * sizeof(uint64_t) + 63) / 64 * 64;
  std::unique_ptr<void, FreeDeleter> buffer(std::aligned_alloc(64, alloc_bytes));
  DI_CHECK(buffer != nullptr, "cannot allocate " << alloc_bytes << " bytes");
  auto* words = static_cast<uint64_t*>(buffer.get());

  // Each thread reads one contiguous range; first touch uses the same ranges, so pages are local.
  const auto thread_range = [num_words](int thread, int num_threads) {
    const size_t chunk = num_words / static_cast<size_t>(num_threads) / kWordsPerLanes * kWordsPerLanes;
    const size_t begin = static_cast<size_t>(thread) * chunk;
    return std::make_pair(begin, thread == num_threads - 1 ? num_words : begin + chunk);
  };
#pragma omp parallel
  {
    const auto [begin, end] = thread_range(omp_get_thread_num(), omp_get_num_threads());
    for (size_t i = begin; i < end; ++i) words[i] = i;
  }

  double best_seconds = 0.0;
  uint64_t checksum = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    uint64_t sum = 0;
#pragma omp parallel reduction(+ : sum)
    {
      const auto [begin, end] = thread_range(omp_get_thread_num(), omp_get_num_threads());
      sum += sum_words(words, begin, end);
    }
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
