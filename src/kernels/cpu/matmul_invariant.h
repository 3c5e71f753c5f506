// Batch-invariant CPU matmul: the arithmetic behind every output row is fixed by K alone, so a
// sequence's activations (and logits) come out bit for bit the same whatever shares its step.
// Used by the CPU backend when BackendOptions::batch_invariant is set (runtime/backend.h).
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {

// y[M, N] = x[M, K] @ w[N, K]^T (+ bias[1, N]); bias.data may be null. Same contract as
// kernels::cpu::matmul, plus: y[m, :] depends only on x[m, :], w and bias, never on num_rows,
// the other rows or the thread count. Every row takes the GEMV's per-row fp32 reduction
// (gemv.h) at every row count, so no oneDNN GEMM, and BF16 weights meet f32 activations (not
// bf16-rounded ones as in the oneDNN path). x: [num_rows, K] f32; y: [num_rows, N] f32.
void matmul_invariant(const float* x, const WeightView& w, const WeightView& bias, int64_t num_rows, float* y);

}  // namespace deepinfer::kernels::cpu
