// FP8 block-scaled products of a few rows (decode batches) on Hopper's warpgroup tensor cores
// (wgmma e4m3, sm_90a), with the operands swapped: the weight's rows are the product's 64-row side
// and x's rows (up to 64, padded to 16 / 32 / 64) its narrow side, so a block streams 128 weight
// rows of every k slice and no tensor-core work is spent on absent rows, where a GEMM's 128-row
// tiles of x would be mostly padding. Weights are e4m3 as published with 128 x 128 float32
// block scales, x is quantised per row per 128 columns (gemv_fp8.h's Fp8Rows); each 128-wide k
// slice is one scale block, multiplied into fresh float32 accumulators and added to the sums times
// both scales, as DeepSeek's DeepGEMM promotes. A producer warp feeds a TMA ring; two consumer
// warpgroups take 64 weight rows each. Weights with few 128-row blocks split K over several blocks
// to fill the GPU; the last block of a tile to finish adds the splits' partial sums (kept in the
// workspace) in split order, so every run gives the same result.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/gemv_fp8.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

// The rows gemm.h's FP8 products take the kernel for (but small weights at up to
// kFp8GemvAlwaysRows, gemv_fp8.h): one row stays on gemv.h's kernel, within 3-6 % of this one on an
// H100 with float32 x and no quantising launch; past 64 rows cuBLASLt's FP8 GEMM is faster (96 and
// 128 rows: 1.05-1.26x).
constexpr int64_t kFp8SwappedMinRows = 2;
constexpr int64_t kFp8SwappedMaxRows = 64;

// The workspace starts with one counter per 128 weight rows, which must be zero before the first
// launch (the kernel leaves them zero): N up to 4096 x 128 rows.
constexpr size_t kFp8SwappedCounterBytes = 4096 * sizeof(uint32_t);

// Whether fp8_swapped_gemm takes w at num_rows rows: a Hopper GPU, fp8_layout_supported(w) with
// 128-row scale blocks, 1 <= num_rows <= kFp8SwappedMaxRows, N and K in the kernel's bounds.
bool fp8_swapped_gemm_fits(const WeightView& w, int64_t num_rows);
// Bytes of the workspace of one product (the counters, then the splits' partial sums).
size_t fp8_swapped_workspace_bytes(const WeightView& w, int64_t num_rows);
// y[M, N] (float32) = x[M, K] @ dequant(w)^T for M = num_rows. Requires fp8_swapped_gemm_fits;
// x's codes 16-byte aligned. Products sharing a workspace run one at a time (one stream).
void fp8_swapped_gemm(const Fp8Rows& x, const WeightView& w, int64_t num_rows, float* y, void* workspace,
                      cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
