// Backend::head_matmul's portable default (the host backends', and CUDA's batch-invariant mode)
// against the products summed in double over strided, padded rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "head_products_case.h"
#include "runtime/backend.h"

namespace deepinfer {
namespace {

TEST(HeadMatmulDefault, MatchesEachHeadsProductAndLeavesPaddingAlone) {
  testing::HeadProductsCase c;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const auto random = [&](int64_t count) {
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) v = dist(rng);
    return values;
  };
  const std::vector<float> w = random(c.w_floats());
  const std::vector<float> x = random(c.x_floats());
  const std::vector<float> y_before = random(c.y_floats());
  const std::vector<float> want = c.expected(x, w, y_before);

  for (const char* name : {"cpu", "ref"}) {
    auto backend = make_backend(name);
    ASSERT_TRUE(backend.ok()) << backend.error().message;
    std::vector<float> y = y_before;
    std::vector<float> scratch(static_cast<size_t>(c.rows * (c.k + c.n)));
    const kernels::WeightView view{w.data(), DType::kF32, c.n, c.k};
    (*backend)->head_matmul(c.products(x.data(), view, y.data()), scratch.data());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(y[i], want[i], 1e-5 * (1.0 + std::abs(want[i]))) << name << " element " << i;
    }
  }
}

}  // namespace
}  // namespace deepinfer
