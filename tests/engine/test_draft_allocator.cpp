// DSpark's allocator against brute force on random inputs: per request a prefix of its chain, the
// budget spent exactly, the largest expected number of accepted drafts of any such allocation,
// ties broken by request then depth; and the row count chosen from a step-time curve against a
// direct search of expected tokens per second.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include "engine/draft_allocator.h"

namespace deepinfer {
namespace {

double expected_drafts(const std::vector<std::vector<float>>& confidences, const std::vector<int32_t>& counts) {
  double total = 0.0;
  for (size_t r = 0; r < confidences.size(); ++r) {
    double cumulative = 1.0;
    for (int32_t k = 0; k < counts[r]; ++k) {
      cumulative *= std::clamp(static_cast<double>(confidences[r][static_cast<size_t>(k)]), 0.0, 1.0);
      total += cumulative;
    }
  }
  return total;
}

// The best expected drafts over every choice of prefixes with `rows` drafts in all.
double brute_force_best(const std::vector<std::vector<float>>& confidences, int64_t rows) {
  std::vector<int32_t> counts(confidences.size(), 0);
  double best = -1.0;
  std::function<void(size_t, int64_t)> visit = [&](size_t r, int64_t left) {
    if (r == confidences.size()) {
      if (left == 0) best = std::max(best, expected_drafts(confidences, counts));
      return;
    }
    for (int32_t k = 0; k <= static_cast<int32_t>(confidences[r].size()) && k <= left; ++k) {
      counts[r] = k;
      visit(r + 1, left - k);
    }
    counts[r] = 0;
  };
  visit(0, rows);
  return best;
}

std::vector<std::vector<float>> random_confidences(std::mt19937& rng) {
  std::uniform_int_distribution<int> requests(1, 5);
  std::uniform_int_distribution<int> depth(0, 4);
  std::uniform_real_distribution<float> confidence(0.05f, 1.0f);
  std::vector<std::vector<float>> confidences(static_cast<size_t>(requests(rng)));
  for (auto& chain : confidences) {
    chain.resize(static_cast<size_t>(depth(rng)));
    for (float& c : chain) c = confidence(rng);
  }
  return confidences;
}

TEST(DraftAllocator, PrefixesThatSpendTheBudgetAndMaximiseExpectedDrafts) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const auto confidences = random_confidences(rng);
    int64_t total = 0;
    for (const auto& chain : confidences) total += static_cast<int64_t>(chain.size());
    for (int64_t budget = 0; budget <= total + 1; ++budget) {
      const std::vector<int32_t> counts = allocate_drafts(confidences, budget);
      ASSERT_EQ(counts.size(), confidences.size());
      EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), std::min(budget, total));
      for (size_t r = 0; r < counts.size(); ++r) EXPECT_LE(counts[r], static_cast<int32_t>(confidences[r].size()));
      EXPECT_NEAR(expected_drafts(confidences, counts), brute_force_best(confidences, std::min(budget, total)), 1e-9)
          << "trial " << trial << ", budget " << budget;
    }
  }
}

TEST(DraftAllocator, TiesGoToTheLowerRequestThenTheShallowerDraft) {
  const std::vector<std::vector<float>> halves = {{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f}, {0.5f}};
  EXPECT_EQ(allocate_drafts(halves, 4), (std::vector<int32_t>{2, 1, 1}));
  const std::vector<std::vector<float>> certain = {{1.0f, 1.0f}, {1.0f, 1.0f}};
  EXPECT_EQ(allocate_drafts(certain, 3), (std::vector<int32_t>{2, 1}));
  // Out-of-range confidences are clamped: above 1 counts as 1, below 0 as 0.
  const std::vector<std::vector<float>> odd = {{-0.5f}, {1.5f}, {0.9f}};
  EXPECT_EQ(allocate_drafts(odd, 2), (std::vector<int32_t>{0, 1, 1}));
  EXPECT_EQ(allocate_drafts({}, 5), std::vector<int32_t>{});
}

TEST(DraftAllocator, VerifyRowsMaximiseExpectedTokensPerSecond) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> per_row(0.0, 2e-4);
  for (int trial = 0; trial < 200; ++trial) {
    const auto confidences = random_confidences(rng);
    const auto golden = static_cast<int64_t>(confidences.size());
    int64_t total = golden;
    for (const auto& chain : confidences) total += static_cast<int64_t>(chain.size());
    // A rising curve over a few points; the search extends it past the last.
    std::vector<StepTimePoint> curve = {{1, 1e-3}};
    for (int64_t rows = 4; rows <= 16; rows *= 2) curve.push_back({rows, curve.back().seconds + per_row(rng) * rows});
    const int64_t chosen = choose_verify_rows(confidences, curve);
    // Direct: expected tokens of the best allocation at each row count, over the interpolated time.
    const auto seconds = [&](int64_t rows) {
      size_t hi = 1;
      while (hi + 1 < curve.size() && curve[hi].rows < rows) ++hi;
      const StepTimePoint& a = curve[hi - 1];
      const StepTimePoint& b = curve[hi];
      const double fraction = static_cast<double>(rows - a.rows) / static_cast<double>(b.rows - a.rows);
      return a.seconds + (b.seconds - a.seconds) * fraction;
    };
    int64_t best_rows = golden;
    double best_rate = -1.0;
    for (int64_t rows = golden; rows <= total; ++rows) {
      const double tokens = static_cast<double>(golden) + brute_force_best(confidences, rows - golden);
      const double rate = tokens / seconds(rows);
      if (rate > best_rate + 1e-12) {
        best_rate = rate;
        best_rows = rows;
      }
    }
    EXPECT_EQ(chosen, best_rows) << "trial " << trial;
  }
  const std::vector<std::vector<float>> confidences = {{0.9f, 0.8f}, {0.7f}};
  EXPECT_EQ(choose_verify_rows(confidences, {}), 5) << "no curve: every draft";
  EXPECT_EQ(choose_verify_rows(confidences, {{1, 1e-3}, {2, 1e-3}}), 5) << "rows cost nothing: every draft";
  EXPECT_EQ(choose_verify_rows(confidences, {{1, 1e-3}, {2, 1e-2}}), 2) << "steep: golden rows only";
}

}  // namespace
}  // namespace deepinfer
