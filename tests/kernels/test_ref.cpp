// The reference kernels against closed-form values computed by hand or with libm.
#include <cmath>

#include "kernel_test_util.h"

namespace deepinfer::kernels {
namespace {

TEST(RefRope, RotateHalfRotatesPairsIAndIPlusHalf) {
  // head_dim 6, rotary_dim 4: pairs (0, 2) and (1, 3) rotate, dims 4 and 5 stay.
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  const float inv_freq[2] = {1.0f, 0.25f};
  const int32_t position = 3;
  ref::rope(x.data(), &position, 1, 1, 6, 4, inv_freq, 1.0f, RopeLayout::kRotateHalf);
  const double c0 = std::cos(3.0), s0 = std::sin(3.0), c1 = std::cos(0.75), s1 = std::sin(0.75);
  EXPECT_NEAR(x[0], 1 * c0 - 3 * s0, 1e-6);
  EXPECT_NEAR(x[2], 3 * c0 + 1 * s0, 1e-6);
  EXPECT_NEAR(x[1], 2 * c1 - 4 * s1, 1e-6);
  EXPECT_NEAR(x[3], 4 * c1 + 2 * s1, 1e-6);
  EXPECT_EQ(x[4], 5.0f);
  EXPECT_EQ(x[5], 6.0f);
}

TEST(RefRope, InterleavedRotatesAdjacentPairsAndScales) {
  std::vector<float> x = {1.0f, 0.0f, 0.0f, 1.0f, 7.0f, 8.0f};
  const float inv_freq[2] = {0.5f, 0.125f};
  const int32_t position = 2;
  ref::rope(x.data(), &position, 1, 1, 6, 4, inv_freq, 2.0f, RopeLayout::kInterleaved);
  EXPECT_NEAR(x[0], 2 * std::cos(1.0), 1e-6);
  EXPECT_NEAR(x[1], 2 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[2], -2 * std::sin(0.25), 1e-6);
  EXPECT_NEAR(x[3], 2 * std::cos(0.25), 1e-6);
  EXPECT_EQ(x[4], 7.0f);
  EXPECT_EQ(x[5], 8.0f);
}

TEST(RefRope, AngleIsRoundedToFloat32LikeTransformers) {
  // At position 100000 the float32 product differs from the exact one; the rotation must use
  // the float32 angle.
  std::vector<float> x = {1.0f, 0.0f};
  const float inv_freq[1] = {0.1f};
  const int32_t position = 100000;
  ref::rope(x.data(), &position, 1, 1, 2, 2, inv_freq, 1.0f, RopeLayout::kRotateHalf);
  const float angle = 100000.0f * 0.1f;
  EXPECT_EQ(x[0], static_cast<float>(std::cos(static_cast<double>(angle))));
  EXPECT_EQ(x[1], static_cast<float>(std::sin(static_cast<double>(angle))));
}

TEST(RefRmsNorm, KnownValuesWithOffset) {
  const float x[2] = {3.0f, 4.0f};  // mean square 12.5
  const float weight[2] = {1.0f, 0.5f};
  float out[2];
  ref::rms_norm(x, WeightView{weight, DType::kF32, 1, 2}, 1.0f, 1, 2, 0.0f, out);
  const double inv_rms = 1.0 / std::sqrt(12.5);
  EXPECT_FLOAT_EQ(out[0], static_cast<float>(3 * inv_rms * 2.0));
  EXPECT_FLOAT_EQ(out[1], static_cast<float>(4 * inv_rms * 1.5));
}

TEST(RefAddRmsNorm, UpdatesResidualThenNormalises) {
  float residual[2] = {1.0f, 1.0f};
  const float x[2] = {2.0f, 3.0f};
  const uint16_t weight[2] = {f32_to_bf16(2.0f), f32_to_bf16(2.0f)};
  float out[2];
  ref::add_rms_norm(residual, x, WeightView{weight, DType::kBF16, 1, 2}, 0.0f, 1, 2, 1e-6f, out);
  EXPECT_EQ(residual[0], 3.0f);
  EXPECT_EQ(residual[1], 4.0f);
  const double inv_rms = 1.0 / std::sqrt(12.5 + 1e-6);
  EXPECT_FLOAT_EQ(out[0], static_cast<float>(3 * inv_rms * 2));
  EXPECT_FLOAT_EQ(out[1], static_cast<float>(4 * inv_rms * 2));
}

TEST(RefSiluMul, KnownValues) {
  const float gate[3] = {0.0f, 1.0f, -2.0f};
  const float up[3] = {5.0f, 2.0f, 3.0f};
  float out[3];
  ref::silu_mul(gate, up, 3, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_FLOAT_EQ(out[1], static_cast<float>(2.0 / (1.0 + std::exp(-1.0))));
  EXPECT_FLOAT_EQ(out[2], static_cast<float>(3.0 * -2.0 / (1.0 + std::exp(2.0))));
}

TEST(RefMatmul, SmallProductWithBiasInEveryDtype) {
  // All values are exact in bf16 and f16, so every dtype gives the same exact result.
  const float x[4] = {1.0f, 2.0f, -1.0f, 0.5f};                  // [2, 2]
  const float w_f32[6] = {1.0f, 0.0f, 0.5f, 2.0f, -3.0f, 1.0f};  // [3, 2]
  const float b_f32[3] = {0.25f, 0.0f, -1.0f};
  const float expected[6] = {1.25f, 4.5f, -2.0f, -0.75f, 0.5f, 2.5f};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> w_half(6), b_half(3);
    for (int i = 0; i < 6; ++i) w_half[i] = dtype == DType::kBF16 ? f32_to_bf16(w_f32[i]) : f32_to_f16(w_f32[i]);
    for (int i = 0; i < 3; ++i) b_half[i] = dtype == DType::kBF16 ? f32_to_bf16(b_f32[i]) : f32_to_f16(b_f32[i]);
    const void* w_data = dtype == DType::kF32 ? static_cast<const void*>(w_f32) : w_half.data();
    const void* b_data = dtype == DType::kF32 ? static_cast<const void*>(b_f32) : b_half.data();
    float y[6];
    ref::matmul(x, WeightView{w_data, dtype, 3, 2}, WeightView{b_data, dtype, 1, 3}, 2, y);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], expected[i]) << dtype_name(dtype) << " element " << i;
  }
}

TEST(RefEmbedding, CopiesTheSelectedRows) {
  const uint16_t table[6] = {f32_to_f16(1.0f), f32_to_f16(2.0f),  f32_to_f16(3.0f),
                             f32_to_f16(4.0f), f32_to_f16(-5.0f), f32_to_f16(0.5f)};  // [3, 2]
  const int32_t ids[3] = {2, 0, 2};
  float out[6];
  ref::embedding(WeightView{table, DType::kF16, 3, 2}, ids, 3, out);
  const float expected[6] = {-5.0f, 0.5f, 1.0f, 2.0f, -5.0f, 0.5f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], expected[i]);
}

}  // namespace
}  // namespace deepinfer::kernels
