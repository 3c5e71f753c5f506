// Kernel microbenchmarks against the machine's limits, all measured in one run:
//   read_bandwidth           multithreaded streaming read (the memory roofline), GB/s
//   gemv/...                 decode GEMV: weight GB/s and its ratio (bw_ratio) to the better of the
//                            first read_bandwidth and one measured just before it (read_GB/s)
//   gemv_packed/...          the GEMV over FP8 / MXFP4 weights, dequantised in registers: GB/s of
//                            packed bytes and bf16_equiv_GB/s (the same weight's bf16 bytes per second)
//   rows/...                 GEMV vs oneDNN as the row count grows (picks matmul's switch point)
//   gemm/...                 oneDNN prefill GEMM, GFLOP/s
//   attention/...            paged attention, decode (KV GB/s) and prefill (GFLOP/s)
// Run: build/bin/bench_kernels [--benchmark_filter=gemv] (OMP_NUM_THREADS sets the threads).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/memory_bandwidth.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/ops.h"

namespace deepinfer::kernels {
namespace {

// Weights are cycled through copies totalling this much, so every call streams from DRAM as a
// decode step does (each layer's weights have left the cache by the time they are used again).
constexpr size_t kColdBytes = size_t{512} << 20;
constexpr size_t kBandwidthBytes = size_t{1} << 30;

double g_read_gbps = 0.0;

// A value in [-1, 1) from an index hash: cheap enough to fill gigabytes in parallel.
float pseudo_random(size_t i) {
  uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  return static_cast<float>(h >> 40) / static_cast<float>(1 << 23) - 1.0f;
}

// `copies` weights of [n, k] in dtype, in one allocation.
struct WeightSet {
  std::vector<uint16_t> half;
  std::vector<float> f32;
  DType dtype;
  int64_t n;
  int64_t k;
  int copies;

  WeightSet(DType dtype_in, int64_t n_in, int64_t k_in, int copies_in)
      : dtype(dtype_in), n(n_in), k(k_in), copies(copies_in) {
    const auto count = static_cast<int64_t>(n * k) * copies;
    if (dtype == DType::kF32) {
      f32.resize(static_cast<size_t>(count));
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < count; ++i) f32[static_cast<size_t>(i)] = pseudo_random(static_cast<size_t>(i));
    } else {
      half.resize(static_cast<size_t>(count));
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < count; ++i) {
        const float v = pseudo_random(static_cast<size_t>(i));
        half[static_cast<size_t>(i)] = dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
      }
    }
  }
  size_t bytes_each() const { return static_cast<size_t>(n * k) * dtype_size_bytes(dtype); }
  WeightView view(int i) const {
    const char* base =
        dtype == DType::kF32 ? reinterpret_cast<const char*>(f32.data()) : reinterpret_cast<const char*>(half.data());
    return WeightView{base + static_cast<size_t>(i) * bytes_each(), dtype, n, k};
  }
};

int cold_copies(size_t bytes_each) { return static_cast<int>((kColdBytes + bytes_each - 1) / bytes_each); }

std::string dtype_label(DType dtype) { return dtype == DType::kBF16 ? "bf16" : dtype == DType::kF16 ? "f16" : "f32"; }

void bm_read_bandwidth(benchmark::State& state) {
  double gbps = 0.0;
  for (auto _ : state) gbps = measure_read_bandwidth_gbps(kBandwidthBytes, 3);
  state.counters["GB/s"] = gbps;
}

