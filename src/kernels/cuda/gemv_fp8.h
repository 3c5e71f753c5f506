// Products with FP8 e4m3 weights kept as published (DeepSeek-V3's block-scaled layout: one float32
// factor per 128 x 128 block, kernels::WeightView::scales). One or two rows of x take gemv.h's
// kernel (codes widened against float32 x); up to kFp8GemvMaxRows run on the tensor cores' FP8
// instructions with x quantised to e4m3 per row per 128 columns on the fly, as DeepSeek's own
// kernels do, and the products of each 128-column block promoted to float32 with both scales; larger
// batches dequantise the weight to bf16 for cuBLASLt.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

// The most x rows fp8_gemv takes (eight tensor-core tiles of 8 rows).
constexpr int64_t kFp8GemvMaxRows = 64;
// The column block of both the weight scales and x's quantisation.
constexpr int64_t kFp8BlockCols = 128;

// True when the FP8 kernels take w: e4m3 with 128-column scale blocks, row blocks a multiple of 16,
// K a multiple of 128, 16-byte aligned data.
bool fp8_layout_supported(const WeightView& w);
// Bytes of fp8_gemv's workspace: x's e4m3 codes and their scales.
size_t fp8_gemv_workspace_bytes(int64_t num_rows, int64_t k);
// y[M, N] = x[M, K] @ dequant(w)^T for 1 <= M <= kFp8GemvMaxRows, x float32 (16-byte aligned),
// workspace of fp8_gemv_workspace_bytes (16-byte aligned). Requires fp8_layout_supported(w).
void fp8_gemv(const float* x, const WeightView& w, int64_t num_rows, void* workspace, float* y, cudaStream_t stream);
// out[N, K] (bf16) = w's values times their block scales, rounded to nearest even; scale blocks of
// a multiple of 16 columns.
void dequantize_fp8_to_bf16(const WeightView& w, void* out, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
