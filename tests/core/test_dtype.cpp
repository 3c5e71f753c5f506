// Half-precision conversions against IEEE 754 facts (exhaustive over all 16-bit patterns).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"

namespace deepinfer {
namespace {

TEST(DType, F16RoundTripsEveryBitPattern) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const float value = f16_to_f32(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(value))));
      continue;
    }
    EXPECT_EQ(f32_to_f16(value), bits) << "bits " << bits;
  }
}

TEST(DType, F16KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);                    // overflow -> inf
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie rounds to even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties go to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const float value = bf16_to_f32(static_cast<uint16_t>(bits));
    if (!std::isnan(value)) {
      EXPECT_EQ(f32_to_bf16(value), bits);
    }
  }
}

TEST(DType, F8E4M3RoundsToNearestEvenAndSaturates) {
  for (uint32_t bits = 0; bits <= 0xffu; ++bits) {
    const float value = f8e4m3_to_f32(static_cast<uint8_t>(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(f8e4m3_to_f32(f32_to_f8e4m3(value))));
      continue;
    }
    EXPECT_EQ(f32_to_f8e4m3(value), bits) << "bits " << bits;
  }
  // Values PyTorch's float8_e4m3fn gives.
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(0.1f)), 0.1015625f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(-3.3f)), -3.25f);
  EXPECT_EQ(f32_to_f8e4m3(1.0f + 1.0f / 16), 0x38);  // halfway between 1 and 1.125: even mantissa
  EXPECT_EQ(f32_to_f8e4m3(1.0f + 3.0f / 16), 0x3a);
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: even
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(3.0f, -10)), 0x02);
  EXPECT_EQ(f32_to_f8e4m3(0.0157f), 0x08);  // subnormal range rounding up into the first normal
  EXPECT_EQ(f32_to_f8e4m3(1e6f), 0x7e);     // saturates at 448
  EXPECT_EQ(f32_to_f8e4m3(-460.0f), 0xfe);
}

// Every pair of neighbouring e4m3 values, both signs: the midpoint goes to the even code, a float
// either side of it to the nearer value (the OCP FP8 rounding, which the encoder's bit arithmetic
// must reproduce in the subnormal, normal and top binades alike).
TEST(DType, F8E4M3MidpointsRoundToEven) {
  for (uint32_t code = 0; code < 0x7e; ++code) {
    const float low = f8e4m3_to_f32(static_cast<uint8_t>(code));
    const float high = f8e4m3_to_f32(static_cast<uint8_t>(code + 1));
    const float mid = (low + high) / 2;  // exact: e4m3 values have 4 significant bits
    for (const float sign : {1.0f, -1.0f}) {
      const auto sign_bit = static_cast<uint8_t>(sign < 0 ? 0x80 : 0);
      const auto even = static_cast<uint8_t>(code % 2 == 0 ? code : code + 1);
      EXPECT_EQ(f32_to_f8e4m3(sign * mid), sign_bit | even) << "code " << code;
      EXPECT_EQ(f32_to_f8e4m3(sign * std::nextafter(mid, 0.0f)), sign_bit | code) << "code " << code;
      EXPECT_EQ(f32_to_f8e4m3(sign * std::nextafter(mid, 1000.0f)), sign_bit | (code + 1)) << "code " << code;
    }
  }
}

TEST(DType, ParsesBothSpellings) {
  EXPECT_EQ(find_dtype("BF16"), DType::kBF16);
  EXPECT_EQ(find_dtype("torch.bfloat16"), DType::kBF16);
  EXPECT_EQ(find_dtype("float16"), DType::kF16);
  EXPECT_EQ(find_dtype("F32"), DType::kF32);
  EXPECT_EQ(find_dtype("F8_E4M3"), DType::kF8E4M3);  // DeepSeek-V3's block-scaled fp8 weights
  EXPECT_FALSE(find_dtype("F8_E5M2").has_value());
}

}  // namespace
}  // namespace deepinfer
