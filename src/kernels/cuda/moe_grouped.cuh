// Device pieces shared by the grouped expert kernels (moe_rowwise.cu, moe_mma.cu, moe_mma_stream.cu): finding a
// block's tile from the device-side offsets, the expert activation (element conversions:
// device_util.cuh).
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
// The streamed tensor-core launches (moe_mma_stream.cu), same contract; moe_stream_fits(experts)
// and a 16-byte aligned input.
void stream_mma_grouped(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                        bool gate_up, float* out, cudaStream_t stream);
int32_t moe_stream_rows_per_tile();

}  // namespace deepinfer::kernels::cuda
