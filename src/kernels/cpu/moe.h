// The batch-invariant variant of the CPU expert kernel, for BackendOptions::batch_invariant
// (the plain kernels::cpu::moe_experts is declared in kernels/ops.h).
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {

// Same contract as kernels::cpu::moe_experts, plus: out[t] depends only on x[t] and its routing,
// never on the other tokens (every expert GEMM goes through matmul_invariant).
void moe_experts_invariant(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                           const MoeExperts& experts, float* workspace, int64_t* expert_token_counts, float* out);

}  // namespace deepinfer::kernels::cpu
