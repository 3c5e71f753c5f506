// Element type names and half-precision conversions.
#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace deepinfer {

size_t dtype_size_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kF8E4M3: return 1;
    case DType::kU8: return 1;
    case DType::kMxfp4: DI_CHECK(false, "MXFP4 packs two values a byte: count its bytes with kernels::weight_bytes");
  }
  DI_CHECK(false, "unknown dtype");
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kU8: return "U8";
    case DType::kMxfp4: return "MXFP4";
  }
  DI_CHECK(false, "unknown dtype");
}

std::optional<DType> find_dtype(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  if (name == "F32" || name == "float32" || name == "float") return DType::kF32;
  if (name == "BF16" || name == "bfloat16") return DType::kBF16;
  if (name == "F16" || name == "float16" || name == "half") return DType::kF16;
  if (name == "I32" || name == "int32") return DType::kI32;
  if (name == "I64" || name == "int64") return DType::kI64;
  if (name == "F8_E4M3" || name == "float8_e4m3fn") return DType::kF8E4M3;
  if (name == "U8" || name == "uint8") return DType::kU8;
  return std::nullopt;
}

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint8_t f32_to_f8e4m3(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7fu;   // NaN
  if (abs_bits >= 0x43e00000u) return sign | 0x7eu;  // >= 448 (and infinities) saturate
  if (abs_bits < 0x3c800000u) {
    // Below 2^-6: subnormals step by 2^-9, the unit in the last place of 2^14, so adding 2^14
    // rounds to that step (nearest even) and the sum's low bits count the steps; 8 steps is 0x08.
    const float shifted = std::bit_cast<float>(abs_bits) + 0x1p14f;
    return sign | static_cast<uint8_t>(std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(0x1p14f));
  }
  // Normal: keep 3 of the 23 mantissa bits, nearest even; a carry moves into the exponent. The
  // exponent bias goes from 127 to 7: subtract 120 << 3 from the shifted bits.
  const uint32_t rounded = abs_bits + 0x7ffffu + ((abs_bits >> 20) & 1u);
  return sign | static_cast<uint8_t>((rounded >> 20) - (120u << 3));
}

float e2m1_to_f32(uint8_t code) {
  static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float magnitude = kMagnitudes[code & 0x7u];
  return (code & 0x8u) ? -magnitude : magnitude;
}

float e8m0_to_f32(uint8_t bits) {
  return bits == 255 ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, int{bits} - 127);
}

uint16_t f32_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float magnitude = std::fabs(value);
  if (std::isnan(value)) return sign | 0x7e00u;
  if (magnitude >= 65520.0f) return sign | 0x7c00u;
  if (magnitude < 6.103515625e-05f) {  // subnormal: units of 2^-24, round to nearest even
    return sign | static_cast<uint16_t>(std::nearbyint(magnitude * 16777216.0f));
  }
  uint32_t abs_bits = bits & 0x7fffffffu;
  abs_bits += 0xfffu + ((abs_bits >> 13) & 1u);
  return sign | static_cast<uint16_t>((((abs_bits >> 23) - 112) << 10) | ((abs_bits >> 13) & 0x3ffu));
}

void convert_to_f32(const void* src, DType dtype, size_t count, float* dst) {
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, count * sizeof(float)); return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = f8e4m3_to_f32(s[i]);
      return;
    }
    default: DI_CHECK(false, "convert_to_f32 does not take " << dtype_name(dtype));
  }
}

}  // namespace deepinfer
