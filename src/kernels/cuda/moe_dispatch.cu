// Expert parallelism's fixed-size dispatch on the device (kernels/ops.h moe_dispatch): one block
// plans every slot, then a grid copies the token rows into the send buffer. The plan is the host's
// sequential order: a slot's replica turn counts the earlier slots of its expert, and its row counts
// the earlier slots bound for its rank. Each warp walks its own contiguous share of the slots,
// numbering equal keys within 32 slots by __match_any_sync and counting them per warp in shared
// memory; a scan over the warps then gives each warp's start, so the serial chain is a warp's
// share (two rounds of 32 for 256 tokens x top 8), not every slot.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe_ops.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kPlanWarps = 32;
constexpr unsigned kFull = 0xffffffffu;

// A key's number among the lanes of `active` holding the same key, plus counts[key] before this
// round; counts[key] then grows by the lanes holding it. Every lane of the warp calls it.
__device__ __forceinline__ int32_t number_in_round(bool valid, int32_t key, int32_t* counts) {
  const unsigned active = __ballot_sync(kFull, valid);
  int32_t number = 0;
  unsigned peers = 0;
  const unsigned lane_bit = 1u << (threadIdx.x % 32);
  if (valid) {
    peers = __match_any_sync(active, key);
    number = counts[key] + __popc(peers & (lane_bit - 1));
  }
  __syncwarp();
  // The highest lane of each key's peers adds them once every lane has read the count.
  if (valid && (peers >> (threadIdx.x % 32)) == 1u) counts[key] += __popc(peers);
  __syncwarp();
  return number;
}

// counts[w * n + k] becomes the sum of counts[v * n + k] over warps v < w; returns nothing, adds
// each key's total to totals (may be null).
__device__ void scan_over_warps(int32_t* counts, int32_t n, int64_t* totals) {
  for (int32_t k = static_cast<int32_t>(threadIdx.x); k < n; k += static_cast<int32_t>(blockDim.x)) {
    int32_t running = 0;
    for (int w = 0; w < kPlanWarps; ++w) {
      const int32_t count = counts[w * n + k];
      counts[w * n + k] = running;
      running += count;
    }
    if (totals != nullptr && running > 0) totals[k] += running;
  }
  __syncthreads();
}

struct SlotTarget {
  int32_t destination;
  int32_t local_slot;
};

__device__ __forceinline__ SlotTarget target_of(const ExpertDispatch& d, int32_t logical, int32_t occurrence) {
  const int32_t first = d.replica_offsets[logical];
  const int32_t copies = d.replica_offsets[logical + 1] - first;
  const int32_t physical = d.replica_slots[first + (d.rank + occurrence) % copies];
  return {physical / d.slots_per_rank, physical % d.slots_per_rank};
}

// scratch: [world * room] the token of each send row (-1: none), then two [num_slots] arrays: each
// slot's number among its expert's slots, and among its destination's.
__global__ void __launch_bounds__(kPlanWarps * 32)
    plan_dispatch_kernel(const int32_t* __restrict__ expert_ids, int32_t num_slots, int32_t top_k, ExpertDispatch d,
                         int32_t* __restrict__ scratch) {
  extern __shared__ int32_t counts_s[];  // [kPlanWarps][num_logical], then [kPlanWarps][world]
  int32_t* expert_counts = counts_s;
  int32_t* rank_counts = counts_s + kPlanWarps * d.num_logical;
  const int64_t num_rows = int64_t{d.world} * d.room;
  int32_t* send_token = scratch;
  int32_t* expert_number = scratch + num_rows;
  int32_t* rank_number = expert_number + num_slots;
  const int warp = static_cast<int>(threadIdx.x / 32);
  const auto threads = static_cast<int32_t>(blockDim.x);
  wait_for_previous_grid();
  for (int32_t i = static_cast<int32_t>(threadIdx.x); i < kPlanWarps * (d.num_logical + d.world); i += threads) {
    counts_s[i] = 0;
  }
  for (int64_t r = threadIdx.x; r < num_rows; r += threads) {
    d.send_slot[r] = -1;
    send_token[r] = -1;
  }
  __syncthreads();
  const int32_t share = (num_slots + kPlanWarps - 1) / kPlanWarps;
  const int32_t begin = min(num_slots, warp * share);
  const int32_t end = min(num_slots, begin + share);
  const auto lane = static_cast<int32_t>(threadIdx.x % 32);
  const auto logical_at = [&](int32_t s) {
    const int32_t id = s < end ? expert_ids[s] : -1;
    return id >= 0 && id < d.num_logical ? id : -1;
  };
  const auto target_at = [&](int32_t s, int32_t logical) {
    return target_of(d, logical, expert_counts[warp * d.num_logical + logical] + expert_number[s]);
  };

  // Each slot's number among its expert's slots: within the warp's share, then past earlier warps.
  for (int32_t base = begin; base < end; base += 32) {
    const int32_t s = base + lane;
    const int32_t logical = logical_at(s);
    const int32_t number = number_in_round(logical >= 0, logical, expert_counts + warp * d.num_logical);
    if (logical >= 0) expert_number[s] = number;
  }
  __syncthreads();
  scan_over_warps(expert_counts, d.num_logical, d.routed_tokens);

  // Each slot's row among its destination's rows, the same way.
  for (int32_t base = begin; base < end; base += 32) {
    const int32_t s = base + lane;
    const int32_t logical = logical_at(s);
    const int32_t destination = logical >= 0 ? target_at(s, logical).destination : 0;
    const int32_t number = number_in_round(logical >= 0, destination, rank_counts + warp * d.world);
    if (logical >= 0) rank_number[s] = number;
  }
  __syncthreads();
  scan_over_warps(rank_counts, d.world, nullptr);

  for (int32_t s = begin + lane; s < end; s += 32) {
    const int32_t logical = logical_at(s);
    int32_t row = -1;
    if (logical >= 0) {
      const SlotTarget target = target_at(s, logical);
      const int32_t taken = rank_counts[warp * d.world + target.destination] + rank_number[s];
      // Past the room only if the caller's room is short (the host checks it); the slot then adds nothing.
      if (taken < d.room) {
        row = static_cast<int32_t>(target.destination * d.room + taken);
        d.send_slot[row] = target.local_slot;
        send_token[row] = s / top_k;
      }
    }
    d.row_of_slot[s] = row;
  }
}

