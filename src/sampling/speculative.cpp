// verify_sampled_draft: the acceptance test, then an inverse-CDF draw from the residual.
#include "sampling/speculative.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace deepinfer {

DraftVerdict verify_sampled_draft(const std::vector<double>& p, const std::vector<double>& q, int32_t draft,
                                  double u_accept, double u_resample) {
  if (p.size() != q.size() || p.empty()) {
    throw std::invalid_argument("target and draft distributions differ in size (" + std::to_string(p.size()) +
                                " and " + std::to_string(q.size()) + ")");
  }
  if (draft < 0 || static_cast<size_t>(draft) >= p.size() || !(q[static_cast<size_t>(draft)] > 0.0)) {
    throw std::invalid_argument("draft token " + std::to_string(draft) + " is not a possible draw of q");
  }
  const auto d = static_cast<size_t>(draft);
  if (u_accept * q[d] < p[d]) return {true, draft};  // u < p(d) / q(d), without dividing
  double residual_total = 0.0;
  for (size_t i = 0; i < p.size(); ++i) residual_total += std::max(0.0, p[i] - q[i]);
  // Rejection happens only where q exceeds p somewhere, so p - q is positive elsewhere; if rounding
  // left nothing, p itself is the residual's limit.
  const bool from_p = !(residual_total > 0.0);
  const double total = from_p ? 1.0 : residual_total;
  const double target = u_resample * total;
  double cumulative = 0.0;
  int32_t last_possible = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    const double mass = from_p ? p[i] : std::max(0.0, p[i] - q[i]);
    if (mass <= 0.0) continue;
    cumulative += mass;
    last_possible = static_cast<int32_t>(i);
    if (target < cumulative) return {false, last_possible};
  }
  return {false, last_possible};  // rounding left target at the very end
}

}  // namespace deepinfer
