// The element-wise and row-wise cpu ops against ref: embedding, rms_norm, layer_norm, add_rms_norm, rope,
// silu_mul, add, over odd sizes, every weight dtype, aliased outputs and both rope layouts.
#include <cmath>

#include "kernel_test_util.h"

namespace deepinfer::kernels {
namespace {

using testing::TestWeight;

const DType kWeightTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

TEST(Embedding, CpuCopiesRowsExactly) {
  for (DType dtype : kWeightTypes) {
    for (int64_t dim : {1, 17, 64, 4097}) {
      const TestWeight table(dtype, 50, dim, 3);
      const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1, 48, 30, 2, 11, 19, 5, 6, 44, 45, 46, 47, 12, 13};
      std::vector<float> expected(ids.size() * static_cast<size_t>(dim)), actual(expected.size());
      ref::embedding(table.view(), ids.data(), static_cast<int64_t>(ids.size()), expected.data());
      cpu::embedding(table.view(), ids.data(), static_cast<int64_t>(ids.size()), actual.data());
      EXPECT_EQ(actual, expected) << dtype_name(dtype) << " dim " << dim;
    }
  }
}

// ref computes the norm in float64; cpu sums squares in fp32 lanes (relative error ~ eps sqrt(dim),
// halved by the square root) and scales with two fp32 roundings.
std::vector<double> norm_tolerance(const std::vector<float>& expected, int64_t dim) {
  std::vector<double> tolerance(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    tolerance[i] = (4.0 * std::sqrt(static_cast<double>(dim)) + 4.0) * testing::kEpsF32 * std::fabs(expected[i]) +
                   std::numeric_limits<float>::denorm_min();
  }
  return tolerance;
}

TEST(RmsNorm, CpuMatchesRef) {
  for (DType dtype : kWeightTypes) {
    for (int64_t dim : {1, 17, 128, 4096, 4097}) {
      for (int64_t rows : {1, 5, 33}) {
        for (float offset : {0.0f, 1.0f}) {
          const TestWeight weight(dtype, 1, dim, 5);
          const auto x = testing::random_floats(static_cast<size_t>(rows * dim), 6, -4.0f, 4.0f);
          std::vector<float> expected(x.size());
          ref::rms_norm(x.data(), weight.view(), offset, rows, dim, 1e-6f, expected.data());
          std::vector<float> actual = x;  // in place: out aliases x
          cpu::rms_norm(actual.data(), weight.view(), offset, rows, dim, 1e-6f, actual.data());
          testing::expect_within(actual, expected, norm_tolerance(expected, dim),
                                 std::string("rms_norm ") + std::string(dtype_name(dtype)) + " dim " +
                                     std::to_string(dim) + " rows " + std::to_string(rows));
        }
      }
    }
  }
}

// LayerNorm against a hand computation, and the CPU's (the reference's rows, run in parallel with
// the weights converted once) against the reference's, bit for bit, in place.
TEST(LayerNorm, RefMatchesHandComputationAndCpuMatchesRef) {
  // [1, 2, 3, 6]: mean 3, biased variance (4 + 1 + 0 + 9) / 4 = 3.5.
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, 6.0f};
  const std::vector<float> w = {1.0f, 2.0f, 0.5f, -1.0f}, b = {0.0f, 1.0f, -1.0f, 0.25f};
  const WeightView wv{w.data(), DType::kF32, 1, 4}, bv{b.data(), DType::kF32, 1, 4};
  std::vector<float> out(4);
  ref::layer_norm(x.data(), wv, bv, 1, 4, 0.5f, out.data());
  const double inv_std = 1.0 / std::sqrt(3.5 + 0.5);  // 0.5: eps
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(out[i], static_cast<float>((x[i] - 3.0) * inv_std * w[i] + b[i])) << i;
  }
  for (DType dtype : kWeightTypes) {
    for (int64_t dim : {1, 17, 1152, 4097}) {
      const TestWeight weight(dtype, 1, dim, 5), bias(dtype, 1, dim, 6);
      const auto rows_in = testing::random_floats(static_cast<size_t>(33 * dim), 7, -4.0f, 40.0f);
      std::vector<float> expected(rows_in.size());
      ref::layer_norm(rows_in.data(), weight.view(), bias.view(), 33, dim, 1e-6f, expected.data());
      std::vector<float> actual = rows_in;  // in place: out aliases x
      cpu::layer_norm(actual.data(), weight.view(), bias.view(), 33, dim, 1e-6f, actual.data());
      EXPECT_EQ(actual, expected) << dtype_name(dtype) << " dim " << dim;
    }
  }
}

