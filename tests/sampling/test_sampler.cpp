// Sampling: determinism, the filters' exact effect, and draw frequencies against softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "sampling/sampler.h"

namespace deepinfer {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.5f, 3.0f, -1.0f};

TEST(Sampler, GreedyTakesLowestIdAmongMaxima) {
  SamplingParams greedy;
  greedy.temperature = 0.0;
  EXPECT_EQ(sample_token(kLogits.data(), 6, greedy, 0), 1);
  EXPECT_EQ(argmax(kLogits.data(), 6), 1);
}

TEST(Sampler, SameSeedAndPositionGiveTheSameToken) {
  SamplingParams p;
  p.seed = 42;
  for (int64_t pos = 0; pos < 100; ++pos) {
    EXPECT_EQ(sample_token(kLogits.data(), 6, p, pos), sample_token(kLogits.data(), 6, p, pos));
  }
}

TEST(Sampler, FrequenciesFollowSoftmax) {
  SamplingParams p;
  p.temperature = 0.7;
  p.seed = 3;
  const int kDraws = 200000;
  std::vector<int> counts(6, 0);
  for (int i = 0; i < kDraws; ++i) ++counts[static_cast<size_t>(sample_token(kLogits.data(), 6, p, i))];
  double z = 0.0;
  for (float l : kLogits) z += std::exp(l / p.temperature);
  for (size_t i = 0; i < 6; ++i) {
    const double expected = std::exp(kLogits[i] / p.temperature) / z;
    const double sigma = std::sqrt(expected * (1 - expected) / kDraws);
    EXPECT_NEAR(counts[i] / double(kDraws), expected, 5 * sigma + 1e-6) << "token " << i;
  }
}

TEST(Sampler, TopKTopPAndMinPKeepExactlyTheirCandidates) {
  std::map<int32_t, int> seen;
  SamplingParams top_k;
  top_k.top_k = 2;  // tokens 1 and 4 (tied at 3.0)
  for (int i = 0; i < 2000; ++i) ++seen[sample_token(kLogits.data(), 6, top_k, i)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen.count(1) && seen.count(4));

  seen.clear();
  SamplingParams min_p;
  min_p.min_p = 0.3;  // keeps p >= 0.3 * p_max: tokens 1, 4 (1.0) and 2 (e^-1 = 0.37)
  for (int i = 0; i < 4000; ++i) ++seen[sample_token(kLogits.data(), 6, min_p, i)];
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_TRUE(seen.count(2));

  seen.clear();
  SamplingParams top_p;
  top_p.top_p = 0.5;  // the two tokens at 3.0 hold ~0.58 of the mass; the first alone < 0.5
  for (int i = 0; i < 4000; ++i) ++seen[sample_token(kLogits.data(), 6, top_p, i)];
  EXPECT_EQ(seen.size(), 2u);
}

TEST(Sampler, TopLogprobsAreSortedAndNormalised) {
  const auto top = top_logprobs(kLogits.data(), 6, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 1);
  EXPECT_EQ(top[1].first, 4);
  EXPECT_EQ(top[2].first, 2);
  double total = 0.0;
  for (double lp : log_softmax(kLogits.data(), 6)) total += std::exp(lp);
  EXPECT_NEAR(total, 1.0, 1e-12);
}

TEST(Sampler, ValidateNamesTheBadParameter) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(p.validate().error().message.find("temperature"), std::string::npos);
  p = {};
  p.top_p = 1.5;
  EXPECT_NE(p.validate().error().message.find("top_p"), std::string::npos);
  p = {};
  p.min_p = -0.1;
  EXPECT_NE(p.validate().error().message.find("min_p"), std::string::npos);
  p = {};
  p.top_k = -2;
  EXPECT_NE(p.validate().error().message.find("top_k"), std::string::npos);
  EXPECT_TRUE(SamplingParams{}.validate().ok());
}

}  // namespace
}  // namespace deepinfer
