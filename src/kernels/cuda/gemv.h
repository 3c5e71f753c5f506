// Bandwidth-bound products for decode-sized batches: y[M, N] = x[M, K] @ w[N, K]^T for M <= 2 with
// BF16/F16 weights, x rounded to the weight dtype and float32 accumulation (cuBLASLt's numbers).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

// At M = 4 cuBLASLt (cast + GEMM) was faster on every Llama-3-8B shape (docs/benchmarks.md).
constexpr int64_t kGemvMaxRows = 2;

// True when gemv takes this product: 1..kGemvMaxRows rows, BF16/F16 weights, K a multiple of 8,
// x and w 16-byte aligned.
bool can_gemv(const float* x, const WeightView& w, int64_t num_rows);
// Enqueues the product (overwrites y). Requires can_gemv.
void gemv(const float* x, const WeightView& w, int64_t num_rows, float* y, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
