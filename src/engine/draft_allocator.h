// DSpark's verification budget (issue 22): which drafts a step verifies. Every request verifies its
// golden row; a request's k-th draft is accepted, given that the ones before it were, with the
// confidence head's estimate c_k, so it adds P_k = c_1 * ... * c_k expected tokens. The step's
// extra rows go to the drafts of highest P across all requests (P only falls along a chain, so
// each request gets a prefix), and the number of rows is the one that maximises expected tokens
// per unit of step time on the decode step-time curve profiled at start-up.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

// Per request, its drafts' confidences in chain order (each clamped to [0, 1]; not a number: 0). Returns per
// request how many of its drafts to verify: the draft_rows drafts of highest cumulative product,
// ties going to the lower request index, then the shallower draft; all of them when draft_rows
// covers them.
std::vector<int32_t> allocate_drafts(const std::vector<std::vector<float>>& confidences, int64_t draft_rows);

// A decode step's time at a number of query rows, measured: points ascending in rows.
struct StepTimePoint {
  int64_t rows = 0;
  double seconds = 0.0;
};

// The curve's time at rows: linear between its points, extended from its last two (or its one
// point's time). curve must not be empty.
double step_seconds(const std::vector<StepTimePoint>& curve, int64_t rows);

// The step's total rows (golden rows included: at least confidences.size()) that maximise
// expected tokens / step time, the time interpolated linearly between the curve's points and
// extended from its last two; the fewest rows among equals. An empty curve: every draft.
int64_t choose_verify_rows(const std::vector<std::vector<float>>& confidences,
                           const std::vector<StepTimePoint>& curve);

}  // namespace deepinfer
