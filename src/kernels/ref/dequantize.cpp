// Reference dequantisation of weight rows (plain, block-quantised or not).
#include "kernels/ref/dequantize.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer::kernels::ref {

void dequantize_weight_row(const WeightView& w, int64_t row, float* dst) {
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  if (w.dtype == DType::kF8E4M3) {
    DI_CHECK(w.scales != nullptr, "an F8_E4M3 weight needs its block scales");
    DI_CHECK(w.scale_block_rows > 0 && w.scale_block_cols > 0, "an F8_E4M3 weight needs its scale block size");
    const float* scale_row = static_cast<const float*>(w.scales) + row / w.scale_block_rows * block_scale_row_stride(w);
    for (int64_t k0 = 0; k0 < w.cols; k0 += w.scale_block_cols) {
      const float scale = scale_row[k0 / w.scale_block_cols];
      for (int64_t k = k0; k < std::min<int64_t>(k0 + w.scale_block_cols, w.cols); ++k) {
        dst[k] = f8e4m3_to_f32(bytes[row * w.cols + k]) * scale;
      }
    }
    return;
  }
  if (w.dtype == DType::kMxfp4) {
    DI_CHECK(w.scales != nullptr && w.cols % kMxfp4Block == 0, "an MXFP4 weight needs whole blocks and their scales");
    const uint8_t* codes = bytes + row * (w.cols / 2);
    const uint8_t* scales = static_cast<const uint8_t*>(w.scales) + row * (w.cols / kMxfp4Block);
    for (int64_t k = 0; k < w.cols; ++k) {
      const uint8_t code = k % 2 == 0 ? codes[k / 2] & 0xfu : codes[k / 2] >> 4;
      dst[k] = e2m1_to_f32(code) * e8m0_to_f32(scales[k / kMxfp4Block]);
    }
    return;
  }
  const size_t row_bytes = static_cast<size_t>(w.cols) * dtype_size_bytes(w.dtype);
  convert_to_f32(bytes + static_cast<size_t>(row) * row_bytes, w.dtype, static_cast<size_t>(w.cols), dst);
}

}  // namespace deepinfer::kernels::ref
