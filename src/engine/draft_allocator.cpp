// The global sort of cumulative confidences, and the budget from the step-time curve.
#include "engine/draft_allocator.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace deepinfer {
namespace {

struct Draft {
  double cumulative;  // P of this draft
  int32_t request;
  int32_t depth;  // 0-based
};

// Every draft, best first: higher P, then lower request index, then shallower.
std::vector<Draft> ranked_drafts(const std::vector<std::vector<float>>& confidences) {
  std::vector<Draft> drafts;
  for (size_t r = 0; r < confidences.size(); ++r) {
    double cumulative = 1.0;
    for (size_t k = 0; k < confidences[r].size(); ++k) {
      // A confidence that is not a number (a draft module reading KV it never wrote) counts as 0.
      const double c = static_cast<double>(confidences[r][k]);
      cumulative *= std::isfinite(c) ? std::clamp(c, 0.0, 1.0) : 0.0;
      drafts.push_back({cumulative, static_cast<int32_t>(r), static_cast<int32_t>(k)});
    }
  }
  std::sort(drafts.begin(), drafts.end(), [](const Draft& a, const Draft& b) {
    if (a.cumulative != b.cumulative) return a.cumulative > b.cumulative;
    if (a.request != b.request) return a.request < b.request;
    return a.depth < b.depth;
  });
  return drafts;
}

}  // namespace

double step_seconds(const std::vector<StepTimePoint>& curve, int64_t rows) {
  if (curve.size() == 1) return curve.front().seconds;
  size_t hi = 1;
  while (hi + 1 < curve.size() && curve[hi].rows < rows) ++hi;
  const StepTimePoint& a = curve[hi - 1];
  const StepTimePoint& b = curve[hi];
  const double slope = (b.seconds - a.seconds) / static_cast<double>(b.rows - a.rows);
  return a.seconds + slope * static_cast<double>(rows - a.rows);
}

std::vector<int32_t> allocate_drafts(const std::vector<std::vector<float>>& confidences, int64_t draft_rows) {
  std::vector<int32_t> counts(confidences.size(), 0);
  const std::vector<Draft> drafts = ranked_drafts(confidences);
  const auto chosen = static_cast<size_t>(std::clamp<int64_t>(draft_rows, 0, static_cast<int64_t>(drafts.size())));
  // Within a request P does not rise with depth and ties go to the shallower draft, so the chosen
  // drafts of each request are a prefix of its chain and counting them is enough.
  for (size_t i = 0; i < chosen; ++i) ++counts[static_cast<size_t>(drafts[i].request)];
  return counts;
}

int64_t choose_verify_rows(const std::vector<std::vector<float>>& confidences,
                           const std::vector<StepTimePoint>& curve) {
  const auto golden = static_cast<int64_t>(confidences.size());
  const std::vector<Draft> drafts = ranked_drafts(confidences);
  const int64_t all_rows = golden + static_cast<int64_t>(drafts.size());
  if (curve.empty()) return all_rows;
  for (size_t i = 1; i < curve.size(); ++i) {
    DI_CHECK(curve[i].rows > curve[i - 1].rows, "the step-time curve's points must rise in rows");
  }
  int64_t best_rows = golden;
  double best_rate = -1.0;
  double expected = static_cast<double>(golden);
  for (int64_t rows = golden; rows <= all_rows; ++rows) {
    if (rows > golden) expected += drafts[static_cast<size_t>(rows - golden - 1)].cumulative;
    const double seconds = step_seconds(curve, rows);
    DI_CHECK(seconds > 0.0, "the step-time curve gives " << seconds << " s at " << rows << " rows");
    const double rate = expected / seconds;
    if (rate > best_rate) {
      best_rate = rate;
      best_rows = rows;
    }
  }
  return best_rows;
}

}  // namespace deepinfer
