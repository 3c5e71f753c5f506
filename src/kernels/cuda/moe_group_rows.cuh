// Grouping routed rows by expert inside one block, as a device function: the one-block grouping
// kernel (moe.cu) and the router's last block (moe_route.cu) both run it.
#pragma once

#include <cstdint>

#include "kernels/cuda/moe_ops.h"

namespace deepinfer::kernels::cuda {

// Inclusive scan of (x, y) over the block (up to 1024 threads, a multiple of 32); every thread
// gets its own prefix. warp_totals: 32 entries of shared memory.
__device__ inline int2 block_inclusive_scan(int2 value, int2* warp_totals) {
  constexpr unsigned kFull = 0xffffffffu;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int num_warps = static_cast<int>(blockDim.x / 32);
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int x = __shfl_up_sync(kFull, value.x, offset);
    const int y = __shfl_up_sync(kFull, value.y, offset);
    if (lane >= offset) {
      value.x += x;
      value.y += y;
    }
  }
  if (lane == 31) warp_totals[warp] = value;
  __syncthreads();
  if (warp == 0) {
    int2 total = lane < num_warps ? warp_totals[lane] : make_int2(0, 0);
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int x = __shfl_up_sync(kFull, total.x, offset);
      const int y = __shfl_up_sync(kFull, total.y, offset);
      if (lane >= offset) {
        total.x += x;
        total.y += y;
      }
    }
    warp_totals[lane] = total;
  }
  __syncthreads();
  if (warp > 0) {
    value.x += warp_totals[warp - 1].x;
    value.y += warp_totals[warp - 1].y;
  }
  return value;
}

// Fills grouping from expert_ids [num_rows] (group_by_expert's contract) with the whole block, one
// expert per thread: blockDim.x >= num_experts. counts_s, cursor_s: blockDim.x ints of shared
// memory. The ids are read from L2 (__ldcg): the router's last block reads ids other blocks wrote.
__device__ inline void group_rows_in_block(const int32_t* expert_ids, int32_t num_rows, int32_t num_experts,
                                           int32_t rows_per_tile, const MoeGrouping& grouping,
                                           int64_t* expert_token_counts, int32_t* counts_s, int32_t* cursor_s) {
  __shared__ int2 warp_totals[32];
  const auto e = static_cast<int32_t>(threadIdx.x);
  const auto threads = static_cast<int32_t>(blockDim.x);
  counts_s[e] = 0;
  __syncthreads();
  for (int32_t r = e; r < num_rows; r += threads) {
    const int32_t id = __ldcg(expert_ids + r);
    if (id >= 0 && id < num_experts) atomicAdd(&counts_s[id], 1);
  }
  __syncthreads();
  const int32_t count = e < num_experts ? counts_s[e] : 0;
  const int32_t tiles = (count + rows_per_tile - 1) / rows_per_tile;
  const int2 prefix = block_inclusive_scan(make_int2(count, tiles), warp_totals);
  if (e < num_experts) {
    grouping.counts[e] = count;
    grouping.offsets[e + 1] = prefix.x;
    grouping.tile_offsets[e + 1] = prefix.y;
    for (int32_t t = prefix.y - tiles; t < prefix.y; ++t) grouping.tile_experts[t] = e;
    cursor_s[e] = prefix.x - count;
    if (expert_token_counts != nullptr) expert_token_counts[e] += count;
  }
  if (e == 0) {
    grouping.offsets[0] = 0;
    grouping.tile_offsets[0] = 0;
  }
  __syncthreads();
  for (int32_t r = e; r < num_rows; r += threads) {
    const int32_t id = __ldcg(expert_ids + r);
    int32_t position = -1;
    if (id >= 0 && id < num_experts) {
      position = atomicAdd(&cursor_s[id], 1);
      grouping.rows[position] = r;
    }
    grouping.position[r] = position;
  }
}

}  // namespace deepinfer::kernels::cuda
