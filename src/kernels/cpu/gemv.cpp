// GEMV kernels for F32/BF16/F16 weights with fp32 accumulation: AVX-512, AVX2 and portable.
// A tile is kTileCols weight rows times up to kTileRows activation rows, all accumulated in
// registers while the weight rows stream through once.
#include "kernels/cpu/gemv.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/simd.h"

namespace deepinfer::kernels::cpu {
namespace {

constexpr int kTileCols = 4;  // weight rows streamed together: enough independent FMA chains
constexpr int kTileRows = 4;  // activation rows per pass; a 4-row weight tile stays in L1/L2 between passes
// Below this many weight bytes the OpenMP fork/join costs more than the work.
constexpr int64_t kParallelMinBytes = 256 * 1024;

struct TileArgs {
  const float* x;     // [rows, k_in], first activation row of the tile
  const char* w;      // first weight row of the tile
  int64_t row_bytes;  // bytes between weight rows
  int64_t k_in;
  float* y;       // y[0, 0] of the tile
  int64_t n_out;  // floats between y rows
};
using TileFn = void (*)(const TileArgs&);

// A tile's kCols weight rows are one contiguous block and the next tile follows it. Read as
// kCols interleaved streams the hardware prefetchers fall short of bandwidth (worst with short
// rows), so each step also pulls the next tile's bytes into L2 at the rate this tile consumes
// its own: `offset` is this tile's progress in bytes per row. Past the weight's end the
// prefetches are harmless (they never fault).
template <int kCols>
inline void prefetch_next_tile(const TileArgs& a, int64_t offset) {
  const char* next = a.w + kCols * a.row_bytes + offset * kCols;
  for (int l = 0; l < kCols; ++l) _mm_prefetch(next + 64 * l, _MM_HINT_T1);
}

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

DI_TARGET_AVX2 inline float reduce_add_avx2(__m256 v) {
  const __m128 quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
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
  constexpr int kLanes = 8;
  float acc[kRows][kCols][kLanes] = {};
  for (int64_t k0 = 0; k0 < a.k_in; k0 += kLanes) {
    const int lanes = static_cast<int>(std::min<int64_t>(kLanes, a.k_in - k0));
    float wv[kCols][kLanes] = {};
    for (int c = 0; c < kCols; ++c)
      for (int l = 0; l < lanes; ++l) wv[c][l] = load_w1<kDType>(a.w + c * a.row_bytes, k0 + l);
    for (int r = 0; r < kRows; ++r) {
      float xv[kLanes] = {};
      for (int l = 0; l < lanes; ++l) xv[l] = a.x[r * a.k_in + k0 + l];
      for (int c = 0; c < kCols; ++c)
        for (int l = 0; l < kLanes; ++l) acc[r][c][l] += wv[c][l] * xv[l];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) {
      const float* v = acc[r][c];
      a.y[r * a.n_out + c] = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
    }
  }
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

// kTiles[rows - 1][0]: one weight row; kTiles[rows - 1][1]: kTileCols weight rows.
template <DType kDType, template <DType, int, int> class Kernel>
struct TileTable {
  static constexpr TileFn kTiles[kTileRows][2] = {
      {&Kernel<kDType, 1, 1>::run, &Kernel<kDType, 1, kTileCols>::run},
      {&Kernel<kDType, 2, 1>::run, &Kernel<kDType, 2, kTileCols>::run},
      {&Kernel<kDType, 3, 1>::run, &Kernel<kDType, 3, kTileCols>::run},
      {&Kernel<kDType, 4, 1>::run, &Kernel<kDType, 4, kTileCols>::run},
  };
};

using TileSet = const TileFn (*)[2];

template <template <DType, int, int> class Kernel>
TileSet tiles_for(DType dtype) {
  switch (dtype) {
    case DType::kF32: return TileTable<DType::kF32, Kernel>::kTiles;
    case DType::kBF16: return TileTable<DType::kBF16, Kernel>::kTiles;
    case DType::kF16: return TileTable<DType::kF16, Kernel>::kTiles;
    default: DI_CHECK(false, "matmul weights must be F32, BF16 or F16, not " << dtype_name(dtype));
  }
}

TileSet pick_tiles(Isa isa, DType dtype) {
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
  const int64_t row_bytes = w.cols * static_cast<int64_t>(dtype_size_bytes(w.dtype));
  for (int64_t n = n_begin; n < n_end;) {
    const bool full = n + kTileCols <= n_end;
    for (int64_t m = 0; m < num_rows; m += kTileRows) {
      const int64_t rows = std::min<int64_t>(kTileRows, num_rows - m);
      const TileArgs args{x + m * w.cols,     static_cast<const char*>(w.data) + n * row_bytes,
                          row_bytes,          w.cols,
                          y + m * w.rows + n, w.rows};
      tiles[rows - 1][full ? 1 : 0](args);
    }
    n += full ? kTileCols : 1;
  }
}

}  // namespace

void gemv(const float* x, const WeightView& w, int64_t num_rows, float* y, Isa isa) {
  const TileSet tiles = pick_tiles(isa, w.dtype);
  const int64_t num_tiles = (w.rows + kTileCols - 1) / kTileCols;
  const int64_t weight_bytes = w.rows * w.cols * static_cast<int64_t>(dtype_size_bytes(w.dtype));
#pragma omp parallel if (weight_bytes >= kParallelMinBytes && num_tiles > 1)
  {
    // Contiguous, equal shares of whole tiles: each thread streams one slab of the weight.
    const int64_t num_threads = omp_get_num_threads();
    const int64_t thread = omp_get_thread_num();
    const int64_t n_begin = std::min(w.rows, num_tiles * thread / num_threads * kTileCols);
    const int64_t n_end = std::min(w.rows, num_tiles * (thread + 1) / num_threads * kTileCols);
    if (n_begin < n_end) gemv_range(tiles, x, w, num_rows, n_begin, n_end, y);
  }
}

}  // namespace deepinfer::kernels::cpu
