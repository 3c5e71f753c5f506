// Block-scaled FP8 weights (DeepSeek-V3 checkpoints): dequantisation to float32 at load.
#pragma once

#include <vector>

#include "core/result.h"
#include "weights/safetensors.h"

namespace deepinfer {

// weight: [rows, cols] F8_E4M3; scale_inv: [ceil(rows / block_rows), ceil(cols / block_cols)]
// F32 (or BF16); returns weight[r, c] * scale_inv[r / block_rows, c / block_cols] as float32.
// Errors name both tensors and the shapes expected.
Result<std::vector<float>> dequantize_fp8(const TensorView& weight, const TensorView& scale_inv, int64_t block_rows,
                                          int64_t block_cols);

}  // namespace deepinfer
