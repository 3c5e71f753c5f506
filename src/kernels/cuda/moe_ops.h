// CUDA mixture of experts, entirely on the device: the router (moe_route.cu), grouping routed
// (token, slot) rows by expert (moe.cu), the grouped expert products for all experts in one launch
// per projection (moe_rowwise.cu: CUDA cores, bandwidth-bound; moe_mma.cu, moe_mma_async.cu: tensor
// cores), and the weighted combine. Device pointers; everything is enqueued on stream, nothing reads back.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

// Router limits: a block scores a token, a thread per expert.
constexpr int32_t kMoeMaxExperts = 256;
constexpr int32_t kMoeMaxTopK = 32;

// moe_route's contract on the device. Requires num_experts <= kMoeMaxExperts, top_k <= kMoeMaxTopK.
void moe_route(const float* logits, const WeightView& selection_bias, int64_t num_tokens, const MoeRouting& routing,
               int32_t* expert_ids, float* expert_weights, cudaStream_t stream);

// Where the routed rows (row r = token * top_k + slot) sit once grouped by expert. Row order inside
// an expert's run follows atomics and varies between runs; every kernel computes each row on its
// own, so results do not depend on it.
struct MoeGrouping {
  int32_t* counts = nullptr;        // [num_experts] rows routed to each expert
  int32_t* offsets = nullptr;       // [num_experts + 1] where each expert's run starts
  int32_t* tile_offsets = nullptr;  // [num_experts + 1] first tile of each expert (tiles of rows_per_tile rows)
  int32_t* cursor = nullptr;        // [num_experts] scratch
  int32_t* rows = nullptr;          // [num_rows] grouped row i -> routed row r
  int32_t* position = nullptr;      // [num_rows] routed row r -> grouped row i (-1: expert id out of range)
  // [num_rows + num_experts] the expert owning each tile (entries past the last tile are stale): a
  // block finds its tile in two rounds of loads instead of a binary search over tile_offsets.
  int32_t* tile_experts = nullptr;
};

// Ints a MoeGrouping needs; carve lays them out in ints (device memory of that many int32).
int64_t moe_grouping_ints(int32_t num_experts, int64_t num_rows);
MoeGrouping carve_moe_grouping(int32_t* ints, int32_t num_experts, int64_t num_rows);

// Fills grouping from expert_ids [num_rows] and adds each expert's row count to
// expert_token_counts [num_experts] int64 (may be null). One launch up to 8192 rows, four above;
// no host synchronisation. Takes up to 1024 experts.
void group_by_expert(const int32_t* expert_ids, int64_t num_rows, int32_t num_experts, int32_t rows_per_tile,
                     const MoeGrouping& grouping, int64_t* expert_token_counts, cudaStream_t stream);

// The most routed rows (num_tokens * top_k) moe_route_and_group takes for num_experts experts: its
// last block groups them all, a few rows per thread.
int64_t moe_route_group_max_rows(int32_t num_experts);
// moe_route, then group_by_expert of its ids in the same launch (its last block to finish groups
// every row): one launch boundary less. blocks_done: one device int32, zero, that no launch in
// flight beside this one uses; the launch leaves it zero.
void moe_route_and_group(const float* logits, const WeightView& selection_bias, int64_t num_tokens,
                         const MoeRouting& routing, int32_t* expert_ids, float* expert_weights, int32_t rows_per_tile,
                         const MoeGrouping& grouping, int64_t* expert_token_counts, int32_t* blocks_done,
                         cudaStream_t stream);

// One expert's device weights; biases null when the experts have none.
struct ExpertPointers {
  const void* gate = nullptr;       // [intermediate, hidden]
  const void* up = nullptr;         // [intermediate, hidden]
  const void* down = nullptr;       // [hidden, intermediate]
  const void* gate_bias = nullptr;  // [intermediate]
  const void* up_bias = nullptr;    // [intermediate]
  const void* down_bias = nullptr;  // [hidden]
  // Packed weights' scales: MXFP4's e8m0 bytes in the device layout (mxfp4_device_scale_bytes), FP8's
  // float32 block scales as the checkpoint's (kernels::WeightView); null otherwise.
  const void* gate_scales = nullptr;
  const void* up_scales = nullptr;
  const void* down_scales = nullptr;
};

// An MXFP4 matrix [rows, cols] on the device: the e2m1 codes as in the checkpoint (kernels/ops.h
// WeightView), and one scales buffer holding the e8m0 scales [rows, cols / kMxfp4Block] followed by
// each row's largest scale [rows] (at mxfp4_row_max_offset): the kernels multiply 16-bit values by
// 2^(scale - row's largest), never above 1, and the row's sums by 2^(row's largest - 127), so no
// scale overflows a half. Bytes of that buffer:
__host__ __device__ inline int64_t mxfp4_device_scale_bytes(int64_t rows, int64_t cols) {
  return rows * (cols / kMxfp4Block) + rows;
}
__host__ __device__ inline int64_t mxfp4_row_max_offset(int64_t rows, int64_t cols) {
  return rows * (cols / kMxfp4Block);
}
// Fills the row maxima of such a buffer on the host (its first mxfp4_row_max_offset bytes the scales).
void fill_mxfp4_row_max(uint8_t* scales, int64_t rows, int64_t cols);

