// Shared helpers of the kernel tests: seeded random tensors, weights in every dtype, and
// comparisons whose tolerances come from the float32 epsilon and the reduction length.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::testing {

inline constexpr double kEpsF32 = std::numeric_limits<float>::epsilon();

inline std::vector<float> random_floats(size_t count, uint32_t seed, float low = -1.0f, float high = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

inline std::vector<float> round_to_bf16(const std::vector<float>& values) {
  std::vector<float> rounded(values.size());
  for (size_t i = 0; i < values.size(); ++i) rounded[i] = bf16_to_f32(f32_to_bf16(values[i]));
  return rounded;
}

// A weight [rows, cols] stored in `dtype`; values() are the exact float32 values it holds.
class TestWeight {
 public:
  TestWeight(DType dtype, int64_t rows, int64_t cols, uint32_t seed, float low = -1.0f, float high = 1.0f)
      : dtype_(dtype), rows_(rows), cols_(cols) {
    const std::vector<float> raw = random_floats(static_cast<size_t>(rows * cols), seed, low, high);
    values_.resize(raw.size());
    if (dtype == DType::kF32) {
      values_ = raw;
      return;
    }
    bits_.resize(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      bits_[i] = dtype == DType::kBF16 ? f32_to_bf16(raw[i]) : f32_to_f16(raw[i]);
      values_[i] = dtype == DType::kBF16 ? bf16_to_f32(bits_[i]) : f16_to_f32(bits_[i]);
    }
  }

  WeightView view() const {
    const void* data = dtype_ == DType::kF32 ? static_cast<const void*>(values_.data()) : bits_.data();
    return WeightView{data, dtype_, rows_, cols_};
  }
  const std::vector<float>& values() const { return values_; }

 private:
  DType dtype_;
  int64_t rows_;
  int64_t cols_;
  std::vector<uint16_t> bits_;
  std::vector<float> values_;
};

// Expects |actual[i] - expected[i]| <= tolerance[i] everywhere; reports the worst element.
inline void expect_within(const std::vector<float>& actual, const std::vector<float>& expected,
                          const std::vector<double>& tolerance, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  size_t worst = 0;
  double worst_ratio = 0.0;
  size_t num_bad = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    const double ratio = err / tolerance[i];
    if (!(err <= tolerance[i])) ++num_bad;  // NaN counts as bad
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  EXPECT_EQ(num_bad, 0u) << what << ": worst element " << worst << " is " << actual[worst] << ", expected "
                         << expected[worst] << " (tolerance " << tolerance[worst] << ")";
}

inline void expect_within(const std::vector<float>& actual, const std::vector<float>& expected, double tolerance,
                          const std::string& what) {
  expect_within(actual, expected, std::vector<double>(actual.size(), tolerance), what);
}

// Per-output tolerance of an fp32 dot product of length k whose terms have absolute sum
// `magnitude`: 8 eps sqrt(k) magnitude (random rounding errors grow like sqrt(k)).
inline double dot_tolerance(int64_t k, double magnitude) {
  return 8.0 * kEpsF32 * std::sqrt(static_cast<double>(k)) * magnitude + std::numeric_limits<float>::denorm_min();
}

}  // namespace deepinfer::kernels::testing
