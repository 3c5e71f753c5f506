// GeLU-tanh gated product (Gemma's GeGLU), the exact GELU's, scaling and logit soft-capping: the reference against
// values computed independently, the cpu kernels against the reference over odd sizes and aliasing.
#include <algorithm>
#include <cmath>

#include "kernel_test_util.h"

namespace deepinfer::kernels {
namespace {

// PyTorch's gelu(x, approximate="tanh") in long double, written from its definition.
double gelu_tanh(double x) {
  const long double k = std::sqrt(2.0L / 3.14159265358979323846264338327950288L);
  const long double v = x;
  return static_cast<double>(0.5L * v * (1.0L + std::tanh(k * (v + 0.044715L * v * v * v))));
}

TEST(RefGeluTanhMul, KnownValues) {
  const float gate[5] = {0.0f, 1.0f, -1.0f, 3.0f, -6.0f};
  const float up[5] = {5.0f, 1.0f, 2.0f, -0.5f, 1.0f};
  float out[5];
  ref::gelu_tanh_mul(gate, up, 5, out);
  EXPECT_EQ(out[0], 0.0f);
  // torch.nn.functional.gelu(torch.tensor(1.0, dtype=torch.float64), approximate="tanh") = 0.8411919906082768
  EXPECT_FLOAT_EQ(out[1], 0.8411919906082768f);
  for (int i = 2; i < 5; ++i) EXPECT_FLOAT_EQ(out[i], static_cast<float>(gelu_tanh(gate[i]) * up[i])) << i;
}

TEST(RefGeluMul, KnownValues) {
  const float gate[5] = {0.0f, 1.0f, -1.0f, 3.0f, -9.0f};
  const float up[5] = {5.0f, 1.0f, 2.0f, -0.5f, 1.0f};
  float out[5];
  ref::gelu_mul(gate, up, 5, out);
  EXPECT_EQ(out[0], 0.0f);
  // x erfc(-x / sqrt(2)) / 2 in float64 by Python's math.erfc at 1, -1, 3 and -9.
  EXPECT_FLOAT_EQ(out[1], 0.8413447460685429f);
  EXPECT_FLOAT_EQ(out[2], -0.15865525393145707f * 2.0f);
  EXPECT_FLOAT_EQ(out[3], 2.99595030590511f * -0.5f);
  EXPECT_FLOAT_EQ(out[4], -1.015729565358458e-18f) << "no cancellation far in the negative tail";
}

TEST(GeluMul, CpuMatchesRef) {
  for (int64_t count : {1, 17, 100003}) {
    const auto gate = testing::random_floats(static_cast<size_t>(count), 28, -12.0f, 12.0f);
    const auto up = testing::random_floats(static_cast<size_t>(count), 29, -3.0f, 3.0f);
    std::vector<float> expected(gate.size());
    ref::gelu_mul(gate.data(), up.data(), count, expected.data());
    std::vector<float> actual = up;  // out aliases up
    cpu::gelu_mul(gate.data(), actual.data(), count, actual.data());
    // erfc in float32 within a few ulp, then three multiplies; in the negative tail the rounding of
    // its argument x / sqrt(2) (relative eps) moves erfc by its log-derivative, about x^2 eps.
    std::vector<double> tolerance(expected.size());
    for (size_t i = 0; i < tolerance.size(); ++i) {
      tolerance[i] = (8.0 + 2.0 * gate[i] * gate[i]) * testing::kEpsF32 * std::fabs(expected[i]);
    }
    testing::expect_within(actual, expected, tolerance, "gelu_mul count " + std::to_string(count));
  }
}

TEST(RefSoftcap, KnownValuesAndBound) {
  const float x[4] = {0.0f, 30.0f, -1000.0f, 3.0f};
  float out[4];
  ref::softcap(x, 4, 30.0f, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_FLOAT_EQ(out[1], static_cast<float>(std::tanh(1.0) * 30.0));
  EXPECT_FLOAT_EQ(out[2], -30.0f);
  EXPECT_FLOAT_EQ(out[3], static_cast<float>(std::tanh(0.1) * 30.0));
}

TEST(GeluTanhMul, CpuMatchesRef) {
  for (int64_t count : {1, 17, 4096, 100003}) {
    const auto gate = testing::random_floats(static_cast<size_t>(count), 25, -12.0f, 12.0f);
    const auto up = testing::random_floats(static_cast<size_t>(count), 26, -3.0f, 3.0f);
    std::vector<float> expected(gate.size());
    ref::gelu_tanh_mul(gate.data(), up.data(), count, expected.data());
    std::vector<float> actual = up;  // out aliases up
    cpu::gelu_tanh_mul(gate.data(), actual.data(), count, actual.data());
    // g / (1 + exp(-2y)) * up: exp within a few ulp, the cubic's roundings move y by a few ulp of
    // |y|, which moves the sigmoid by at most |y| eps relative; then one add, divide and multiply.
    std::vector<double> tolerance(expected.size());
    for (size_t i = 0; i < tolerance.size(); ++i) {
      const double y = std::fabs(0.7978845608 * (gate[i] + 0.044715 * gate[i] * gate[i] * gate[i]));
      // fast_exp clamps its argument at 88.3, so a result that underflows to 0 in float64 comes out
      // as about |g up| / e^88.3 < |g up| FLT_MIN instead.
      tolerance[i] = (8.0 + 4.0 * y) * testing::kEpsF32 * std::fabs(expected[i]) +
                     std::numeric_limits<float>::min() * std::fabs(gate[i] * up[i]);
    }
    testing::expect_within(actual, expected, tolerance, "gelu_tanh_mul count " + std::to_string(count));
  }
}

TEST(Scale, CpuMatchesRefExactly) {
  for (int64_t count : {1, 17, 100003}) {
    const auto x = testing::random_floats(static_cast<size_t>(count), 27);
    std::vector<float> expected(x.size());
    ref::scale(x.data(), count, 8.0f, expected.data());
    std::vector<float> actual = x;
    cpu::scale(actual.data(), count, 8.0f, actual.data());
    EXPECT_EQ(actual, expected);
    EXPECT_EQ(expected[0], x[0] * 8.0f);
  }
}

TEST(Softcap, CpuMatchesRef) {
  for (float cap : {30.0f, 0.5f}) {
    for (int64_t count : {1, 17, 4096, 100003}) {
      auto x = testing::random_floats(static_cast<size_t>(count), 28, -100.0f, 100.0f);
      if (count > 4) {  // tiny and huge inputs: the two sides of the polynomial / exp switch
        x[1] = 1e-30f;
        x[2] = -3e-8f;
        x[3] = 1e30f;
      }
      std::vector<float> expected(x.size());
      ref::softcap(x.data(), count, cap, expected.data());
      std::vector<float> actual = x;
      cpu::softcap(actual.data(), count, cap, actual.data());
      // A relative bound: tanh is computed to a few ulp of itself on both sides of the switch.
      std::vector<double> tolerance(expected.size());
      for (size_t i = 0; i < tolerance.size(); ++i) {
        tolerance[i] = 8.0 * testing::kEpsF32 * std::fabs(expected[i]) + std::numeric_limits<float>::denorm_min();
      }
      testing::expect_within(actual, expected, tolerance,
                             "softcap cap " + std::to_string(cap) + " count " + std::to_string(count));
    }
  }
}

}  // namespace
}  // namespace deepinfer::kernels
