// Pieces shared by the two tensor-core expert kernels (moe_mma.cu: register staging, any shape;
// moe_mma_async.cu: cp.async pipeline for 16-element-aligned rows): the tile shape, one k-step of
// WMMA products from shared memory, and the epilogue (biases, activation, store).
#pragma once

#include <mma.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe_grouped.cuh"

namespace deepinfer::kernels::cuda::mma_tile {

namespace wmma = nvcuda::wmma;

constexpr int kBM = 64;
constexpr int kBN = 64;
constexpr int kBK = 32;
constexpr int kThreads = 128;   // 2 x 2 warps, each 32 x 32 of the tile
constexpr int kPadK = kBK + 8;  // row stride of the staged bf16/f16 tiles, in elements
constexpr int kPadN = kBN + 4;

template <int kMats>
struct Results {
  float c[kMats][kBM][kPadN];
};

template <int kMats>
using Accumulators = wmma::fragment<wmma::accumulator, 16, 16, 16, float>[kMats][2][2];

template <int kMats>
__device__ __forceinline__ void zero(Accumulators<kMats>& acc) {
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[m][i][j], 0.0f);
    }
  }
}

// Where this thread stages from: half a row (16 elements) of the tile's A rows (its expert's
// tokens) and of each B tile (the expert's weight rows). Invalid rows keep a valid address (the
// base pointers), which the async copies need, and are read as zeros.
template <typename W, int kMats>
struct StageSources {
  int row = 0;
  int k = 0;
  bool a_valid = false;
  bool b_valid = false;
  const float* a = nullptr;
  const W* b[kMats] = {};
};

template <typename W, int kMats, bool kGateUp>
__device__ __forceinline__ StageSources<W, kMats> stage_sources(const float* in, const GroupedExperts& experts,
                                                                const MoeGrouping& grouping, const ExpertTile& tile,
                                                                int64_t col0, int64_t n_out, int64_t k_in) {
  const ExpertPointers& p = experts.experts[tile.expert];
  const W* weights[kMats];
  weights[0] = static_cast<const W*>(kGateUp ? p.gate : p.down);
  if constexpr (kGateUp) weights[kMats - 1] = static_cast<const W*>(p.up);
  StageSources<W, kMats> s;
  s.row = static_cast<int>(threadIdx.x / 2);
  s.k = static_cast<int>(threadIdx.x % 2) * 16;
  s.a_valid = s.row < tile.num_rows;
  s.a = in;
  if (s.a_valid) {
    const int32_t i = tile.row_begin + s.row;
    s.a = kGateUp ? in + int64_t{grouping.rows[i] / experts.top_k} * k_in : in + int64_t{i} * k_in;
  }
  s.b_valid = col0 + s.row < n_out;
#pragma unroll
  for (int m = 0; m < kMats; ++m) s.b[m] = s.b_valid ? weights[m] + (col0 + s.row) * k_in : weights[m];
  return s;
}

// acc[m] += a[kBM, kBK] @ b[m][kBN, kBK]^T for this warp's 32 x 32 quarter. a, b: row stride kPadK.
template <typename W, int kMats>
__device__ __forceinline__ void multiply_step(const W (*a)[kPadK], const W (*b)[kBN][kPadK], Accumulators<kMats>& acc) {
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warp_m = (warp / 2) * 32;
  const int warp_n = (warp % 2) * 32;
#pragma unroll
  for (int kk = 0; kk < kBK; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> fa[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], &a[warp_m + 16 * i][kk], kPadK);
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        // B[k][n] = W[n][k]: the weight rows are B's columns.
        wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::col_major> fb;
        wmma::load_matrix_sync(fb, &b[m][warp_n + 16 * j][kk], kPadK);
#pragma unroll
        for (int i = 0; i < 2; ++i) wmma::mma_sync(acc[m][i][j], fa[i], fb, acc[m][i][j]);
      }
    }
  }
}

// Writes the tile: gate+up -> activation into out [rows, n_out]; down -> + bias. results may
// alias the staging buffers: the caller has synchronised after the last product.
template <bool kGateUp, int kMats>
__device__ __forceinline__ void store_tile(Accumulators<kMats>& acc, Results<kMats>& results, const ExpertTile& tile,
                                           int64_t col0, int64_t n_out, const ExpertPointers& p,
                                           const GroupedExperts& experts, float* out) {
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warp_m = (warp / 2) * 32;
  const int warp_n = (warp % 2) * 32;
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::store_matrix_sync(&results.c[m][warp_m + 16 * i][warp_n + 16 * j], acc[m][i][j], kPadN,
                                wmma::mem_row_major);
      }
    }
  }
  __syncthreads();
  for (int idx = static_cast<int>(threadIdx.x); idx < kBM * kBN; idx += kThreads) {
    const int r = idx / kBN;
    const int c = idx % kBN;
    const int64_t col = col0 + c;
    if (r >= tile.num_rows || col >= n_out) continue;
    float* dst = out + int64_t{tile.row_begin + r} * n_out + col;
    if constexpr (kGateUp) {
      float g = results.c[0][r][c];
      float u = results.c[kMats - 1][r][c];
      if (p.gate_bias != nullptr) g += load_as_f32(p.gate_bias, experts.bias_dtype, col);
      if (p.up_bias != nullptr) u += load_as_f32(p.up_bias, experts.bias_dtype, col);
      *dst = expert_activation(g, u, experts.activation, experts.swiglu_alpha, experts.swiglu_limit);
    } else {
      *dst = results.c[0][r][c] + (p.down_bias != nullptr ? load_as_f32(p.down_bias, experts.bias_dtype, col) : 0.0f);
    }
  }
}

// The pipelined kernel's launch (moe_mma_async.cu). Requires k_in % 16 == 0 and 16-byte aligned
// inputs and weights.
template <typename W, bool kGateUp>
void launch_async(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                  float* out, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda::mma_tile
