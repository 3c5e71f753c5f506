// MXFP4 dequantisation.
#include "weights/mxfp4.h"

namespace deepinfer {
namespace {
constexpr int64_t kGroupBytes = 16;
}  // namespace

Result<void> check_mxfp4(const TensorView& blocks, const TensorView& scales) {
  if (blocks.dtype != DType::kU8 || blocks.shape.size() != 4 || blocks.shape[3] != kGroupBytes) {
    return Error{"tensor " + blocks.name + " in " + blocks.file + ": expected MXFP4 blocks, U8 [n, rows, groups, 16], got " +
                 std::string(dtype_name(blocks.dtype)) + " " + shape_to_string(blocks.shape)};
  }
  const std::vector<int64_t> scale_shape = {blocks.shape[0], blocks.shape[1], blocks.shape[2]};
  if (scales.dtype != DType::kU8 || scales.shape != scale_shape) {
    return Error{"tensor " + scales.name + " in " + scales.file + " has " + std::string(dtype_name(scales.dtype)) +
                 " " + shape_to_string(scales.shape) + "; expected U8 " + shape_to_string(scale_shape) +
                 " (one e8m0 scale per 32 values of " + blocks.name + ")"};
  }
  return {};
}

Result<std::vector<float>> dequantize_mxfp4(const TensorView& blocks, const TensorView& scales, int64_t index) {
  if (auto checked = check_mxfp4(blocks, scales); !checked.ok()) return checked.error();
  if (index < 0 || index >= blocks.shape[0]) {
    return Error{"tensor " + blocks.name + ": matrix " + std::to_string(index) + " of " +
                 std::to_string(blocks.shape[0])};
  }
  const int64_t rows = blocks.shape[1];
  const int64_t groups = blocks.shape[2];
  const auto* block_bytes = static_cast<const uint8_t*>(blocks.data) + index * rows * groups * kGroupBytes;
  const auto* scale_bytes = static_cast<const uint8_t*>(scales.data) + index * rows * groups;
  std::vector<float> out(static_cast<size_t>(rows * groups * 2 * kGroupBytes));
  for (int64_t g = 0; g < rows * groups; ++g) {
    const float scale = e8m0_to_f32(scale_bytes[g]);
    float* dst = out.data() + g * 2 * kGroupBytes;
    for (int64_t j = 0; j < kGroupBytes; ++j) {
      const uint8_t byte = block_bytes[g * kGroupBytes + j];
      dst[2 * j] = e2m1_to_f32(byte & 0xfu) * scale;
      dst[2 * j + 1] = e2m1_to_f32(byte >> 4) * scale;
    }
  }
  return out;
}

}  // namespace deepinfer
