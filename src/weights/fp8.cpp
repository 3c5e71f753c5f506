// FP8 e4m3 block dequantisation.
#include "weights/fp8.h"

#include <algorithm>
#include <cmath>

namespace deepinfer {

Result<void> check_fp8_scales(const TensorView& weight, const TensorView& scale_inv, int64_t block_rows,
                              int64_t block_cols) {
  if (weight.dtype != DType::kF8E4M3 || weight.shape.size() != 2) {
    return Error{"tensor " + weight.name + " in " + weight.file + ": expected a 2-D F8_E4M3 matrix, got " +
                 std::string(dtype_name(weight.dtype)) + " " + shape_to_string(weight.shape)};
  }
  const int64_t rows = weight.shape[0];
  const int64_t cols = weight.shape[1];
  const std::vector<int64_t> scale_shape = {(rows + block_rows - 1) / block_rows, (cols + block_cols - 1) / block_cols};
  if (scale_inv.shape != scale_shape || (scale_inv.dtype != DType::kF32 && scale_inv.dtype != DType::kBF16)) {
    return Error{"tensor " + scale_inv.name + " in " + scale_inv.file + " has " +
                 std::string(dtype_name(scale_inv.dtype)) + " " + shape_to_string(scale_inv.shape) +
                 "; expected F32 " + shape_to_string(scale_shape) + " (one scale per " + std::to_string(block_rows) +
                 "x" + std::to_string(block_cols) + " block of " + weight.name + ")"};
  }
  return {};
}

Result<std::vector<float>> dequantize_fp8(const TensorView& weight, const TensorView& scale_inv, int64_t block_rows,
                                          int64_t block_cols) {
  if (auto checked = check_fp8_scales(weight, scale_inv, block_rows, block_cols); !checked.ok()) {
    return checked.error();
  }
  const int64_t rows = weight.shape[0];
  const int64_t cols = weight.shape[1];
  const int64_t scale_cols = scale_inv.shape[1];
  std::vector<float> scales(static_cast<size_t>(scale_inv.numel()));
  convert_to_f32(scale_inv.data, scale_inv.dtype, scales.size(), scales.data());
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const auto* bits = static_cast<const uint8_t*>(weight.data);
  for (int64_t r = 0; r < rows; ++r) {
    const float* scale_row = scales.data() + (r / block_rows) * scale_cols;
    for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const float scale = scale_row[c0 / block_cols];
      for (int64_t c = c0; c < std::min(c0 + block_cols, cols); ++c) {
        out[static_cast<size_t>(r * cols + c)] = f8e4m3_to_f32(bits[r * cols + c]) * scale;
      }
    }
  }
  return out;
}

void quantize_fp8_blocks(const float* w, int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols,
                         uint8_t* codes, float* scale_inv) {
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const int64_t r_end = std::min(rows, r0 + block_rows);
      const int64_t c_end = std::min(cols, c0 + block_cols);
      float amax = 0.0f;
      for (int64_t r = r0; r < r_end; ++r) {
        for (int64_t c = c0; c < c_end; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      }
      const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
      scale_inv[(r0 / block_rows) * scale_cols + c0 / block_cols] = scale;
      for (int64_t r = r0; r < r_end; ++r) {
        for (int64_t c = c0; c < c_end; ++c) codes[r * cols + c] = f32_to_f8e4m3(w[r * cols + c] / scale);
      }
    }
  }
}

}  // namespace deepinfer
