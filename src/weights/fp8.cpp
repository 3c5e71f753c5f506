// FP8 e4m3 block dequantisation.
#include "weights/fp8.h"

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
    for (int64_t c = 0; c < cols; ++c) {
      out[static_cast<size_t>(r * cols + c)] = f8e4m3_to_f32(bits[r * cols + c]) * scale_row[c / block_cols];
    }
  }
  return out;
}

}  // namespace deepinfer
