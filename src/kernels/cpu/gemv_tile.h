// The GEMV's register tile (gemv.cpp): its shape, arguments and prefetch, shared by the tiles of
// plain weights (gemv.cpp) and of block-quantised ones (gemv_packed.cpp). Private to src/kernels/cpu.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {

inline constexpr int kTileCols = 4;  // weight rows streamed together: enough independent FMA chains
inline constexpr int kTileRows = 4;  // activation rows per pass; a 4-row weight tile stays in L1/L2 between passes

struct TileArgs {
  const float* x;     // [rows, k_in], first activation row of the tile
  const char* w;      // first weight row of the tile
  int64_t row_bytes;  // bytes between weight rows
  int64_t k_in;
  float* y;       // y[0, 0] of the tile
  int64_t n_out;  // floats between y rows
  // Block-quantised weights (WeightView::scales): the weight's scales, the tile's first weight
  // row, scales per row of the scale matrix, and the weight rows and columns one scale covers.
  const void* scales = nullptr;
  int64_t first_row = 0;
  int64_t scale_cols = 0;
  int64_t block_rows = 0;
  int64_t block_cols = 0;
};
using TileFn = void (*)(const TileArgs&);
// tiles[rows - 1][0]: one weight row; tiles[rows - 1][1]: kTileCols weight rows.
using TileSet = const TileFn (*)[2];

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

DI_TARGET_AVX2 inline float reduce_add_avx2(__m256 v) {
  const __m128 quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
}

// The portable tile: 8 lanes in arrays, weight row c's element k read as float32 by load_w(c, k).
template <int kRows, int kCols, class LoadW>
inline void tile_portable_with(const TileArgs& a, LoadW load_w) {
  constexpr int kLanes = 8;
  float acc[kRows][kCols][kLanes] = {};
  for (int64_t k0 = 0; k0 < a.k_in; k0 += kLanes) {
    const int lanes = static_cast<int>(std::min<int64_t>(kLanes, a.k_in - k0));
    float wv[kCols][kLanes] = {};
    for (int c = 0; c < kCols; ++c)
      for (int l = 0; l < lanes; ++l) wv[c][l] = load_w(c, k0 + l);
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

// A TileSet of Kernel<kDType, rows, cols>::run: kTiles[rows - 1][0] one weight row,
// kTiles[rows - 1][1] kTileCols weight rows.
template <DType kDType, template <DType, int, int> class Kernel>
struct TileTable {
  static constexpr TileFn kTiles[kTileRows][2] = {
      {&Kernel<kDType, 1, 1>::run, &Kernel<kDType, 1, kTileCols>::run},
      {&Kernel<kDType, 2, 1>::run, &Kernel<kDType, 2, kTileCols>::run},
      {&Kernel<kDType, 3, 1>::run, &Kernel<kDType, 3, kTileCols>::run},
      {&Kernel<kDType, 4, 1>::run, &Kernel<kDType, 4, kTileCols>::run},
  };
};

// Bytes of one weight row as stored (MXFP4: two values a byte; FP8: one; its scales apart).
inline int64_t weight_row_bytes(const WeightView& w) {
  return w.dtype == DType::kMxfp4 ? w.cols / 2 : w.cols * static_cast<int64_t>(dtype_size_bytes(w.dtype));
}

// The tiles of a block-quantised dtype (kF8E4M3, kMxfp4) for isa (gemv_packed.cpp). Each weight
// value is dequantised to the float32 value dequantize_weight_row gives and multiplied in the order
// the F32 tiles use, so y's bits equal those of the F32 GEMV over the dequantised weight.
TileSet packed_tiles(Isa isa, DType dtype);

}  // namespace deepinfer::kernels::cpu
