// A grouped FP8 GEMM on Hopper's warpgroup tensor cores (wgmma e4m3, sm_90a) fed by TMA: MoE
// prefill's expert products with the experts' e4m3 weights as published (128 x 128 float32 block
// scales, DeepSeek-V3's and Qwen3-FP8's layout) and the rows' inputs quantised per row per 128
// columns (gemv_fp8.h's Fp8Rows). The bf16 kernel's persistent blocks, ring and producer
// (grouped_gemm_wgmma.h); here each 128-wide k slice is one scale block, so a consumer warpgroup
// multiplies it into fresh float32 accumulators and adds them to the tile's sums times both scales
// (as DeepSeek's DeepGEMM promotes). Tiles are 128 rows by 128 weight rows (gated: 64 of gate and
// the same 64 of up, whose outputs are act(gate) * up); outputs are float32, biases added first.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/grouped_gemm_wgmma.h"

namespace deepinfer::kernels::cuda {

// Weight rows of one weight's box: 128, or 64 for gated products.
int fp8_weight_box_rows(bool gated);
// Tiles of one product.
int32_t fp8_product_tiles(int32_t rows, int32_t n, bool gated);

// Runs every product as launch_grouped_gemm_wgmma does, over e4m3 operands: x_map describes the
// x_rows rows' codes ([x_rows, k] bytes, box kWgmmaTileRows rows), x_scales their scales ([k / 128,
// x_rows]); products carry each weight's scales and write float32 y. k a multiple of 128.
// Requires grouped_gemm_wgmma_supported().
void launch_grouped_gemm_fp8(const CUtensorMap& x_map, const float* x_scales, int64_t x_rows,
                             const CUtensorMap* weight_maps, const WgmmaProduct* products, int32_t num_products,
                             int32_t total_tiles, int64_t k, const WgmmaEpilogue& epilogue, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
