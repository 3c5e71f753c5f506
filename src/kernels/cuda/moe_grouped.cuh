// Device pieces shared by the grouped expert kernels (moe_rowwise.cu, moe_mma.cu, moe_mma_stream.cu,
// moe_mxfp4.cu, moe_fp8.cu): finding a block's tile from the device-side offsets, the expert activation, the
// streamed tiles' outputs (element conversions: device_util.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe_ops.h"

namespace deepinfer::kernels::cuda {

// A block's share of the grouped rows: rows [row_begin, row_begin + num_rows) of one expert.
struct ExpertTile {
  int32_t expert = 0;
  int32_t row_begin = 0;
  int32_t num_rows = 0;
};

// The grid covers the worst case; false for a tile past the last one (the block has no work). The
// tile's expert is read beside the tile count (tile < the grid's worst case, so in bounds) and
// used only once the count says it is current. Read from L2 (__ldcg): the down kernel reads the
// grouping before its dependent-launch wait, where this SM's L1 may hold an earlier layer's.
__device__ __forceinline__ bool find_tile(const MoeGrouping& grouping, int32_t num_experts, int32_t tile,
                                          int32_t rows_per_tile, ExpertTile& out) {
  const int32_t num_tiles = __ldcg(grouping.tile_offsets + num_experts);
  const int32_t expert = __ldcg(grouping.tile_experts + tile);
  if (tile >= num_tiles) return false;
  out.expert = expert;
  const int32_t offset = __ldcg(grouping.offsets + expert);
  out.row_begin = offset + (tile - __ldcg(grouping.tile_offsets + expert)) * rows_per_tile;
  out.num_rows = min(rows_per_tile, __ldcg(grouping.offsets + expert + 1) - out.row_begin);
  return true;
}

// ref::moe_experts' activation of one (gate, up) pair, biases already added.
__device__ __forceinline__ float expert_activation(float g, float u, ExpertActivation activation, float alpha,
                                                   float limit) {
  if (activation == ExpertActivation::kSiluGated) return g / (1.0f + expf(-g)) * u;
  g = fminf(g, limit);
  u = fminf(fmaxf(u, -limit), limit);
  return (u + 1.0f) * g / (1.0f + expf(-alpha * g));
}

// Output columns a warp of a streamed tile covers: gate|up 8 (its rows g and g + 8 are a column's
// gate and up rows), down 16 (rows g and g + 8 are two columns).
template <bool kGateUp>
__host__ __device__ constexpr int streamed_warp_columns() {
  return kGateUp ? 8 : 16;
}

// A lane of a streamed tile's warp (moe_mma_stream.cu, moe_mxfp4.cu), block of kWarps warps: g =
// lane / 4 is its weight row (and row + 8) and its token in each n-tile, t = lane % 4 its share of
// each k span and its accumulators' tokens 2t, 2t + 1; col_lo and col_hi the output columns of its
// two rows (the same column for gate|up). Columns past n_out read the last row and are not stored.
struct StreamedLane {
  int g;
  int t;
  int64_t col_lo;
  int64_t col_hi;
};
template <bool kGateUp, int kWarps>
__device__ __forceinline__ StreamedLane streamed_lane(int warp = static_cast<int>(threadIdx.x / 32)) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4;
  const int64_t col_lo = (int64_t{blockIdx.y} * kWarps + warp) * streamed_warp_columns<kGateUp>() + g;
  return {g, lane % 4, col_lo, kGateUp ? col_lo : col_lo + 8};
}

// The input rows of a streamed tile's n-tiles for lane group g: row 8j + g of the tile (its last
// row again past its end), the token's row of x for gate|up, the grouped row of h for down.
template <int kNTiles, bool kGateUp>
__device__ __forceinline__ void streamed_input_rows(const float* in, const GroupedExperts& experts,
                                                    const MoeGrouping& grouping, const ExpertTile& tile, int g,
                                                    int64_t k_in, const float* (&rows)[kNTiles]) {
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    const int32_t i = tile.row_begin + min(8 * j + g, tile.num_rows - 1);
    rows[j] = kGateUp ? in + int64_t{grouping.rows[i] / experts.top_k} * k_in : in + int64_t{i} * k_in;
  }
}

