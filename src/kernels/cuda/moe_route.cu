// The mixture-of-experts router on the device: a block per token, a thread per expert. Scores are
// float64 (as kernels/ref computes them, so the chosen ids match it bit for bit); the best groups
// are kept; then every expert counts the experts ranked before it (higher choice first, ties to the
// lower id), and the top_k are those ranked below top_k, in rank order. A warp per token picking
// the top_k by top_k rounds of warp argmax took 6.4 us of a batch-1 layer (docs/benchmarks.md),
// the rounds a serial chain of shuffles. With a grouping to fill, the last block to finish groups
// every routed row by expert (moe_group_rows.cuh), in place of group_by_expert's launch. A
// dependent launch: it is resident while the router's product finishes.
#include <algorithm>
#include <climits>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe_group_rows.cuh"
#include "kernels/cuda/moe_ops.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kMaxWarps = kMoeMaxExperts / 32;
// Threads of a router block at least: its last block groups the rows with them.
constexpr int kMinThreads = 128;
constexpr unsigned kFull = 0xffffffffu;

int route_threads(int32_t num_experts) { return std::max(kMinThreads, (num_experts + 31) / 32 * 32); }

// Is (value, index) ranked before (other, other_index)? Higher value first, then lower index.
__device__ __forceinline__ bool ranks_before(double value, int32_t index, double other, int32_t other_index) {
  return value > other || (value == other && index < other_index);
}

__device__ __forceinline__ double warp_sum_f64(double value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(kFull, value, offset);
  return value;
}

// The rows' grouping done by the launch's last block; rows_per_tile == 0: none.
struct FusedGrouping {
  MoeGrouping grouping;
  int32_t rows_per_tile = 0;
  int64_t* expert_token_counts = nullptr;
  int32_t* blocks_done = nullptr;  // zero between launches
};

__global__ void __launch_bounds__(kMoeMaxExperts)
    route_kernel(const float* __restrict__ logits, const void* bias, DType bias_dtype, int32_t num_tokens,
                 MoeRouting routing, int32_t* __restrict__ expert_ids, float* __restrict__ expert_weights,
                 FusedGrouping fused) {
  __shared__ double choice_s[kMoeMaxExperts];
  __shared__ double group_s[kMoeMaxExperts];
  __shared__ bool kept_s[kMoeMaxExperts];
  __shared__ float max_s[kMaxWarps];
  __shared__ double sum_s[kMaxWarps];
  __shared__ int32_t slot_id_s[kMoeMaxTopK];
  __shared__ double slot_score_s[kMoeMaxTopK];
  const auto e = static_cast<int32_t>(threadIdx.x);
  const int warp = e / 32;
  const int lane = e % 32;
  const int num_warps = static_cast<int>(blockDim.x / 32);
  const int64_t token = blockIdx.x;
  const int32_t num_experts = routing.num_experts;
  const bool expert = e < num_experts;
  wait_for_previous_grid();
  allow_next_grid();

  const float logit = expert ? logits[token * num_experts + e] : -INFINITY;
  double score = 0.0;
  if (routing.scoring == MoeScoring::kSoftmax) {
    const float warp_max_logit = warp_max(logit);
    if (lane == 0) max_s[warp] = warp_max_logit;
    __syncthreads();
    float max_logit = max_s[0];
    for (int w = 1; w < num_warps; ++w) max_logit = fmaxf(max_logit, max_s[w]);
    if (expert) score = exp(static_cast<double>(logit) - static_cast<double>(max_logit));
    const double warp_total = warp_sum_f64(score);
    if (lane == 0) sum_s[warp] = warp_total;
    __syncthreads();
    double sum = sum_s[0];
    for (int w = 1; w < num_warps; ++w) sum += sum_s[w];
    score /= sum;
  } else if (expert) {
    score = 1.0 / (1.0 + exp(-static_cast<double>(logit)));
  }
  double choice = score + (bias != nullptr && expert ? load_as_f32(bias, bias_dtype, e) : 0.0);
  if (expert) choice_s[e] = choice;
  __syncthreads();

  if (routing.num_groups > 1) {
    const int32_t num_groups = routing.num_groups;
    const int32_t group_size = num_experts / num_groups;
    if (e < num_groups) {
      double best = -INFINITY;
      double second = -INFINITY;
      for (int32_t m = 0; m < group_size; ++m) {
        const double v = choice_s[e * group_size + m];
        if (v > best) {
          second = best;
          best = v;
        } else if (v > second) {
          second = v;
        }
      }
      const bool two = routing.group_score == MoeGroupScore::kTopTwoSum && group_size > 1;
      group_s[e] = two ? best + second : best;
    }
    __syncthreads();
    if (e < num_groups) {
      int32_t rank = 0;
      for (int32_t g = 0; g < num_groups; ++g) rank += ranks_before(group_s[g], g, group_s[e], e);
      kept_s[e] = rank < routing.top_groups;
    }
    __syncthreads();
    if (expert && !kept_s[e / group_size]) {
      choice = -INFINITY;
      choice_s[e] = choice;  // every read of choice_s above is behind the last barrier
    }
    __syncthreads();
  }

  // Slot j takes the expert ranked j; the weights' sum runs in slot order, as the reference's does.
  if (expert) {
    int32_t rank = 0;
#pragma unroll 8
    for (int32_t j = 0; j < num_experts; ++j) rank += ranks_before(choice_s[j], j, choice, e);
    if (rank < routing.top_k) {
      slot_id_s[rank] = e;
      slot_score_s[rank] = score;
    }
  }
  __syncthreads();
  if (e < routing.top_k) {
    double chosen_sum = 0.0;
    for (int32_t j = 0; j < routing.top_k; ++j) chosen_sum += slot_score_s[j];
    const double norm = routing.normalize ? 1.0 / (chosen_sum + 1e-20) : 1.0;
    expert_ids[token * routing.top_k + e] = slot_id_s[e];
    expert_weights[token * routing.top_k + e] = static_cast<float>(slot_score_s[e] * norm * routing.scaling);
  }
  if (fused.rows_per_tile == 0) return;

  // The last block to finish groups every token's rows. A single block is last by itself; others
  // publish their ids (fence, then count) and the last one reads them from L2.
  __shared__ bool last_s;
  if (gridDim.x > 1) {
    __threadfence();
    __syncthreads();
    if (e == 0) last_s = atomicAdd(fused.blocks_done, 1) == static_cast<int>(gridDim.x) - 1;
    __syncthreads();
    if (!last_s) return;
    __threadfence();
  } else {
    __syncthreads();
  }
  // The routing's shared memory is done with: its doubles hold the grouping's counters.
  auto* counts_s = reinterpret_cast<int32_t*>(choice_s);
  auto* cursor_s = reinterpret_cast<int32_t*>(group_s);
  group_rows_in_block(expert_ids, num_tokens * routing.top_k, num_experts, fused.rows_per_tile, fused.grouping,
                      fused.expert_token_counts, counts_s, cursor_s);
  if (e == 0 && gridDim.x > 1) *fused.blocks_done = 0;
}