void bm_gemv(benchmark::State& state, DType dtype, int64_t n, int64_t k, int64_t rows) {
  const WeightSet weights(dtype, n, k, cold_copies(static_cast<size_t>(n * k) * dtype_size_bytes(dtype)));
  std::vector<float> x(static_cast<size_t>(rows * k), 0.5f);
  std::vector<float> y(static_cast<size_t>(rows * n));
  const cpu::Isa isa = cpu::best_isa();
  // This machine's bandwidth drifts (shared host): measure the roofline again right before.
  const double read_gbps = std::max(g_read_gbps, measure_read_bandwidth_gbps(kBandwidthBytes / 2, 3));
  int i = 0;
  for (auto _ : state) {
    cpu::gemv(x.data(), weights.view(i), rows, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % weights.copies;
  }
  const double bytes = static_cast<double>(weights.bytes_each()) * static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["read_GB/s"] = read_gbps;
  state.counters["bw_ratio"] = benchmark::Counter(bytes / 1e9 / read_gbps, benchmark::Counter::kIsRate);
}

// One matmul of `rows` rows through the GEMV or oneDNN, cold weights: the switch point sweep.
void bm_rows(benchmark::State& state, DType dtype, int64_t n, int64_t k, int64_t rows, bool use_gemv) {
  const WeightSet weights(dtype, n, k, cold_copies(static_cast<size_t>(n * k) * dtype_size_bytes(dtype)));
  std::vector<float> x(static_cast<size_t>(rows * k), 0.5f);
  std::vector<float> y(static_cast<size_t>(rows * n));
  int i = 0;
  for (auto _ : state) {
    if (use_gemv) {
      cpu::gemv(x.data(), weights.view(i), rows, y.data(), cpu::best_isa());
    } else {
      cpu::onednn_matmul(x.data(), weights.view(i), rows, y.data());
    }
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % weights.copies;
  }
  state.counters["us/row"] = benchmark::Counter(static_cast<double>(rows) * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(rows * n * k) / 1e9 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void bm_gemm(benchmark::State& state, DType dtype, int64_t rows, int64_t n, int64_t k) {
  const WeightSet weights(dtype, n, k, 1);
  std::vector<float> x(static_cast<size_t>(rows * k), 0.5f);
  std::vector<float> y(static_cast<size_t>(rows * n));
  for (auto _ : state) {
    cpu::matmul(x.data(), weights.view(0), WeightView{}, rows, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(rows * n * k) / 1e9 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// Paged attention over one sequence of seq_len cached tokens with num_new new ones.
void bm_attention(benchmark::State& state, int32_t seq_len, int32_t num_new) {
  const int32_t num_heads = 32, num_kv_heads = 8, head_dim = 128, block_size = 16;
  const int32_t num_blocks = (seq_len + block_size - 1) / block_size;
  const size_t cache_floats = static_cast<size_t>(num_blocks) * block_size * num_kv_heads * head_dim;
  std::vector<float> k_cache(cache_floats), v_cache(cache_floats);
  for (size_t i = 0; i < cache_floats; ++i) {
    k_cache[i] = pseudo_random(i);
    v_cache[i] = pseudo_random(i + cache_floats);
  }
  std::vector<int32_t> block_table(static_cast<size_t>(num_blocks));
  for (int32_t b = 0; b < num_blocks; ++b) block_table[static_cast<size_t>(b)] = b;
  const int32_t query_start[2] = {0, num_new};
  const PagedBatch batch{1, query_start, &seq_len, block_table.data(), num_blocks, block_size};
  const AttentionParams params{num_heads, num_kv_heads, head_dim, 1.0f / std::sqrt(128.0f), 0};
  std::vector<float> q(static_cast<size_t>(num_new) * num_heads * head_dim, 0.01f);
  std::vector<float> out(q.size());
  for (auto _ : state) {
    cpu::paged_attention(q.data(), k_cache.data(), v_cache.data(), batch, params, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  // Score and value FLOPs of the causal triangle (or the decode row).
  double key_visits = 0.0;
  for (int32_t j = 0; j < num_new; ++j) key_visits += seq_len - num_new + j + 1;
  const double flops = 4.0 * key_visits * num_heads * head_dim;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  if (num_new == 1) {
    const double kv_bytes = 2.0 * static_cast<double>(seq_len) * num_kv_heads * head_dim * sizeof(float);
    state.counters["KV GB/s"] =
        benchmark::Counter(kv_bytes / 1e9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  }
}

// `copies` block-quantised weights of [n, k] (FP8 in 128 x 128 blocks, or MXFP4), random codes
// (FP8 avoiding the NaN code) and scales near 1, in one allocation each for values and scales.
struct PackedWeightSet {
  std::vector<uint8_t> values;
  std::vector<float> fp8_scales;
  std::vector<uint8_t> mx_scales;
  DType dtype;
  int64_t n;
  int64_t k;
  int copies;

  PackedWeightSet(DType dtype_in, int64_t n_in, int64_t k_in, int copies_in)
      : dtype(dtype_in), n(n_in), k(k_in), copies(copies_in) {
    values.resize(static_cast<size_t>(value_bytes_each()) * static_cast<size_t>(copies));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < values.size(); ++i) {
      const auto code = static_cast<uint8_t>((pseudo_random(i) + 1.0f) * 128.0f);
      values[i] = dtype == DType::kF8E4M3 && (code & 0x7f) == 0x7f ? 0 : code;
    }
    if (dtype == DType::kF8E4M3) {
      fp8_scales.assign(static_cast<size_t>(scales_each()) * static_cast<size_t>(copies), 1.0f / 64);
    } else {
      mx_scales.assign(static_cast<size_t>(scales_each()) * static_cast<size_t>(copies), 124);
    }
  }
  int64_t value_bytes_each() const { return dtype == DType::kF8E4M3 ? n * k : n * k / 2; }
  int64_t scales_each() const { return dtype == DType::kF8E4M3 ? (n + 127) / 128 * ((k + 127) / 128) : n * k / 32; }
  WeightView view(int i) const {
    WeightView w{values.data() + static_cast<size_t>(i) * static_cast<size_t>(value_bytes_each()), dtype, n, k};
    if (dtype == DType::kF8E4M3) {
      w.scales = fp8_scales.data() + static_cast<size_t>(i) * static_cast<size_t>(scales_each());
      w.scale_block_rows = 128;
      w.scale_block_cols = 128;
    } else {
      w.scales = mx_scales.data() + static_cast<size_t>(i) * static_cast<size_t>(scales_each());
      w.scale_block_rows = 1;
      w.scale_block_cols = static_cast<int32_t>(kMxfp4Block);
    }
    return w;
  }
};

// The packed GEMV on a decode shape: GB/s of the bytes it reads (values and scales), and
// bf16_equiv_GB/s, the bf16 bytes of the same weight per second (compare with gemv/bf16 on the
// shape: their ratio is the decode speed-up the smaller weight buys).
void bm_gemv_packed(benchmark::State& state, DType dtype, int64_t n, int64_t k, int64_t rows) {
  const PackedWeightSet probe(dtype, n, k, 1);
  const PackedWeightSet weights(dtype, n, k, cold_copies(static_cast<size_t>(weight_bytes(probe.view(0)))));
  std::vector<float> x(static_cast<size_t>(rows * k), 0.5f);
  std::vector<float> y(static_cast<size_t>(rows * n));
  const cpu::Isa isa = cpu::best_isa();
  const double read_gbps = std::max(g_read_gbps, measure_read_bandwidth_gbps(kBandwidthBytes / 2, 3));
  int i = 0;
  for (auto _ : state) {
    cpu::gemv(x.data(), weights.view(i), rows, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % weights.copies;
  }
  const auto iterations = static_cast<double>(state.iterations());
  const double bytes = static_cast<double>(weight_bytes(weights.view(0))) * iterations;
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["bf16_equiv_GB/s"] =
      benchmark::Counter(static_cast<double>(2 * n * k) * iterations / 1e9, benchmark::Counter::kIsRate);
  state.counters["read_GB/s"] = read_gbps;
  state.counters["bw_ratio"] = benchmark::Counter(bytes / 1e9 / read_gbps, benchmark::Counter::kIsRate);
}

void register_benchmarks() {
  benchmark::RegisterBenchmark("read_bandwidth", bm_read_bandwidth)
      ->Iterations(1)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  struct Shape {
    int64_t n;
    int64_t k;
  };
  // Decode shapes of 1-8B models: attention projections, MLP up/down, and a 152k-token LM head.
  const Shape decode_shapes[] = {{1024, 4096}, {4096, 4096}, {14336, 4096}, {4096, 14336}, {151936, 1024}};
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kF16}) {
    for (Shape s : decode_shapes) {
      for (int64_t rows : {1, 4}) {
        if (dtype != DType::kBF16 && rows != 1) continue;
        const std::string name = "gemv/" + dtype_label(dtype) + "/N=" + std::to_string(s.n) +
                                 "/K=" + std::to_string(s.k) + "/rows=" + std::to_string(rows);
        benchmark::RegisterBenchmark(name.c_str(), bm_gemv, dtype, s.n, s.k, rows)
            ->MinTime(0.5)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  // Packed FP8 / MXFP4 weights on the shapes of gemv/bf16 (a DeepSeek-V3 / GPT-OSS expert is of this size).
  for (DType dtype : {DType::kF8E4M3, DType::kMxfp4}) {
    for (Shape s : {Shape{4096, 4096}, Shape{14336, 4096}}) {
      for (int64_t rows : {1, 4}) {
        const std::string name = std::string("gemv_packed/") + (dtype == DType::kF8E4M3 ? "fp8" : "mxfp4") +
                                 "/N=" + std::to_string(s.n) + "/K=" + std::to_string(s.k) +
                                 "/rows=" + std::to_string(rows);
        benchmark::RegisterBenchmark(name.c_str(), bm_gemv_packed, dtype, s.n, s.k, rows)
            ->MinTime(0.5)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kF16}) {
    for (int64_t rows : {1, 4, 8, 16, 24, 32, 48, 64, 128, 256}) {
      for (bool use_gemv : {true, false}) {
        const std::string name = std::string("rows/") + (use_gemv ? "gemv/" : "onednn/") + dtype_label(dtype) +
                                 "/N=4096/K=4096/rows=" + std::to_string(rows);
        benchmark::RegisterBenchmark(name.c_str(), bm_rows, dtype, int64_t{4096}, int64_t{4096}, rows, use_gemv)
            ->MinTime(0.3)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  const Shape prefill_shapes[] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kF16}) {
    for (Shape s : prefill_shapes) {
      for (int64_t rows : {128, 512, 2048}) {
        const std::string name = "gemm/" + dtype_label(dtype) + "/M=" + std::to_string(rows) +
                                 "/N=" + std::to_string(s.n) + "/K=" + std::to_string(s.k);
        benchmark::RegisterBenchmark(name.c_str(), bm_gemm, dtype, rows, s.n, s.k)
            ->MinTime(0.5)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  for (int32_t seq_len : {1024, 8192, 32768}) {
    benchmark::RegisterBenchmark(("attention/decode/seq_len=" + std::to_string(seq_len)).c_str(), bm_attention, seq_len,
                                 1)
        ->MinTime(0.3)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (int32_t seq_len : {512, 2048}) {
    benchmark::RegisterBenchmark(("attention/prefill/seq_len=" + std::to_string(seq_len)).c_str(), bm_attention,
                                 seq_len, seq_len)
        ->MinTime(0.5)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace deepinfer::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // The roofline every bw_ratio is divided by: measured first, in this process, with these threads.
  deepinfer::kernels::g_read_gbps = deepinfer::measure_read_bandwidth_gbps(deepinfer::kernels::kBandwidthBytes, 5);
  std::printf("memory read bandwidth: %.2f GB/s with %d threads\n", deepinfer::kernels::g_read_gbps,
              omp_get_max_threads());
  deepinfer::kernels::register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