// The streamed tensor-core tiles' outputs (moe_mma_stream.cu, moe_mxfp4.cu): acc[j] of lane (g, t)
// holds [0], [1] weight row g at the tile's rows 8j + 2t, + 1 and [2], [3] row g + 8 at the same
// rows; gate|up: rows g and g + 8 are column col_lo's gate and up rows, down: columns col_lo and
// col_hi. lo_factor and hi_factor scale the two weight rows' sums (MXFP4's per-row exponents).
template <int kNTiles, bool kGateUp>
__device__ __forceinline__ void store_streamed_tile(const float (&acc)[kNTiles][4], const ExpertTile& tile,
                                                    const ExpertPointers& p, const GroupedExperts& experts,
                                                    int64_t n_out, int64_t col_lo, int64_t col_hi, int t,
                                                    float lo_factor, float hi_factor, float* out) {
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int r = 8 * j + 2 * t + s;
      if (r >= tile.num_rows) continue;
      float* dst = out + int64_t{tile.row_begin + r} * n_out;
      if constexpr (kGateUp) {
        if (col_lo >= n_out) continue;
        float gate = acc[j][s] * lo_factor;
        float up = acc[j][2 + s] * hi_factor;
        if (p.gate_bias != nullptr) gate += load_as_f32(p.gate_bias, experts.bias_dtype, col_lo);
        if (p.up_bias != nullptr) up += load_as_f32(p.up_bias, experts.bias_dtype, col_lo);
        dst[col_lo] = expert_activation(gate, up, experts.activation, experts.swiglu_alpha, experts.swiglu_limit);
      } else {
        const int64_t cols[2] = {col_lo, col_hi};
        const float factors[2] = {lo_factor, hi_factor};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (cols[h] >= n_out) continue;
          const float bias = p.down_bias != nullptr ? load_as_f32(p.down_bias, experts.bias_dtype, cols[h]) : 0.0f;
          dst[cols[h]] = acc[j][2 * h + s] * factors[h] + bias;
        }
      }
    }
  }
}

// launch.template operator()<W, kGateUp>() with W the element type of 16-bit dtype (kBF16: bf16,
// otherwise f16) and kGateUp = gate_up: the tensor-core launches' instantiations.
template <typename Launch>
void with_16bit_weights(DType dtype, bool gate_up, Launch&& launch) {
  if (dtype == DType::kBF16) {
    gate_up ? launch.template operator()<__nv_bfloat16, true>() : launch.template operator()<__nv_bfloat16, false>();
  } else {
    gate_up ? launch.template operator()<__half, true>() : launch.template operator()<__half, false>();
  }
}

// Tensor-core launches (moe_mma.cu). gate_up: out = h [num_rows, intermediate] from x; otherwise
// out = y [num_rows, hidden] from h. Requires bf16 or f16 weights.
void mma_grouped(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                 bool gate_up, float* out, cudaStream_t stream);
// The streamed tensor-core launches (moe_mma_stream.cu; MXFP4 experts: moe_mxfp4.cu; FP8: moe_fp8.cu), same
// contract; moe_stream_fits(experts) and a 16-byte aligned input.
void stream_mma_grouped(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                        bool gate_up, float* out, cudaStream_t stream);
void stream_mxfp4_grouped(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                          bool gate_up, float* out, cudaStream_t stream);
// FP8 experts (moe_fp8.cu): hidden and intermediate multiples of 128, 128-column scale blocks.
void stream_fp8_grouped(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                        bool gate_up, float* out, cudaStream_t stream);
int32_t moe_stream_rows_per_tile();

}  // namespace deepinfer::kernels::cuda