void check_routing(const MoeRouting& routing) {
  DI_CHECK(routing.num_experts >= 1 && routing.num_experts <= kMoeMaxExperts,
           "the CUDA router takes up to " << kMoeMaxExperts << " experts, got " << routing.num_experts);
  DI_CHECK(routing.top_k >= 1 && routing.top_k <= routing.num_experts && routing.top_k <= kMoeMaxTopK,
           "the CUDA router takes top_k in [1, min(num_experts, " << kMoeMaxTopK << ")], got " << routing.top_k);
  DI_CHECK(routing.num_groups >= 1 && routing.num_experts % routing.num_groups == 0 && routing.top_groups >= 1 &&
               routing.top_groups <= routing.num_groups,
           "experts must split evenly into groups and top_groups be in [1, num_groups]");
}

void launch_route(const float* logits, const WeightView& selection_bias, int64_t num_tokens, const MoeRouting& routing,
                  int32_t* expert_ids, float* expert_weights, const FusedGrouping& fused, cudaStream_t stream) {
  DI_CHECK(num_tokens <= INT_MAX, "the CUDA router takes up to " << INT_MAX << " tokens");
  launch_dependent(route_kernel, dim3(static_cast<unsigned>(num_tokens)), dim3(route_threads(routing.num_experts)), 0,
                   stream, logits, selection_bias.data, selection_bias.dtype, static_cast<int32_t>(num_tokens), routing,
                   expert_ids, expert_weights, fused);
  DI_CUDA_CHECK_LAUNCH("route_kernel");
}

}  // namespace

void moe_route(const float* logits, const WeightView& selection_bias, int64_t num_tokens, const MoeRouting& routing,
               int32_t* expert_ids, float* expert_weights, cudaStream_t stream) {
  check_routing(routing);
  if (num_tokens == 0) return;
  launch_route(logits, selection_bias, num_tokens, routing, expert_ids, expert_weights, FusedGrouping{}, stream);
}

int64_t moe_route_group_max_rows(int32_t num_experts) { return 2 * int64_t{route_threads(num_experts)}; }

void moe_route_and_group(const float* logits, const WeightView& selection_bias, int64_t num_tokens,
                         const MoeRouting& routing, int32_t* expert_ids, float* expert_weights, int32_t rows_per_tile,
                         const MoeGrouping& grouping, int64_t* expert_token_counts, int32_t* blocks_done,
                         cudaStream_t stream) {
  check_routing(routing);
  DI_CHECK(
      num_tokens * routing.top_k <= moe_route_group_max_rows(routing.num_experts) && rows_per_tile >= 1,
      "moe_route_and_group: " << num_tokens << " tokens x " << routing.top_k << " slots, tiles of " << rows_per_tile);
  if (num_tokens == 0) return;
  launch_route(logits, selection_bias, num_tokens, routing, expert_ids, expert_weights,
               FusedGrouping{grouping, rows_per_tile, expert_token_counts, blocks_done}, stream);
}

}  // namespace deepinfer::kernels::cuda
