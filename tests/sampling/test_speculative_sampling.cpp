// verify_sampled_draft against its defining property: drafts drawn from q and verified against p
// give tokens distributed as p. 20,000 seeded draws per case, Pearson's chi-square over 8 tokens
// (7 degrees of freedom) against 20,000 p, passing below 24.32 (the 0.999 quantile: a correct rule
// fails one case in a thousand, and the seeds are fixed). Two wrong rules on the same draws must
// fail it (negative controls), and the acceptance rate is sum_i min(p_i, q_i).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>
#include <vector>

#include "sampling/speculative.h"

namespace deepinfer {
namespace {

constexpr int kVocab = 8;
constexpr int kDraws = 20000;
constexpr double kChiSquare999 = 24.32;  // chi-square, 7 degrees of freedom, 0.999 quantile

std::vector<double> normalised(std::vector<double> w) {
  double total = 0.0;
  for (double x : w) total += x;
  for (double& x : w) x /= total;
  return w;
}

using Rule = std::function<DraftVerdict(const std::vector<double>&, const std::vector<double>&, int32_t, double,
                                        double)>;

struct Outcome {
  double chi_square = 0.0;
  double acceptance = 0.0;
};

Outcome draw(const std::vector<double>& p, const std::vector<double>& q, uint64_t seed, const Rule& rule) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::discrete_distribution<int32_t> from_q(q.begin(), q.end());
  std::vector<double> counts(kVocab, 0.0);
  int accepted = 0;
  for (int i = 0; i < kDraws; ++i) {
    const int32_t d = from_q(rng);
    const double u_accept = uniform(rng);
    const double u_resample = uniform(rng);
    const DraftVerdict verdict = rule(p, q, d, u_accept, u_resample);
    counts[static_cast<size_t>(verdict.token)] += 1.0;
    accepted += verdict.accepted ? 1 : 0;
  }
  Outcome outcome;
  for (int t = 0; t < kVocab; ++t) {
    const double expected = kDraws * p[static_cast<size_t>(t)];
    outcome.chi_square += (counts[static_cast<size_t>(t)] - expected) * (counts[static_cast<size_t>(t)] - expected) /
                          expected;
  }
  outcome.acceptance = static_cast<double>(accepted) / kDraws;
  return outcome;
}

struct Case {
  const char* name;
  std::vector<double> p;
  std::vector<double> q;
};

std::vector<Case> cases() {
  return {
      {"random", normalised({3, 1, 4, 1, 5, 9, 2, 6}), normalised({2, 7, 1, 8, 2, 8, 1, 8})},
      {"q far from p", normalised({20, 10, 5, 2, 1, 1, 1, 1}), normalised({1, 1, 1, 1, 2, 5, 10, 20})},
      {"q equal to p", normalised({1, 2, 3, 4, 4, 3, 2, 1}), normalised({1, 2, 3, 4, 4, 3, 2, 1})},
  };
}

TEST(SpeculativeSampling, VerifiedSampledDraftsAreDistributedAsTheTarget) {
  uint64_t seed = 11;
  for (const Case& c : cases()) {
    const Outcome outcome = draw(c.p, c.q, seed++, verify_sampled_draft);
    EXPECT_LT(outcome.chi_square, kChiSquare999) << c.name;
    double overlap = 0.0;
    for (int t = 0; t < kVocab; ++t) overlap += std::min(c.p[static_cast<size_t>(t)], c.q[static_cast<size_t>(t)]);
    const double sigma = std::sqrt(overlap * (1.0 - overlap) / kDraws);
    EXPECT_NEAR(outcome.acceptance, overlap, 4.0 * sigma + 1e-12) << c.name;
  }
}

TEST(SpeculativeSamplingControl, WrongRulesFailTheSameTest) {
  const Case c = cases()[1];
  // Keeping every draft gives q; drawing a rejected draft's replacement from p instead of the
  // residual over-weights what q already proposed.
  const Rule keep_all = [](const std::vector<double>&, const std::vector<double>&, int32_t d, double, double) {
    return DraftVerdict{true, d};
  };
  const Rule resample_from_p = [](const std::vector<double>& p, const std::vector<double>& q, int32_t d,
                                  double u_accept, double u_resample) {
    if (u_accept * q[static_cast<size_t>(d)] < p[static_cast<size_t>(d)]) return DraftVerdict{true, d};
    double cumulative = 0.0;
    for (int32_t t = 0; t < kVocab; ++t) {
      cumulative += p[static_cast<size_t>(t)];
      if (u_resample < cumulative) return DraftVerdict{false, t};
    }
    return DraftVerdict{false, kVocab - 1};
  };
  EXPECT_GT(draw(c.p, c.q, 12, keep_all).chi_square, kChiSquare999);
  EXPECT_GT(draw(c.p, c.q, 12, resample_from_p).chi_square, kChiSquare999);
}

TEST(SpeculativeSampling, RefusesMismatchedInputs) {
  const std::vector<double> p = {0.5, 0.5};
  EXPECT_THROW(verify_sampled_draft(p, {1.0}, 0, 0.1, 0.1), std::invalid_argument);
  EXPECT_THROW(verify_sampled_draft(p, {1.0, 0.0}, 1, 0.1, 0.1), std::invalid_argument);
  EXPECT_THROW(verify_sampled_draft(p, p, 2, 0.1, 0.1), std::invalid_argument);
  const DraftVerdict kept = verify_sampled_draft(p, p, 1, 0.99, 0.0);
  EXPECT_TRUE(kept.accepted);
  EXPECT_EQ(kept.token, 1);
}

}  // namespace
}  // namespace deepinfer
