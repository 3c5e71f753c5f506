// One online-softmax step of CPU paged attention: the query heads of one kv head, for one token,
// over one block of kKeyBlock consecutive cache positions. Private to the CPU kernels.
#pragma once

#include <cstdint>

#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {

// Keys per step; blocks start at multiples of kKeyBlock (absolute positions), so every token
// steps through the same blocks however the batch is cut into tasks.
inline constexpr int32_t kKeyBlock = 16;

// One step for one (token, kv head). The running state holds, per query head of the group, the
// online-softmax max and sum and the unnormalised weighted sum of values (key_state_floats).
// All kKeyBlock key rows must be readable, also those outside [lo, hi]: their lanes are computed
// and masked out (never mixed into visible lanes), so any range runs the same straight-line code.
struct KeyBlockStep {
  const float* q;              // [group, head_dim]
  const float* const* k_rows;  // [kKeyBlock] rows of [head_dim]: this kv head's keys of the block
  const float* const* v_rows;  // [kKeyBlock] rows of [head_dim]
  int32_t lo;                  // the token sees lanes [lo, hi] of the block
  int32_t hi;
  int32_t group;
  int32_t head_dim;
  float scale;
  float* probs;        // [group, kKeyBlock] scratch: scores, then probabilities
  float* acc;          // [group, head_dim]
  float* running_max;  // [group]
  float* running_sum;  // [group]
  float* rescale;      // [group] scratch
};

inline int64_t key_state_floats(int32_t group, int32_t head_dim) {
  return static_cast<int64_t>(group) * (kKeyBlock + head_dim + 3);
}

// acc = acc * exp(old_max - new_max) + sum over lanes [lo, hi] of exp(score - new_max) * v, in
// fp32, lanes in order; the same arithmetic whichever tokens or heads share the caller's task.
void key_block_step_avx512(const KeyBlockStep& step);
void key_block_step_portable(const KeyBlockStep& step);

// kernels::cpu::paged_attention with a chosen implementation (kAvx2 runs the portable one);
// lets the tests check every implementation on one machine. `isa` must be supported by the CPU.
void paged_attention_with(Isa isa, const float* q, const void* k_cache, const void* v_cache, const PagedBatch& batch,
                          const AttentionParams& params, float* out);

}  // namespace deepinfer::kernels::cpu