// Send row r: x's row of send_token[r], or zeros. A block per row, four floats a thread.
__global__ void gather_send_rows_kernel(const float* __restrict__ x, int64_t hidden,
                                        const int32_t* __restrict__ send_token, float* __restrict__ send_rows) {
  const int64_t row = blockIdx.x;
  wait_for_previous_grid();
  allow_next_grid();
  const int32_t token = send_token[row];
  float* dst = send_rows + row * hidden;
  if (hidden % 4 == 0) {
    const auto* src4 = reinterpret_cast<const float4*>(x + int64_t{token} * hidden);
    auto* dst4 = reinterpret_cast<float4*>(dst);
    for (int64_t i = threadIdx.x; i < hidden / 4; i += blockDim.x) dst4[i] = token >= 0 ? src4[i] : float4{};
  } else {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = token >= 0 ? x[token * hidden + i] : 0.0f;
  }
}

}  // namespace

void moe_dispatch(const float* x, int64_t num_tokens, int64_t hidden, const int32_t* expert_ids, int32_t top_k,
                  const ExpertDispatch& dispatch, float* send_rows, cudaStream_t stream) {
  const int64_t num_slots = num_tokens * top_k;
  const int64_t num_rows = int64_t{dispatch.world} * dispatch.room;
  DI_CHECK(dispatch.scratch != nullptr, "moe_dispatch needs its scratch ints on the device");
  DI_CHECK(num_slots <= INT32_MAX && num_rows <= INT32_MAX, "moe_dispatch: too many rows");
  const size_t shared = sizeof(int32_t) * kPlanWarps * static_cast<size_t>(dispatch.num_logical + dispatch.world);
  DI_CHECK(shared <= 227 * 1024, "moe_dispatch: " << dispatch.num_logical << " experts and " << dispatch.world
                                                  << " ranks need more shared memory than a block has");
  static size_t shared_allowed = 48 * 1024;
  if (shared > shared_allowed) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(plan_dispatch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shared)));
    shared_allowed = shared;
  }
  launch_dependent(plan_dispatch_kernel, dim3(1), dim3(kPlanWarps * 32), shared, stream, expert_ids,
                   static_cast<int32_t>(num_slots), top_k, dispatch, dispatch.scratch);
  DI_CUDA_CHECK_LAUNCH("plan_dispatch_kernel");
  if (num_rows == 0) return;
  const bool vectors =
      hidden % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(send_rows) % 16 == 0;
  DI_CHECK(vectors || hidden % 4 != 0, "moe_dispatch reads rows of a multiple of 4 floats from 16-byte aligned memory");
  const int threads = static_cast<int>(std::clamp<int64_t>((hidden / 4 + 31) / 32 * 32, 32, 256));
  launch_dependent(gather_send_rows_kernel, dim3(static_cast<unsigned>(num_rows)), dim3(threads), 0, stream, x, hidden,
                   static_cast<const int32_t*>(dispatch.scratch), send_rows);
  DI_CUDA_CHECK_LAUNCH("gather_send_rows_kernel");
}

}  // namespace deepinfer::kernels::cuda
