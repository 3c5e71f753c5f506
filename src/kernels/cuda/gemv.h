// Bandwidth-bound products for decode-sized batches: y[M, N] = x[M, K] @ w[N, K]^T for M <= 2 with
// BF16/F16 weights, x rounded to the weight dtype and float32 accumulation (cuBLASLt's numbers), or
// with block-scaled FP8 e4m3 weights (WeightView::scales) and x in float32; and the gated
// activation of stacked gate|up products.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

// At M = 4 cuBLASLt (cast + GEMM) was faster on every Llama-3-8B shape (docs/benchmarks.md).
constexpr int64_t kGemvMaxRows = 2;

// True when gemv takes this product: 1..kGemvMaxRows rows, BF16/F16 weights with K a multiple of 8
// or FP8 ones with scale blocks of a multiple of 16 columns and K a multiple of 16, x and w 16-byte
// aligned.
bool can_gemv(const float* x, const WeightView& w, int64_t num_rows);
// Enqueues the product plus bias ([w.rows] of kF32, kBF16 or kF16; data null: none) in its
// epilogue, the same sums as the product then add_bias (overwrites y). Requires can_gemv.
void gemv(const float* x, const WeightView& w, const WeightView& bias, int64_t num_rows, float* y, cudaStream_t stream);
// The product of stacked gate|up weights with the activation as its epilogue: gate_up =
// [gate; up] ([2 * I, K]); out[m, i] = act(x[m] . gate[i]) * (x[m] . up[i]), act SiLU or (gelu)
// tanh-approximated GeLU; out: [num_rows, I]. Each sum is the one gemv computes. Requires
// can_gemv(x, gate_up, num_rows).
void gemv_glu(const float* x, const WeightView& gate_up, int64_t num_rows, bool gelu, float* out,
              cudaStream_t stream);
// residual += gemv(x) (residual: [num_rows, w.rows]): a decoder layer's residual add in the
// product's epilogue, the same sum as add_rms_norm's residual + x. Requires can_gemv.
void gemv_add(const float* x, const WeightView& w, int64_t num_rows, float* residual, cudaStream_t stream);
// out[r, i] = act(gate_up[r, i]) * gate_up[r, I + i] rounded to dtype (kBF16 or kF16): the input
// of the down product after a stacked gate|up GEMM. gate_up: [num_rows, 2 * I] of gate_up_dtype
// (kF32, or dtype where the GEMM wrote 16-bit outputs).
void glu_rounded(const void* gate_up, DType gate_up_dtype, int64_t num_rows, int64_t intermediate, bool gelu,
                 DType dtype, void* out, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