// out [rows, cols] bf16 = an MXFP4 matrix in the device layout, each value e2m1 * 2^(scale - 127)
// (exact where bf16 holds it): the grouped GEMMs' weights for MXFP4 experts (moe_mxfp4.cu).
void dequantize_mxfp4_bf16(const void* codes, const uint8_t* scales, int64_t rows, int64_t cols, void* out,
                           cudaStream_t stream);

// All experts of a layer as the grouped kernels see them. Every expert shares weight_dtype (kF32,
// kBF16, kF16, or kMxfp4 / kF8E4M3 with the scales in ExpertPointers); every bias present has
// bias_dtype.
struct GroupedExperts {
  const ExpertPointers* experts = nullptr;  // [num_experts] device
  int32_t num_experts = 0;
  int32_t top_k = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  DType weight_dtype = DType::kBF16;
  DType bias_dtype = DType::kF32;
  bool aligned = false;  // every weight 16-byte aligned (vector loads when the row length allows)
  int32_t scale_block_rows = 0;  // kF8E4M3: rows per scale block (of 128 columns), every expert's
  ExpertActivation activation = ExpertActivation::kSiluGated;
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;
};

// kRowwise: CUDA cores, each block streams a slice of one expert's weights once for up to 4 rows;
// every weight dtype; memory-bound, for a row or two per expert. kTensorCore: 64-row tiles on
// bf16/f16 tensor cores (x rounded to the weight dtype, float32 accumulation; a cp.async pipeline
// when rows are 16-element aligned), from 20 rows per expert up to prefill (from 4 without
// kTensorCoreStream's fit; at every size in batch-invariant mode). kTensorCoreStream: 32-row tiles
// on the tensor cores with the weights loaded straight into the MMAs' registers (moe_stream_fits:
// aligned bf16/f16 rows of a multiple of 8 elements; a 16-byte aligned input), memory-bound, for
// decode batches of 4 to 20 rows per expert; MXFP4 and FP8 experts take it at every size short of
// the grouped GEMMs (the codes decoded to f16 in registers, x rounded to f16, float32 accumulation;
// FP8's block scales promote each 128-column span's sums).
enum class MoeKernel : uint8_t { kRowwise, kTensorCore, kTensorCoreStream };

bool moe_stream_fits(const GroupedExperts& experts);

int32_t moe_rows_per_tile(MoeKernel kernel);
// Tiles the grid must cover for num_rows routed rows in the worst case.
int64_t moe_max_tiles(MoeKernel kernel, int64_t num_rows, int32_t num_experts);

// h[i, :] = act(gate_e(x[t]) + gate_bias_e, up_e(x[t]) + up_bias_e) for grouped row i of expert e,
// routed row r = rows[i], token t = r / top_k. x: [num_tokens, hidden]; h: [num_rows, intermediate].
void grouped_gate_up(const float* x, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                     MoeKernel kernel, float* h, cudaStream_t stream);
// y[i, :] = down_e(h[i]) + down_bias_e. h: [num_rows, intermediate]; y: [num_rows, hidden].
void grouped_down(const float* h, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                  MoeKernel kernel, float* y, cudaStream_t stream);
// out[position[t * top_k + j], :] = x[t, :] rounded to dtype (kBF16 or kF16) for every token t
// and slot j (position -1: none): the input of the grouped-GEMM expert products
// (moe_grouped_gemm.h), in the grouping's order. hidden a multiple of 4, x 16-byte and out 8-byte
// aligned.
void gather_grouped_rows(const float* x, const int32_t* position, int64_t num_tokens, int32_t top_k, int64_t hidden,
                         DType dtype, void* out, cudaStream_t stream);
// out[t, :] = sum over slots j in order of expert_weights[t, j] * y[position[t * top_k + j], :]
// (y[t * top_k + j] when position is null).
// y: [num_rows, hidden] of y_dtype (kF32, or the weights' 16-bit dtype after the grouped GEMMs).
void moe_combine(const void* y, DType y_dtype, const int32_t* position, const float* expert_weights,
                 int64_t num_tokens, int32_t top_k, int64_t hidden, float* out, cudaStream_t stream);

// dst[r * dst_stride + i] = src[r * src_stride + i] for r < num_rows, i < width.
void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst, int64_t dst_stride,
               cudaStream_t stream);

// kernels/ops.h moe_dispatch on the device (moe_dispatch.cu); dispatch.scratch holds
// moe_dispatch_scratch_ints device ints.
void moe_dispatch(const float* x, int64_t num_tokens, int64_t hidden, const int32_t* expert_ids, int32_t top_k,
                  const ExpertDispatch& dispatch, float* send_rows, cudaStream_t stream);

// kernels/ops.h pack_rows / unpack_rows on the device, the same bytes and floats (moe_payload.cu).
void pack_rows(const float* x, int64_t num_rows, int64_t width, DType dtype, void* out, cudaStream_t stream);
void unpack_rows(const void* packed, int64_t num_rows, int64_t width, DType dtype, float* out, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
