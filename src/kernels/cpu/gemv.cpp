// GEMV kernels for F32/BF16/F16 weights with fp32 accumulation: AVX-512, AVX2 and portable
// (block-quantised weights' tiles are in gemv_packed.cpp; the chunking here serves both).
// A tile is kTileCols weight rows times up to kTileRows activation rows, all accumulated in
// registers while the weight rows stream through once.
#include "kernels/cpu/gemv.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/gemv_tile.h"
#include "kernels/cpu/simd.h"

namespace deepinfer::kernels::cpu {
namespace {

// Below this many weight bytes the OpenMP fork/join costs more than the work.
constexpr int64_t kParallelMinBytes = 256 * 1024;
// Work is cut into chunks of about 1 / kChunksPerThread of a thread's share, never smaller than
// kMinChunkBytes of weights: the unit a thread that is done takes over from a slower one.
constexpr int64_t kChunksPerThread = 8;
constexpr int64_t kMinChunkBytes = 64 * 1024;

// ---------------------------------------------------------------- AVX-512: 16 lanes
template <DType kDType>
DI_TARGET_AVX512 inline __m512 load_w16(const char* row, int64_t k) {
  if constexpr (kDType == DType::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else {
    const __m256i half =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + k));
    if constexpr (kDType == DType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
    } else {
      return _mm512_cvtph_ps(half);
    }
  }
}

template <DType kDType>
DI_TARGET_AVX512 inline __m512 load_w16_masked(const char* row, int64_t k, __mmask16 mask) {
  if constexpr (kDType == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + k);
  } else {
    const __m256i half = _mm256_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(row) + k);
    if constexpr (kDType == DType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
    } else {
      return _mm512_cvtph_ps(half);
    }
  }
}

template <DType kDType, int kRows, int kCols>
DI_TARGET_AVX512 void tile_avx512(const TileArgs& a) {
  __m512 acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) acc[r][c] = _mm512_setzero_ps();
  constexpr int64_t kElemBytes = kDType == DType::kF32 ? 4 : 2;
  int64_t k = 0;
  for (; k + 16 <= a.k_in; k += 16) {
    prefetch_next_tile<kCols>(a, k * kElemBytes);
    __m512 wv[kCols];
    for (int c = 0; c < kCols; ++c) wv[c] = load_w16<kDType>(a.w + c * a.row_bytes, k);
    for (int r = 0; r < kRows; ++r) {
      const __m512 xv = _mm512_loadu_ps(a.x + r * a.k_in + k);
      for (int c = 0; c < kCols; ++c) acc[r][c] = _mm512_fmadd_ps(wv[c], xv, acc[r][c]);
    }
  }
  if (k < a.k_in) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (a.k_in - k)) - 1);
    __m512 wv[kCols];
    for (int c = 0; c < kCols; ++c) wv[c] = load_w16_masked<kDType>(a.w + c * a.row_bytes, k, mask);
    for (int r = 0; r < kRows; ++r) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, a.x + r * a.k_in + k);
      for (int c = 0; c < kCols; ++c) acc[r][c] = _mm512_fmadd_ps(wv[c], xv, acc[r][c]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) a.y[r * a.n_out + c] = _mm512_reduce_add_ps(acc[r][c]);
}

// ---------------------------------------------------------------- AVX2: 8 lanes
template <DType kDType>
DI_TARGET_AVX2 inline __m256 load_w8(const char* row, int64_t k) {
  if constexpr (kDType == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + k));
    if constexpr (kDType == DType::kBF16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
    } else {
      return _mm256_cvtph_ps(half);
    }
  }
}

// The last k_in % 8 elements, zero-padded to 8 lanes (AVX2 has no masked 16-bit loads).
template <DType kDType>
DI_TARGET_AVX2 inline __m256 load_w8_tail(const char* row, int64_t k, int64_t count) {
  alignas(32) char padded[32] = {};
  const size_t elem_bytes = kDType == DType::kF32 ? 4 : 2;
  std::memcpy(padded, row + k * static_cast<int64_t>(elem_bytes), static_cast<size_t>(count) * elem_bytes);
  return load_w8<kDType>(padded, 0);
}

template <DType kDType, int kRows, int kCols>
DI_TARGET_AVX2 void tile_avx2(const TileArgs& a) {
  __m256 acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) acc[r][c] = _mm256_setzero_ps();
  constexpr int64_t kElemBytes = kDType == DType::kF32 ? 4 : 2;
  int64_t k = 0;
  for (; k + 8 <= a.k_in; k += 8) {
    if (k % 16 == 0) prefetch_next_tile<kCols>(a, k * kElemBytes);
    __m256 wv[kCols];
    for (int c = 0; c < kCols; ++c) wv[c] = load_w8<kDType>(a.w + c * a.row_bytes, k);
    for (int r = 0; r < kRows; ++r) {
      const __m256 xv = _mm256_loadu_ps(a.x + r * a.k_in + k);
      for (int c = 0; c < kCols; ++c) acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
    }
  }
  if (k < a.k_in) {
    const int64_t count = a.k_in - k;
    __m256 wv[kCols];
    for (int c = 0; c < kCols; ++c) wv[c] = load_w8_tail<kDType>(a.w + c * a.row_bytes, k, count);
    for (int r = 0; r < kRows; ++r) {
      alignas(32) float padded[8] = {};
      std::memcpy(padded, a.x + r * a.k_in + k, static_cast<size_t>(count) * sizeof(float));
      const __m256 xv = _mm256_load_ps(padded);
      for (int c = 0; c < kCols; ++c) acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) a.y[r * a.n_out + c] = reduce_add_avx2(acc[r][c]);
}

