// Element types of weights and activations, and the scalar conversions between them.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace deepinfer {

// kF8E4M3: float8 e4m3fn (DeepSeek-V3's block-scaled weights; a kernel operand only with its
// block scales, kernels::WeightView::scales). kU8: raw bytes (MXFP4 blocks and e8m0 scales in a
// checkpoint, weights/mxfp4.h). kMxfp4: a loaded MXFP4 weight, e2m1 codes two to a byte with
// their e8m0 scales beside them (kernels::WeightView::scales); no checkpoint dtype has this name,
// and it has no whole-byte element size (kernels::weight_bytes counts its bytes).
enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kF8E4M3, kU8, kMxfp4 };

// Bytes of one element; fails for kMxfp4 (half a byte).
size_t dtype_size_bytes(DType dtype);
std::string_view dtype_name(DType dtype);
// Parses safetensors / transformers spellings: "F32", "BF16", "float32", "bfloat16", "torch.float16", ...
std::optional<DType> find_dtype(std::string_view name);

inline float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// Round to nearest even, as PyTorch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t bits);
// float8 e4m3fn: bias 7, no infinities, S.1111.111 is NaN. A table of the 256 values: checkpoints
// dequantise billions of codes at load and fp8 KV caches widen every key they attend to.
namespace detail {
constexpr float e4m3_value(uint32_t code) {
  const uint32_t sign = (code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xfu;
  const uint32_t mantissa = code & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7fc00000u);
  if (exponent == 0)
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(static_cast<float>(mantissa) * 0x1p-9f));
  return std::bit_cast<float>(sign | ((exponent + 120) << 23) | (mantissa << 20));
}
constexpr std::array<float, 256> kE4m3Values = [] {
  std::array<float, 256> values{};
  for (uint32_t code = 0; code < values.size(); ++code) values[code] = e4m3_value(code);
  return values;
}();
}  // namespace detail
inline float f8e4m3_to_f32(uint8_t bits) { return detail::kE4m3Values[bits]; }
// The largest finite e4m3fn magnitude.
inline constexpr float kF8E4M3Max = 448.0f;
// The nearest e4m3fn value, ties to even; magnitudes past 448 saturate to 448 (as CUDA's
// __NV_SATFINITE conversions do), NaN stays NaN.
uint8_t f32_to_f8e4m3(float value);
// MXFP4's parts (the OCP Microscaling format): the value of an e2m1 code (bit 3 the sign, then
// two exponent bits and one mantissa bit), and of an e8m0 scale, 2^(bits - 127) (255 is NaN).
float e2m1_to_f32(uint8_t code);
float e8m0_to_f32(uint8_t bits);
uint16_t f32_to_f16(float value);

// Converts count elements of src (dtype) to float32.
void convert_to_f32(const void* src, DType dtype, size_t count, float* dst);

}  // namespace deepinfer
