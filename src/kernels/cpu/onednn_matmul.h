// Prefill-shaped matmul (many activation rows, compute-bound) through oneDNN's matmul primitive.
// Private to the CPU kernels; exposed for the tests and the kernel benchmark.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {

// y[m, n] = sum_k x[m, k] * w[n, k]; no bias. x: [num_rows, K] f32; w: [N, K]; y: [num_rows, N] f32.
// F32 weights: f32 GEMM. BF16 weights: bf16 x bf16 -> f32 GEMM, x rounded to bf16 first (so the
// result equals an exact product of bf16-rounded x and w, up to fp32 accumulation). F16 weights
// (oneDNN 2.6 has no f16 GEMM without AVX512-FP16), and BF16 ones on CPUs without oneDNN bf16:
// converted to f32 one slab of rows at a time, then f32 GEMM (FP8 and MXFP4 weights too, dequantised
// per slab as ref::dequantize_weight_row does; for BF16, of x rounded to bf16 as
// above, so the result does not depend on the CPU). Thread-safe; primitives are cached
// per (row bucket, N, K, dtype) and BF16/F32 weights are used in place, never copied.
void onednn_matmul(const float* x, const WeightView& w, int64_t num_rows, float* y);

}  // namespace deepinfer::kernels::cpu