TEST(AddRmsNorm, CpuMatchesRef) {
  for (DType dtype : kWeightTypes) {
    for (int64_t dim : {3, 64, 4097}) {
      for (int64_t rows : {1, 2, 33, 128}) {
        const TestWeight weight(dtype, 1, dim, 8);
        const auto x = testing::random_floats(static_cast<size_t>(rows * dim), 9);
        const auto residual = testing::random_floats(static_cast<size_t>(rows * dim), 10);
        std::vector<float> residual_ref = residual, residual_cpu = residual;
        std::vector<float> expected(x.size());
        ref::add_rms_norm(residual_ref.data(), x.data(), weight.view(), 0.0f, rows, dim, 1e-5f, expected.data());
        std::vector<float> actual = x;  // out aliases x
        cpu::add_rms_norm(residual_cpu.data(), actual.data(), weight.view(), 0.0f, rows, dim, 1e-5f, actual.data());
        EXPECT_EQ(residual_cpu, residual_ref) << "residual, dim " << dim;
        testing::expect_within(
            actual, expected, norm_tolerance(expected, dim),
            std::string("add_rms_norm ") + std::string(dtype_name(dtype)) + " dim " + std::to_string(dim));
      }
    }
  }
}

TEST(Rope, CpuMatchesRef) {
  struct Case {
    int32_t head_dim;
    int32_t rotary_dim;
  };
  for (RopeLayout layout : {RopeLayout::kRotateHalf, RopeLayout::kInterleaved}) {
    for (Case c : {Case{16, 16}, Case{64, 64}, Case{128, 128}, Case{128, 64}, Case{80, 32}, Case{64, 2}}) {
      for (int64_t num_tokens : {1, 7, 300}) {
        const int32_t num_heads = 3;
        const float scaling = num_tokens == 7 ? 1.2f : 1.0f;
        std::vector<float> inv_freq(static_cast<size_t>(c.rotary_dim / 2));
        for (size_t i = 0; i < inv_freq.size(); ++i) {
          inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / c.rotary_dim));
        }
        std::vector<int32_t> positions(static_cast<size_t>(num_tokens));
        for (size_t t = 0; t < positions.size(); ++t) positions[t] = static_cast<int32_t>(t * 977 % 131072);
        const auto x = testing::random_floats(static_cast<size_t>(num_tokens * num_heads * c.head_dim), 14);
        std::vector<float> expected = x, actual = x;
        ref::rope(expected.data(), positions.data(), num_tokens, num_heads, c.head_dim, c.rotary_dim, inv_freq.data(),
                  scaling, layout);
        cpu::rope(actual.data(), positions.data(), num_tokens, num_heads, c.head_dim, c.rotary_dim, inv_freq.data(),
                  scaling, layout);
        // Identical cos/sin; x0 c - x1 s may be fused into one FMA on the cpu: a few roundings of
        // terms no larger than scaling * (|x0| + |x1|) <= 2 scaling.
        testing::expect_within(actual, expected, 4.0 * testing::kEpsF32 * 2.0 * scaling,
                               std::string(layout == RopeLayout::kRotateHalf ? "rotate-half" : "interleaved") +
                                   " head_dim " + std::to_string(c.head_dim) + " rotary " +
                                   std::to_string(c.rotary_dim) + " tokens " + std::to_string(num_tokens));
      }
    }
  }
}

TEST(SiluMul, CpuMatchesRef) {
  for (int64_t count : {1, 17, 4096, 100003}) {
    const auto gate = testing::random_floats(static_cast<size_t>(count), 15, -30.0f, 30.0f);
    const auto up = testing::random_floats(static_cast<size_t>(count), 16, -3.0f, 3.0f);
    std::vector<float> expected(gate.size());
    ref::silu_mul(gate.data(), up.data(), count, expected.data());
    std::vector<float> actual = gate;  // out aliases gate
    cpu::silu_mul(actual.data(), up.data(), count, actual.data());
    // exp is within a few ulp, then one add, one divide, one multiply.
    std::vector<double> tolerance(expected.size());
    for (size_t i = 0; i < tolerance.size(); ++i) {
      tolerance[i] = 8.0 * testing::kEpsF32 * std::fabs(expected[i]) + std::numeric_limits<float>::denorm_min();
    }
    testing::expect_within(actual, expected, tolerance, "silu_mul count " + std::to_string(count));
  }
}

TEST(Add, CpuMatchesRefExactly) {
  for (int64_t count : {1, 17, 100003}) {
    const auto a = testing::random_floats(static_cast<size_t>(count), 17);
    const auto b = testing::random_floats(static_cast<size_t>(count), 18);
    std::vector<float> expected(a.size());
    ref::add(a.data(), b.data(), count, expected.data());
    std::vector<float> actual = b;  // out aliases b
    cpu::add(a.data(), actual.data(), count, actual.data());
    EXPECT_EQ(actual, expected);
  }
}

}  // namespace
}  // namespace deepinfer::kernels
