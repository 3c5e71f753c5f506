// Backend::gated_mlp's portable default (the host backends') against the unfused sequence of
// ref kernels on the same stacked weight.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/ops.h"
#include "runtime/backend.h"

namespace deepinfer {
namespace {

TEST(GatedMlpDefault, MatchesGateUpActivationDown) {
  const int64_t rows = 3;
  const int64_t hidden = 24;
  const int64_t intermediate = 40;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const auto random = [&](int64_t count) {
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) v = dist(rng);
    return values;
  };
  const std::vector<float> gate_up = random(2 * intermediate * hidden);  // gate rows, then up rows
  const std::vector<float> down = random(hidden * intermediate);
  const std::vector<float> x = random(rows * hidden);
  const kernels::WeightView gate_up_view{gate_up.data(), DType::kF32, 2 * intermediate, hidden};
  const kernels::WeightView gate_view{gate_up.data(), DType::kF32, intermediate, hidden};
  const kernels::WeightView up_view{gate_up.data() + intermediate * hidden, DType::kF32, intermediate, hidden};
  const kernels::WeightView down_view{down.data(), DType::kF32, hidden, intermediate};

  for (const char* name : {"cpu", "ref"}) {
    auto backend = make_backend(name);
    ASSERT_TRUE(backend.ok()) << backend.error().message;
    for (GluActivation activation : {GluActivation::kSilu, GluActivation::kGeluTanh}) {
      std::vector<float> scratch(static_cast<size_t>(2 * rows * intermediate));
      std::vector<float> out(static_cast<size_t>(rows * hidden));
      (*backend)->gated_mlp(x.data(), gate_up_view, down_view, rows, activation, scratch.data(), out.data());

      std::vector<float> g(static_cast<size_t>(rows * intermediate));
      std::vector<float> u(g.size());
      kernels::ref::matmul(x.data(), gate_view, kernels::WeightView{}, rows, g.data());
      kernels::ref::matmul(x.data(), up_view, kernels::WeightView{}, rows, u.data());
      if (activation == GluActivation::kGeluTanh) {
        kernels::ref::gelu_tanh_mul(g.data(), u.data(), rows * intermediate, g.data());
      } else {
        kernels::ref::silu_mul(g.data(), u.data(), rows * intermediate, g.data());
      }
      std::vector<float> want(out.size());
      kernels::ref::matmul(g.data(), down_view, kernels::WeightView{}, rows, want.data());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(out[i], want[i], 1e-4 * (1.0 + std::abs(want[i]))) << name << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer
