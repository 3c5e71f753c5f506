// sample_rows on the host (kernels::cpu: draws in parallel over the reference sampler) and
// exp_f64, the exp both the host and the device sampler use: within 2 ulp of libm's, exact at 0.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/exp_f64.h"
#include "kernels/ops.h"

namespace deepinfer::kernels {
namespace {

TEST(ExpF64, WithinTwoUlpOfLibm) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> pick(-740.0, 700.0);
  for (int i = 0; i < 200000; ++i) {
    const double x = i < 1000 ? -0.001 * i : pick(rng);
    const double want = std::exp(x);
    const double ulp = std::max(std::nextafter(want, HUGE_VAL) - want, std::numeric_limits<double>::denorm_min());
    ASSERT_LE(std::fabs(exp_f64(x) - want), 2.0 * ulp) << "x = " << x;
  }
  EXPECT_EQ(exp_f64(0.0), 1.0);  // the most likely token's probability is exactly 1
  EXPECT_EQ(exp_f64(-std::numeric_limits<double>::infinity()), 0.0);
  EXPECT_EQ(exp_f64(-800.0), 0.0);
  EXPECT_TRUE(std::isnan(exp_f64(std::nan(""))));
}

TEST(SampleRows, CpuDrawsEqualReferenceDrawsRowByRow) {
  const int64_t vocab = 3001;
  const int32_t rows = 5;
  std::mt19937 rng(2);
  std::normal_distribution<float> logit(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  for (float& value : logits) value = logit(rng);
  std::vector<SampleParams> draws;
  for (int32_t d = 0; d < 40; ++d) {
    SampleParams p;
    p.row = d % rows;
    p.temperature = d % 5 == 0 ? 0.0 : 0.5 + 0.1 * (d % 7);
    p.top_k = d % 3 == 0 ? 20 : 0;
    p.top_p = d % 4 == 0 ? 0.8 : 1.0;
    p.min_p = d % 6 == 0 ? 0.05 : 0.0;
    p.u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    draws.push_back(p);
  }
  std::vector<int32_t> got(draws.size(), -1);
  cpu::sample_rows(logits.data(), vocab, draws.data(), static_cast<int64_t>(draws.size()), got.data());
  for (size_t d = 0; d < draws.size(); ++d) {
    // The reference on the row alone (row 0 of its own pointer).
    SampleParams alone = draws[d];
    alone.row = 0;
    int32_t want = -1;
    ref::sample_rows(logits.data() + int64_t{draws[d].row} * vocab, vocab, &alone, 1, &want);
    EXPECT_EQ(got[d], want) << "draw " << d;
    EXPECT_GE(got[d], 0);
    EXPECT_LT(got[d], vocab);
  }
}

TEST(SampleRows, AFailedCheckInADrawIsRethrown) {
  const int64_t vocab = 4;
  std::vector<float> logits(2 * vocab, -std::numeric_limits<float>::infinity());
  logits[0] = 1.0f;  // row 0 can be sampled, row 1 has no finite logit
  std::vector<SampleParams> draws(2);
  draws[1].row = 1;
  std::vector<int32_t> tokens(2);
  EXPECT_ANY_THROW(cpu::sample_rows(logits.data(), vocab, draws.data(), 2, tokens.data()));
}

}  // namespace
}  // namespace deepinfer::kernels
