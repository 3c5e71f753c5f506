// Reference row payloads of expert-parallel exchanges (kernels/ops.h pack_rows / unpack_rows).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::ref {

void pack_rows(const float* x, int64_t num_rows, int64_t width, DType dtype, void* out) {
  DI_CHECK(is_payload_dtype(dtype), "row payloads are F32, BF16 or F8_E4M3, not " << dtype_name(dtype));
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* row = x + r * width;
    if (dtype == DType::kF32) {
      std::memcpy(static_cast<float*>(out) + r * width, row, static_cast<size_t>(width) * sizeof(float));
    } else if (dtype == DType::kBF16) {
      uint16_t* dst = static_cast<uint16_t*>(out) + r * width;
      for (int64_t i = 0; i < width; ++i) dst[i] = f32_to_bf16(row[i]);
    } else {
      uint8_t* codes = static_cast<uint8_t*>(out) + r * payload_row_bytes(dtype, width);
      std::memset(codes, 0, static_cast<size_t>(payload_scales_offset(width)));
      for (int64_t begin = 0; begin < width; begin += kPayloadBlock) {
        const int64_t end = std::min(begin + kPayloadBlock, width);
        float max_abs = 0.0f;
        for (int64_t i = begin; i < end; ++i) max_abs = std::max(max_abs, std::fabs(row[i]));
        const float scale = std::min(std::max(max_abs / kF8E4M3Max, FLT_MIN), FLT_MAX / kF8E4M3Max);
        std::memcpy(codes + payload_scales_offset(width) + begin / kPayloadBlock * 4, &scale, sizeof(scale));
        for (int64_t i = begin; i < end; ++i) codes[i] = f32_to_f8e4m3(row[i] / scale);
      }
    }
  }
}

void unpack_rows(const void* packed, int64_t num_rows, int64_t width, DType dtype, float* out) {
  DI_CHECK(is_payload_dtype(dtype), "row payloads are F32, BF16 or F8_E4M3, not " << dtype_name(dtype));
  for (int64_t r = 0; r < num_rows; ++r) {
    float* row = out + r * width;
    if (dtype == DType::kF32) {
      std::memcpy(row, static_cast<const float*>(packed) + r * width, static_cast<size_t>(width) * sizeof(float));
    } else if (dtype == DType::kBF16) {
      const uint16_t* src = static_cast<const uint16_t*>(packed) + r * width;
      for (int64_t i = 0; i < width; ++i) row[i] = bf16_to_f32(src[i]);
    } else {
      const uint8_t* codes = static_cast<const uint8_t*>(packed) + r * payload_row_bytes(dtype, width);
      for (int64_t i = 0; i < width; ++i) {
        float scale = 0.0f;
        std::memcpy(&scale, codes + payload_scales_offset(width) + i / kPayloadBlock * 4, sizeof(scale));
        row[i] = f8e4m3_to_f32(codes[i]) * scale;
      }
    }
  }
}

}  // namespace deepinfer::kernels::ref
