// ExpertLoadRecorder's ring of per-step counts, and the per-step rank balance of a placement.
#include "parallel/expert_load.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "core/check.h"

namespace deepinfer {

std::vector<int64_t> ExpertLoadWindow::totals() const {
  std::vector<int64_t> sums(static_cast<size_t>(num_experts), 0);
  for (int32_t t = 0; t < num_steps(); ++t) {
    const int32_t* row = step(t);
    for (int32_t e = 0; e < num_experts; ++e) sums[static_cast<size_t>(e)] += row[e];
  }
  return sums;
}

ExpertLoadWindow ExpertLoadWindow::slice(int32_t begin, int32_t end) const {
  DI_CHECK(0 <= begin && begin <= end && end <= num_steps(),
           "steps [" << begin << ", " << end << ") of " << num_steps());
  ExpertLoadWindow part;
  part.num_experts = num_experts;
  part.tokens.assign(tokens.begin() + static_cast<ptrdiff_t>(begin) * num_experts,
                     tokens.begin() + static_cast<ptrdiff_t>(end) * num_experts);
  return part;
}

ExpertLoadRecorder::ExpertLoadRecorder(int32_t num_moe_layers, int32_t num_experts, int32_t window_steps)
    : num_moe_layers_(num_moe_layers), num_experts_(num_experts), window_steps_(window_steps) {
  DI_CHECK(num_moe_layers >= 0 && num_experts > 0 && window_steps > 0,
           num_moe_layers << " layers, " << num_experts << " experts, window " << window_steps);
  ring_.assign(static_cast<size_t>(num_moe_layers),
               std::vector<int32_t>(static_cast<size_t>(window_steps) * num_experts, 0));
}

int32_t ExpertLoadRecorder::num_steps_in_window() const {
  return static_cast<int32_t>(std::min<int64_t>(num_steps_recorded_, window_steps_));
}

Result<void> ExpertLoadRecorder::record_step(const std::vector<std::vector<int64_t>>& tokens_per_layer) {
  if (static_cast<int32_t>(tokens_per_layer.size()) != num_moe_layers_) {
    return Error{"expert load: a step gave counts for " + std::to_string(tokens_per_layer.size()) +
                 " MoE layers, the recorder has " + std::to_string(num_moe_layers_)};
  }
  for (size_t layer = 0; layer < tokens_per_layer.size(); ++layer) {
    const std::vector<int64_t>& counts = tokens_per_layer[layer];
    if (static_cast<int32_t>(counts.size()) != num_experts_) {
      return Error{"expert load: MoE layer " + std::to_string(layer) + " gave " + std::to_string(counts.size()) +
                   " expert counts, the recorder has " + std::to_string(num_experts_) + " experts"};
    }
    for (const int64_t count : counts) {
      if (count < 0 || count > std::numeric_limits<int32_t>::max()) {
        return Error{"expert load: MoE layer " + std::to_string(layer) + " gave a step count of " +
                     std::to_string(count) + " tokens (pass one step's tokens, not a running total)"};
      }
    }
  }
  const size_t row = static_cast<size_t>(num_steps_recorded_ % window_steps_) * num_experts_;
  for (size_t layer = 0; layer < tokens_per_layer.size(); ++layer) {
    std::copy(tokens_per_layer[layer].begin(), tokens_per_layer[layer].end(), ring_[layer].begin() + row);
  }
  ++num_steps_recorded_;
  return {};
}

ExpertLoadWindow ExpertLoadRecorder::window(int32_t moe_layer) const {
  DI_CHECK(0 <= moe_layer && moe_layer < num_moe_layers_, "MoE layer " << moe_layer << " of " << num_moe_layers_);
  const std::vector<int32_t>& ring = ring_[static_cast<size_t>(moe_layer)];
  ExpertLoadWindow window;
  window.num_experts = num_experts_;
  const int32_t num_steps = num_steps_in_window();
  window.tokens.reserve(static_cast<size_t>(num_steps) * num_experts_);
  const int64_t first_step = num_steps_recorded_ - num_steps;
  for (int64_t s = first_step; s < num_steps_recorded_; ++s) {
    const auto row = ring.begin() + static_cast<ptrdiff_t>(s % window_steps_) * num_experts_;
    window.tokens.insert(window.tokens.end(), row, row + num_experts_);
  }
  return window;
}

std::vector<ExpertLoadWindow> ExpertLoadRecorder::windows() const {
  std::vector<ExpertLoadWindow> all;
  for (int32_t layer = 0; layer < num_moe_layers_; ++layer) all.push_back(window(layer));
  return all;
}

void ExpertLoadRecorder::clear() { num_steps_recorded_ = 0; }

std::vector<double> rank_loads_per_step(const ExpertPlacement& placement, const ExpertLoadWindow& trace) {
  DI_CHECK(placement.num_logical_experts == trace.num_experts,
           "placement of " << placement.num_logical_experts << " experts, trace of " << trace.num_experts);
  const std::vector<int32_t> replica_counts = placement.replica_counts();
  const int32_t num_ranks = placement.num_ranks;
  std::vector<double> loads(static_cast<size_t>(trace.num_steps()) * num_ranks, 0.0);
  for (int32_t t = 0; t < trace.num_steps(); ++t) {
    const int32_t* tokens = trace.step(t);
    double* step_loads = loads.data() + static_cast<size_t>(t) * num_ranks;
    for (int32_t p = 0; p < placement.num_physical(); ++p) {
      const int32_t logical = placement.physical_to_logical[static_cast<size_t>(p)];
      step_loads[placement.rank_of(p)] +=
          static_cast<double>(tokens[logical]) / replica_counts[static_cast<size_t>(logical)];
    }
  }
  return loads;
}

std::vector<double> busiest_over_mean_per_step(const ExpertPlacement& placement, const ExpertLoadWindow& trace,
                                               double* sum_of_step_peaks) {
  const std::vector<double> loads = rank_loads_per_step(placement, trace);
  const int32_t num_ranks = placement.num_ranks;
  std::vector<double> ratios;
  for (int32_t t = 0; t < trace.num_steps(); ++t) {
    const double* step_loads = loads.data() + static_cast<size_t>(t) * num_ranks;
    double total = 0;
    double peak = 0;
    for (int32_t r = 0; r < num_ranks; ++r) {
      total += step_loads[r];
      peak = std::max(peak, step_loads[r]);
    }
    *sum_of_step_peaks += peak;
    if (total > 0) ratios.push_back(peak / (total / num_ranks));
  }
  return ratios;
}

RankLoadBalance summarize_rank_balance(std::vector<double> ratios, double sum_of_step_peaks) {
  RankLoadBalance balance;
  balance.sum_of_step_peaks = sum_of_step_peaks;
  balance.num_steps = static_cast<int32_t>(ratios.size());
  if (ratios.empty()) return balance;
  double sum = 0;
  for (const double ratio : ratios) sum += ratio;
  balance.mean_max_over_mean = sum / static_cast<double>(ratios.size());
  std::sort(ratios.begin(), ratios.end());
  // Nearest-rank percentile: the smallest value with at least 99 % of the steps at or below it.
  const size_t p99_rank = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(ratios.size())));
  balance.p99_max_over_mean = ratios[std::max<size_t>(p99_rank, 1) - 1];
  balance.worst_max_over_mean = ratios.back();
  return balance;
}

RankLoadBalance evaluate_rank_balance(const ExpertPlacement& placement, const ExpertLoadWindow& trace) {
  double sum_of_step_peaks = 0;
  std::vector<double> ratios = busiest_over_mean_per_step(placement, trace, &sum_of_step_peaks);
  return summarize_rank_balance(std::move(ratios), sum_of_step_peaks);
}

}  // namespace deepinfer