// ---------------------------------------------------------------- portable: 8 lanes in arrays
template <DType kDType>
inline float load_w1(const char* row, int64_t k) {
  if constexpr (kDType == DType::kF32) {
    return reinterpret_cast<const float*>(row)[k];
  } else if constexpr (kDType == DType::kBF16) {
    return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[k]);
  } else {
    return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[k]);
  }
}

template <DType kDType, int kRows, int kCols>
void tile_portable(const TileArgs& a) {
  tile_portable_with<kRows, kCols>(a, [&a](int c, int64_t k) { return load_w1<kDType>(a.w + c * a.row_bytes, k); });
}

// ---------------------------------------------------------------- dispatch
template <DType kDType, int kRows, int kCols>
struct Avx512Tile {
  static void run(const TileArgs& a) { tile_avx512<kDType, kRows, kCols>(a); }
};
template <DType kDType, int kRows, int kCols>
struct Avx2Tile {
  static void run(const TileArgs& a) { tile_avx2<kDType, kRows, kCols>(a); }
};
template <DType kDType, int kRows, int kCols>
struct PortableTile {
  static void run(const TileArgs& a) { tile_portable<kDType, kRows, kCols>(a); }
};

template <template <DType, int, int> class Kernel>
TileSet tiles_for(DType dtype) {
  switch (dtype) {
    case DType::kF32: return TileTable<DType::kF32, Kernel>::kTiles;
    case DType::kBF16: return TileTable<DType::kBF16, Kernel>::kTiles;
    case DType::kF16: return TileTable<DType::kF16, Kernel>::kTiles;
    default: DI_CHECK(false, "matmul weights must be F32, BF16, F16, F8_E4M3 or MXFP4, not " << dtype_name(dtype));
  }
}

TileSet pick_tiles(Isa isa, DType dtype) {
  if (dtype == DType::kF8E4M3 || dtype == DType::kMxfp4) return packed_tiles(isa, dtype);
  switch (isa) {
    case Isa::kAvx512: return tiles_for<Avx512Tile>(dtype);
    case Isa::kAvx2: return tiles_for<Avx2Tile>(dtype);
    case Isa::kPortable: return tiles_for<PortableTile>(dtype);
  }
  DI_CHECK(false, "unknown ISA");
}

// Output columns [n_begin, n_end) for all rows: each weight tile is read from memory once and
// reused from cache for every group of kTileRows activation rows.
void gemv_range(TileSet tiles, const float* x, const WeightView& w, int64_t num_rows, int64_t n_begin, int64_t n_end,
                float* y) {
  const int64_t row_bytes = weight_row_bytes(w);
  const int64_t scale_cols = w.scales ? (w.cols + w.scale_block_cols - 1) / w.scale_block_cols : 0;
  for (int64_t n = n_begin; n < n_end;) {
    const bool full = n + kTileCols <= n_end;
    for (int64_t m = 0; m < num_rows; m += kTileRows) {
      const int64_t rows = std::min<int64_t>(kTileRows, num_rows - m);
      const TileArgs args{x + m * w.cols,     static_cast<const char*>(w.data) + n * row_bytes,
                          row_bytes,          w.cols,
                          y + m * w.rows + n, w.rows,
                          w.scales,           n,
                          scale_cols,         w.scale_block_rows,
                          w.scale_block_cols};
      tiles[rows - 1][full ? 1 : 0](args);
    }
    n += full ? kTileCols : 1;
  }
}

// The group's outputs cut into chunks of whole tiles, numbered output by output.
struct ChunkPlan {
  const GemvOutput* outputs;
  int num_outputs;
  int64_t chunk_rows[kMaxGroupOutputs];       // weight rows per chunk, a multiple of kTileCols
  int64_t first_chunk[kMaxGroupOutputs + 1];  // chunks of output i: [first_chunk[i], first_chunk[i + 1])
  int64_t num_chunks;
};

