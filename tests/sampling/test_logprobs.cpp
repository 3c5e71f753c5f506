// Logprobs: closed-form values, stability at large logits, and the top-k order.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sampling/logprobs.h"

namespace deepinfer {
namespace {

TEST(Logprobs, MatchClosedFormValues) {
  // Two tokens a logit apart: log(1 / (1 + e^-1)) and log(e^-1 / (1 + e^-1)).
  const std::vector<float> logits = {1000.0f, 999.0f};
  const TokenLogprob lp = token_logprob(logits.data(), 2, 1, 2);
  EXPECT_EQ(lp.token_id, 1);
  EXPECT_NEAR(lp.logprob, -1.0 - std::log1p(std::exp(-1.0)), 1e-12);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 0);
  EXPECT_NEAR(lp.top[0].second, -std::log1p(std::exp(-1.0)), 1e-12);
  EXPECT_EQ(lp.top[1].first, 1);
  EXPECT_EQ(lp.top[1].second, lp.logprob);

  // Four equal logits: each log(1/4).
  const std::vector<float> flat(4, -3.0f);
  EXPECT_NEAR(token_logprob(flat.data(), 4, 2, 0).logprob, -std::log(4.0), 1e-15);
}

TEST(Logprobs, TopIsLogprobDescendingWithIdsAscendingAmongTies) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f, 3.0f, -1.0f, 2.0f};
  const TokenLogprob lp = token_logprob(logits.data(), 7, 5, 4);
  std::vector<int32_t> ids;
  for (const auto& [id, logprob] : lp.top) ids.push_back(id);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 4, 2, 6}));
  const std::vector<double> all = log_softmax(logits.data(), 7);
  EXPECT_EQ(lp.logprob, all[5]);
  for (const auto& [id, logprob] : lp.top) EXPECT_EQ(logprob, all[static_cast<size_t>(id)]);
  double total = 0.0;
  for (double l : all) total += std::exp(l);
  EXPECT_NEAR(total, 1.0, 1e-12);
  // k beyond the vocabulary is clamped.
  EXPECT_EQ(top_logprobs(logits.data(), 7, 50).size(), 7u);
}

TEST(Logprobs, LargeKGivesTheSameOrderAsSmallK) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(static_cast<int>(i * 37 % 101) / 4);
  const auto small = top_logprobs(logits.data(), 1000, 20);
  const auto large = top_logprobs(logits.data(), 1000, 300);
  ASSERT_EQ(large.size(), 300u);
  for (size_t i = 0; i < small.size(); ++i) EXPECT_EQ(small[i], large[i]) << i;
  for (size_t i = 1; i < large.size(); ++i) {
    const bool ordered = large[i - 1].second > large[i].second ||
                         (large[i - 1].second == large[i].second && large[i - 1].first < large[i].first);
    EXPECT_TRUE(ordered) << i;
  }
}

TEST(Logprobs, MaskedTokensHaveMinusInfinity) {
  const std::vector<float> logits = {0.0f, -INFINITY, 0.0f};
  EXPECT_EQ(token_logprob(logits.data(), 3, 1, 3).logprob, -INFINITY);
  EXPECT_NEAR(token_logprob(logits.data(), 3, 0, 0).logprob, -std::log(2.0), 1e-15);
}

// KL(P || Q): P uniform over two tokens and Q's logits d apart give 0.5 ln (0.5 / q0) + 0.5 ln
// (0.5 / q1), whatever shift either side's logits carry (here about ln 3 apart, Q near (1/4, 3/4));
// a token P gives no mass adds nothing, one Q gives none makes it infinite.
TEST(Logprobs, KlDivergenceMatchesClosedForm) {
  const std::vector<float> reference = {0.0f, 0.0f};
  const std::vector<float> model = {1000.0f, 1000.0f + static_cast<float>(std::log(3.0))};
  const double d = static_cast<double>(model[1]) - model[0];
  const double q0 = 1.0 / (1.0 + std::exp(d));
  const double want = 0.5 * std::log(0.5 / q0) + 0.5 * std::log(0.5 / (1.0 - q0));
  EXPECT_NEAR(want, 0.5 * std::log(4.0 / 3.0), 1e-4);
  EXPECT_NEAR(kl_divergence(reference.data(), model.data(), 2), want, 1e-12);
  EXPECT_EQ(kl_divergence(model.data(), model.data(), 2), 0.0);
  const std::vector<float> reference_masked = {0.0f, 0.0f, -INFINITY};
  const std::vector<float> model_third = {model[0], model[1], 5.0f};
  EXPECT_NEAR(kl_divergence(reference_masked.data(), model_third.data(), 3), want, 1e-12);
  const std::vector<float> model_masked = {0.0f, -INFINITY};
  EXPECT_EQ(kl_divergence(reference.data(), model_masked.data(), 2), INFINITY);
}

// Entropy: ln 4 for four equal logits, 0 for one token, and the two-token closed form.
TEST(Logprobs, EntropyMatchesClosedForm) {
  const std::vector<float> flat(4, 7.0f);
  EXPECT_NEAR(entropy(flat.data(), 4), std::log(4.0), 1e-12);
  const std::vector<float> one = {0.0f, -INFINITY};
  EXPECT_EQ(entropy(one.data(), 2), 0.0);
  const std::vector<float> two = {0.0f, 1.0f};
  const double p0 = 1.0 / (1.0 + std::exp(1.0));
  EXPECT_NEAR(entropy(two.data(), 2), -p0 * std::log(p0) - (1.0 - p0) * std::log(1.0 - p0), 1e-12);
}

}  // namespace
}  // namespace deepinfer
