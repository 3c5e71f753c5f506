// A grouped bf16 GEMM on Hopper's warpgroup tensor cores (wgmma, sm_90a) fed by the tensor memory
// accelerator (TMA): MoE prefill's expert products, one product per expert with rows, all in one
// launch. Persistent blocks (one per multiprocessor) walk the tiles; in each, a producer thread
// loads 64-wide k slices of the rows' inputs and of the weights into a 4-stage ring of shared memory
// (mbarriers count the bytes landed and the stages freed, across tiles, so the next tile's loads run
// under this one's epilogue), two consumer warpgroups each multiply 64 rows into float32
// accumulators and store the tile rounded to bf16, biases added first. Gated products stack 128
// rows of gate and the same 128 of up in one 256-wide tile, so the epilogue holds both halves of
// each output and writes act(gate) * up (gate and up rounded to bf16 first, as a bf16 GEMM's outputs
// would be) instead of gate|up. Inputs are one [rows, k] matrix (the grouped rows in expert order),
// each product a run of its rows; weights are [n, k] row-major.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

// y[i, 0:n] = x[row0 + i, 0:k] @ w^T (+ bias) for i < rows, on the device. Gated: w is gate and up,
// y[i, c] = act(x @ gate^T + gate_bias, x @ up^T + up_bias)[c].
struct WgmmaProduct {
  int32_t tile_begin;  // the product's first tile in the launch (tiles in product order)
  int32_t row0;
  int32_t rows;
  int32_t n;
  void* y;  // bf16 (float32 for the FP8 kernel, grouped_gemm_fp8.h), rows ld_y elements apart
  int64_t ld_y;
  const void* bias[2];     // [n] each, or null: gate's and up's (gated), or the product's
  const float* scales[2];  // FP8 weights' 128 x 128 block scales, [n / 128, k / 128] each, as bias
};

// What the tiles' epilogue does beside storing: biases of bias_dtype, and for gated products the
// activation.
struct WgmmaEpilogue {
  bool gated = false;
  DType bias_dtype = DType::kF32;
  ExpertActivation activation = ExpertActivation::kSiluGated;
  float swiglu_alpha = 0.0f;
  float swiglu_limit = 0.0f;
};

// Rows of a block's tile; weight rows of a tile: kWgmmaTileCols of one weight, or half of it from
// gate and half from up.
constexpr int kWgmmaTileRows = 128;
constexpr int kWgmmaTileCols = 256;

// Whether this process's device runs the kernel (compute capability 9.0).
bool grouped_gemm_wgmma_supported();
// Whether a [rows, k] matrix of dtype at data can be a TMA operand: 16-byte aligned rows.
bool wgmma_operand_fits(const void* data, int64_t k, DType dtype = DType::kBF16);
// The TMA description of a [rows, k] bf16 or e4m3 matrix (row-major) in the tiles' boxes: 128 bytes
// of k (64 bf16, 128 e4m3) by box_rows rows, 128-byte swizzle. Requires wgmma_operand_fits.
CUtensorMap wgmma_operand_map(const void* data, int64_t rows, int64_t k, int box_rows, DType dtype = DType::kBF16);
// Weight rows of one weight's box: kWgmmaTileCols, or half for gated products.
int wgmma_weight_box_rows(bool gated);
// Tiles of one product.
int32_t wgmma_product_tiles(int32_t rows, int32_t n, bool gated);

// Runs every product: x_map describes x ([*, k], box kWgmmaTileRows rows), weight_maps[2p] product
// p's weight (gated: gate, and up at 2p + 1; boxes of wgmma_weight_box_rows); weight_maps and
// products are device arrays, total_tiles the tiles of all products. Requires
// grouped_gemm_wgmma_supported().
void launch_grouped_gemm_wgmma(const CUtensorMap& x_map, const CUtensorMap* weight_maps, const WgmmaProduct* products,
                               int32_t num_products, int32_t total_tiles, int64_t k, const WgmmaEpilogue& epilogue,
                               cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
