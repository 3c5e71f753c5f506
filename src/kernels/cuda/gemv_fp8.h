// Products with FP8 e4m3 weights kept as published (DeepSeek-V3's block-scaled layout: one float32
// factor per 128 x 128 block, kernels::WeightView::scales). One or two rows of x take gemv.h's
// kernel (codes widened against float32 x); up to kFp8GemvMaxRows run here on the tensor cores' FP8
// instructions with x quantised to e4m3 per row per 128 columns on the fly, as DeepSeek's own
// kernels do, and the products of each 128-column block promoted to float32 with both scales, where
// gemm.h does not give them to gemm_fp8_swapped.h's wgmma kernel (2-64 rows but for small weights);
// larger batches take cuBLASLt's block-scaled FP8 GEMM over the same quantised x (gemm.h: 128 x 128
// blocks, K a multiple of 512, M % 4 last rows here), other shapes the weight dequantised to bf16.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

// The most x rows fp8_gemv takes (eight tensor-core tiles of 8 rows).
constexpr int64_t kFp8GemvMaxRows = 64;
// Rows up to which fp8_gemv takes every product (gemm.h's choice), and weights (values) under which
// it takes them up to its limit.
constexpr int64_t kFp8GemvAlwaysRows = 16;
constexpr int64_t kFp8GemvSmallWeight = int64_t{1} << 23;
// The column block of both the weight scales and x's quantisation.
constexpr int64_t kFp8BlockCols = 128;

// True when the FP8 kernels take scale blocks of this shape: 128 columns, rows a multiple of 16.
bool fp8_blocks_supported(int64_t block_rows, int64_t block_cols);
// True when the FP8 kernels take w: e4m3 in fp8_blocks_supported blocks, K a multiple of 128,
// 16-byte aligned data.
bool fp8_layout_supported(const WeightView& w);
// x quantised for the FP8 products: e4m3 codes [M, K] (x * 448 / amax, per row per 128 columns) and
// their float32 scales (amax / 448) stored [K / 128, M]: the layout cuBLASLt's VEC128_32F scales
// take where M is a multiple of 4 (gemm.h).
struct Fp8Rows {
  void* codes = nullptr;
  float* scales = nullptr;
};
// Bytes of a workspace holding num_rows quantised rows of k columns, and where they lie in it
// (workspace 16-byte aligned; the bytes of 4 rows are a multiple of 16).
size_t fp8_rows_bytes(int64_t num_rows, int64_t k);
Fp8Rows fp8_rows_at(void* workspace, int64_t num_rows, int64_t k);
// Enqueues rows = x quantised; x: float32 [num_rows, k] (16-byte aligned), k a multiple of 128.
void quantize_fp8_rows(const float* x, int64_t num_rows, int64_t k, const Fp8Rows& rows, cudaStream_t stream);
// The same quantisation of x [num_tokens, k] into the num_rows rows of a grouped MoE step: token t's
// codes and scales go to each row position[t * top_k + j] that is not -1 (moe_ops.h's grouping).
void quantize_fp8_grouped_rows(const float* x, const int32_t* position, int64_t num_tokens, int32_t top_k, int64_t k,
                               const Fp8Rows& rows, int64_t num_rows, cudaStream_t stream);
// y[M, N] = x[M, K] @ dequant(w)^T for 1 <= M <= kFp8GemvMaxRows. Requires fp8_layout_supported(w).
void fp8_gemv(const Fp8Rows& x, const WeightView& w, int64_t num_rows, float* y, cudaStream_t stream);
// out[N, K] (bf16) = w's values times their block scales, rounded to nearest even; scale blocks of
// a multiple of 16 columns.
void dequantize_fp8_to_bf16(const WeightView& w, void* out, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
