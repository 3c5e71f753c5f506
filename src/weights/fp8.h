// Block-scaled FP8 weights (DeepSeek-V3 checkpoints): their checks, and dequantisation to float32 at
// load for backends that do not read them packed.
#pragma once

#include <vector>

#include "core/result.h"
#include "weights/safetensors.h"

namespace deepinfer {

// Checks that weight is a 2-D F8_E4M3 matrix and scale_inv its F32 or BF16 block scales,
// [ceil(rows / block_rows), ceil(cols / block_cols)]; errors name both tensors and the shapes expected.
Result<void> check_fp8_scales(const TensorView& weight, const TensorView& scale_inv, int64_t block_rows,
                              int64_t block_cols);

// weight: [rows, cols] F8_E4M3; scale_inv: [ceil(rows / block_rows), ceil(cols / block_cols)]
// F32 (or BF16); returns weight[r, c] * scale_inv[r / block_rows, c / block_cols] as float32.
// Errors name both tensors and the shapes expected.
Result<std::vector<float>> dequantize_fp8(const TensorView& weight, const TensorView& scale_inv, int64_t block_rows,
                                          int64_t block_cols);

// The inverse, as DeepSeek-V3's checkpoints were made: w (float32 [rows, cols]) as e4m3 codes
// (codes: [rows, cols]) with one factor per block_rows x block_cols block (scale_inv:
// [ceil(rows / block_rows), ceil(cols / block_cols)]) that maps the block's largest magnitude to 448.
void quantize_fp8_blocks(const float* w, int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols,
                         uint8_t* codes, float* scale_inv);

}  // namespace deepinfer
