// The mixture-of-experts router on the device: one warp per token scores its experts in float64
// (as kernels/ref does, so the chosen ids match it bit for bit), masks all but the best groups,
// and picks top_k by repeated warp argmax (ties to the lower id). A dependent launch: it is resident
// while the router's product finishes.
#include <climits>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe_ops.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kPerLane = kMoeMaxExperts / 32;
constexpr unsigned kFull = 0xffffffffu;

// Is (value, index) ranked before (best, best_index)? Higher value first, then lower index.
__device__ __forceinline__ bool ranks_before(double value, int32_t index, double best, int32_t best_index) {
  return value > best || (value == best && index < best_index);
}

// Every lane ends with the warp's best (value, index).
__device__ __forceinline__ void warp_best(double& value, int32_t& index) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const double other = __shfl_xor_sync(kFull, value, offset);
    const int32_t other_index = __shfl_xor_sync(kFull, index, offset);
    if (ranks_before(other, other_index, value, index)) {
      value = other;
      index = other_index;
    }
  }
}

__device__ __forceinline__ double warp_sum_f64(double value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(kFull, value, offset);
  return value;
}

// Lane l owns experts l, l + 32, ...; choice_s holds the warp's selection scores for group ranking.
__global__ void __launch_bounds__(kWarps * 32)
    route_kernel(const float* __restrict__ logits, const void* bias, DType bias_dtype, int64_t num_tokens,
                 MoeRouting routing, int32_t* __restrict__ expert_ids, float* __restrict__ expert_weights) {
  __shared__ double choice_s[kWarps][kMoeMaxExperts];
  __shared__ double group_s[kWarps][kMoeMaxExperts];
  __shared__ bool kept_s[kWarps][kMoeMaxExperts];
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t token = blockIdx.x * int64_t{kWarps} + warp;
  wait_for_previous_grid();
  allow_next_grid();
  if (token >= num_tokens) return;  // whole warps leave; no block-wide barrier follows
  const int32_t num_experts = routing.num_experts;
  const float* row = logits + token * num_experts;

  double score[kPerLane];
  double choice[kPerLane];
  float max_logit = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int32_t e = lane + 32 * i;
    if (e < num_experts) max_logit = fmaxf(max_logit, row[e]);
  }
  max_logit = warp_max(max_logit);
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int32_t e = lane + 32 * i;
    score[i] = 0.0;
    if (e >= num_experts) continue;
    const double logit = row[e];
    score[i] = routing.scoring == MoeScoring::kSoftmax ? exp(logit - static_cast<double>(max_logit))
                                                       : 1.0 / (1.0 + exp(-logit));
    sum += score[i];
  }
  if (routing.scoring == MoeScoring::kSoftmax) {
    sum = warp_sum_f64(sum);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) score[i] /= sum;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int32_t e = lane + 32 * i;
    choice[i] = score[i] + (bias != nullptr && e < num_experts ? load_as_f32(bias, bias_dtype, e) : 0.0);
    if (e < num_experts) choice_s[warp][e] = choice[i];
  }

  if (routing.num_groups > 1) {
    const int32_t num_groups = routing.num_groups;
    const int32_t group_size = num_experts / num_groups;
    __syncwarp();
    for (int32_t g = lane; g < num_groups; g += 32) {
      double best = -INFINITY;
      double second = -INFINITY;
      for (int32_t m = 0; m < group_size; ++m) {
        const double v = choice_s[warp][g * group_size + m];
        if (v > best) {
          second = best;
          best = v;
        } else if (v > second) {
          second = v;
        }
      }
      const bool two = routing.group_score == MoeGroupScore::kTopTwoSum && group_size > 1;
      group_s[warp][g] = two ? best + second : best;
      kept_s[warp][g] = false;
    }
    __syncwarp();
    for (int32_t round = 0; round < routing.top_groups; ++round) {
      double best = -INFINITY;
      int32_t best_group = INT_MAX;
      for (int32_t g = lane; g < num_groups; g += 32) {
        if (!kept_s[warp][g] && ranks_before(group_s[warp][g], g, best, best_group)) {
          best = group_s[warp][g];
          best_group = g;
        }
      }
      warp_best(best, best_group);
      if (lane == 0) kept_s[warp][best_group] = true;
      __syncwarp();
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int32_t e = lane + 32 * i;
      if (e < num_experts && !kept_s[warp][e / group_size]) choice[i] = -INFINITY;
    }
  }

  // Slot j's id and score end in lane j; the sum runs in slot order, as the reference's does.
  bool taken[kPerLane] = {};
  int32_t my_id = 0;
  double my_score = 0.0;
  double chosen_sum = 0.0;
  for (int32_t j = 0; j < routing.top_k; ++j) {
    double best = -INFINITY;
    int32_t best_expert = INT_MAX;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int32_t e = lane + 32 * i;
      if (e < num_experts && !taken[i] && ranks_before(choice[i], e, best, best_expert)) {
        best = choice[i];
        best_expert = e;
      }
    }
    warp_best(best, best_expert);
    double picked = 0.0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + 32 * i == best_expert) {
        taken[i] = true;
        picked = score[i];
      }
    }
    picked = __shfl_sync(kFull, picked, best_expert % 32);
    chosen_sum += picked;
    if (lane == j) {
      my_id = best_expert;
      my_score = picked;
    }
  }
  if (lane < routing.top_k) {
    const double norm = routing.normalize ? 1.0 / (chosen_sum + 1e-20) : 1.0;
    expert_ids[token * routing.top_k + lane] = my_id;
    expert_weights[token * routing.top_k + lane] = static_cast<float>(my_score * norm * routing.scaling);
  }
}

}  // namespace

void moe_route(const float* logits, const WeightView& selection_bias, int64_t num_tokens, const MoeRouting& routing,
               int32_t* expert_ids, float* expert_weights, cudaStream_t stream) {
  DI_CHECK(routing.num_experts >= 1 && routing.num_experts <= kMoeMaxExperts,
           "the CUDA router takes up to " << kMoeMaxExperts << " experts, got " << routing.num_experts);
  DI_CHECK(routing.top_k >= 1 && routing.top_k <= routing.num_experts && routing.top_k <= kMoeMaxTopK,
           "the CUDA router takes top_k in [1, min(num_experts, " << kMoeMaxTopK << ")], got " << routing.top_k);
  DI_CHECK(routing.num_groups >= 1 && routing.num_experts % routing.num_groups == 0 && routing.top_groups >= 1 &&
               routing.top_groups <= routing.num_groups,
           "experts must split evenly into groups and top_groups be in [1, num_groups]");
  if (num_tokens == 0) return;
  const auto blocks = static_cast<unsigned>((num_tokens + kWarps - 1) / kWarps);
  launch_dependent(route_kernel, dim3(blocks), dim3(kWarps * 32), 0, stream, logits, selection_bias.data,
                   selection_bias.dtype, num_tokens, routing, expert_ids, expert_weights);
}

}  // namespace deepinfer::kernels::cuda