ChunkPlan plan_chunks(const GemvOutput* outputs, int num_outputs, int64_t total_bytes, int64_t num_threads) {
  ChunkPlan plan{};
  plan.outputs = outputs;
  plan.num_outputs = num_outputs;
  const int64_t chunk_bytes = std::max(kMinChunkBytes, total_bytes / (num_threads * kChunksPerThread));
  plan.first_chunk[0] = 0;
  for (int i = 0; i < num_outputs; ++i) {
    const WeightView& w = outputs[i].w;
    const int64_t row_bytes = weight_row_bytes(w);
    const int64_t tile_bytes = std::max<int64_t>(1, kTileCols * row_bytes);
    const int64_t num_tiles = (w.rows + kTileCols - 1) / kTileCols;
    const int64_t chunk_tiles = std::clamp<int64_t>(chunk_bytes / tile_bytes, 1, std::max<int64_t>(num_tiles, 1));
    plan.chunk_rows[i] = chunk_tiles * kTileCols;
    plan.first_chunk[i + 1] = plan.first_chunk[i] + (num_tiles + chunk_tiles - 1) / chunk_tiles;
  }
  plan.num_chunks = plan.first_chunk[num_outputs];
  return plan;
}

// One thread's run of chunks; its own cache line, since every claim writes it.
struct alignas(64) ChunkRun {
  std::atomic<int64_t> next{0};
  int64_t end = 0;
};

void run_chunk(const ChunkPlan& plan, const float* x, int64_t num_rows, int64_t chunk, Isa isa) {
  int i = 0;
  while (chunk >= plan.first_chunk[i + 1]) ++i;
  const GemvOutput& out = plan.outputs[i];
  const int64_t n_begin = (chunk - plan.first_chunk[i]) * plan.chunk_rows[i];
  const int64_t n_end = std::min(out.w.rows, n_begin + plan.chunk_rows[i]);
  gemv_range(pick_tiles(isa, out.w.dtype), x, out.w, num_rows, n_begin, n_end, out.y);
}

}  // namespace

void gemv(const float* x, const WeightView& w, int64_t num_rows, float* y, Isa isa) {
  const GemvOutput output{w, y};
  gemv_group(x, &output, 1, num_rows, isa);
}

void gemv_group(const float* x, const GemvOutput* outputs, int num_outputs, int64_t num_rows, Isa isa) {
  DI_CHECK(num_outputs >= 1 && num_outputs <= kMaxGroupOutputs,
           "gemv_group takes 1 to " << kMaxGroupOutputs << " outputs, not " << num_outputs);
  int64_t total_bytes = 0;
  for (int i = 0; i < num_outputs; ++i) {
    DI_CHECK(outputs[i].w.cols == outputs[0].w.cols, "gemv_group weights must share their input width");
    const WeightView& w = outputs[i].w;
    DI_CHECK((w.dtype != DType::kF8E4M3 && w.dtype != DType::kMxfp4) || w.scales != nullptr,
             "a " << dtype_name(w.dtype) << " weight needs its block scales");
    DI_CHECK(w.dtype != DType::kMxfp4 || (w.cols % kMxfp4Block == 0 && w.scale_block_rows == 1 &&
                                          w.scale_block_cols == kMxfp4Block),
             "MXFP4 rows hold whole blocks of " << kMxfp4Block << " values, one scale each");
    DI_CHECK(w.dtype != DType::kF8E4M3 || (w.scale_block_rows > 0 && w.scale_block_cols > 0 &&
                                           w.scale_block_cols % kFp8BlockColsQuantum == 0),
             "FP8 scale blocks must be a multiple of " << kFp8BlockColsQuantum << " columns wide");
    total_bytes += weight_bytes(w);
  }
  const int64_t num_threads = total_bytes >= kParallelMinBytes ? omp_get_max_threads() : 1;
  const ChunkPlan plan = plan_chunks(outputs, num_outputs, total_bytes, num_threads);
  if (num_threads == 1 || plan.num_chunks == 1) {
    for (int64_t c = 0; c < plan.num_chunks; ++c) run_chunk(plan, x, num_rows, c, isa);
    return;
  }
  // Each thread owns a contiguous run of chunks and works through it front to back (its tiles then
  // stream on, each prefetching the next); a thread done with its own run takes chunks from the
  // others' runs, so one slowed by its SMT sibling or the host scheduler does not hold the step
  // up. Which thread computes a chunk never changes its bits.
  // Always the whole team, even when some runs are empty: with 8-thread attention regions between
  // 16-thread products, decode on 16 vCPUs fell from 67 to 28 tok/s (libgomp re-forms its team
  // whenever a region asks for another size).
  const int64_t team = num_threads;
  std::vector<ChunkRun> runs(static_cast<size_t>(team));
  for (int64_t t = 0; t < team; ++t) {
    runs[static_cast<size_t>(t)].next = plan.num_chunks * t / team;
    runs[static_cast<size_t>(t)].end = plan.num_chunks * (t + 1) / team;
  }
#pragma omp parallel num_threads(static_cast<int>(team))
  {
    // Threads the runtime did not start leave their runs to the others.
    const int64_t self = omp_get_thread_num();
    for (int64_t v = 0; v < team; ++v) {
      ChunkRun& run = runs[static_cast<size_t>((self + v) % team)];
      for (int64_t c = run.next.fetch_add(1, std::memory_order_relaxed); c < run.end;
           c = run.next.fetch_add(1, std::memory_order_relaxed)) {
        run_chunk(plan, x, num_rows, c, isa);
      }
    }
  }
}

}  // namespace deepinfer::kernels::cpu
