// A grouped bf16 GEMM on Hopper's warpgroup tensor cores (wgmma, sm_90a) fed by the tensor memory
// accelerator (TMA): MoE prefill's expert products, one product per (expert, projection) with rows,
// all in one launch. A block computes a 128 x 256 tile of one product: a producer warp loads 64-wide
// k slices of the rows' inputs and of the weight into a 4-stage ring of shared memory (mbarriers
// count the bytes landed and the stages freed), two consumer warpgroups each multiply 64 rows into
// float32 accumulators and store the tile rounded to bf16. Inputs are one [rows, k] matrix (the
// grouped rows in expert order), each product a run of its rows; weights are [n, k] row-major.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::kernels::cuda {

// y[i, 0:n] = x[row0 + i, 0:k] @ w^T for i < rows, on the device; w_map describes w.
struct WgmmaProduct {
  int32_t tile_begin;  // the product's first tile in the launch (tiles in product order)
  int32_t row0;
  int32_t rows;
  int32_t n;
  void* y;  // bf16, rows ld_y elements apart
  int64_t ld_y;
};

// Rows and columns of a block's tile.
constexpr int kWgmmaTileRows = 128;
constexpr int kWgmmaTileCols = 256;

// Whether this process's device runs the kernel (compute capability 9.0).
bool grouped_gemm_wgmma_supported();
// Whether a [rows, k] bf16 matrix at data can be a TMA operand: 16-byte aligned, k a multiple of 8.
bool wgmma_operand_fits(const void* data, int64_t k);
// The TMA description of a [rows, k] bf16 matrix (row-major) in the tiles' boxes: 64 k by
// box_rows rows, 128-byte swizzle. Requires wgmma_operand_fits.
CUtensorMap wgmma_operand_map(const void* data, int64_t rows, int64_t k, int box_rows);
// Tiles of one product.
int32_t wgmma_product_tiles(int32_t rows, int32_t n);

// Runs every product: x_map describes x ([*, k], box kWgmmaTileRows rows), weight_maps[p] product
// p's weight (box kWgmmaTileCols rows); weight_maps and products are device arrays, total_tiles the
// tiles of all products. Requires grouped_gemm_wgmma_supported().
void launch_grouped_gemm_wgmma(const CUtensorMap& x_map, const CUtensorMap* weight_maps, const WgmmaProduct* products,
                               int32_t num_products, int32_t total_tiles, int64_t k, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
