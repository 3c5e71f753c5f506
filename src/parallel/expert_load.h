// Expert load statistics for EPLB: per MoE layer and per step, the tokens routed to each
// logical expert, kept over a sliding window of the last steps (ExpertLoadRecorder); and the
// measure a placement is judged by, the busiest rank's load over the mean rank load per step.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"
#include "parallel/expert_placement.h"

namespace deepinfer {

// `--eplb-window`: steps of statistics a placement is fitted to (the seeds' 1000).
constexpr int32_t kDefaultEplbWindowSteps = 1000;

// One MoE layer's routing over consecutive steps, oldest first. int32 counts: a step routes far
// fewer than 2^31 tokens, and a 1000-step window of a 61-layer, 256-expert model stays at 62 MB.
struct ExpertLoadWindow {
  int32_t num_experts = 0;
  std::vector<int32_t> tokens;  // [num_steps, num_experts] tokens routed to each logical expert

  int32_t num_steps() const { return num_experts == 0 ? 0 : static_cast<int32_t>(tokens.size() / num_experts); }
  const int32_t* step(int32_t step_index) const {
    return tokens.data() + static_cast<size_t>(step_index) * num_experts;
  }
  // [num_experts] tokens summed over the steps.
  std::vector<int64_t> totals() const;
  // Steps [begin, end) as a window of their own.
  ExpertLoadWindow slice(int32_t begin, int32_t end) const;
};

// Keeps the last window_steps steps of every MoE layer in a ring. Not thread-safe: the engine
// thread that runs the steps owns it.
class ExpertLoadRecorder {
 public:
  ExpertLoadRecorder(int32_t num_moe_layers, int32_t num_experts, int32_t window_steps = kDefaultEplbWindowSteps);

  int32_t num_moe_layers() const { return num_moe_layers_; }
  int32_t num_experts() const { return num_experts_; }
  int32_t window_steps() const { return window_steps_; }
  // Steps recorded since construction or clear(); the window holds the last min(this, window_steps).
  int64_t num_steps_recorded() const { return num_steps_recorded_; }
  int32_t num_steps_in_window() const;

  // Appends one step: tokens_per_layer [num_moe_layers][num_experts], the tokens this step routed
  // to each expert of each MoE layer (a counter's difference, not its running total). Errors on a
  // shape that does not match or a negative count; nothing is recorded then.
  Result<void> record_step(const std::vector<std::vector<int64_t>>& tokens_per_layer);
  // The window of one MoE layer, oldest step first (a copy).
  ExpertLoadWindow window(int32_t moe_layer) const;
  std::vector<ExpertLoadWindow> windows() const;
  void clear();

 private:
  int32_t num_moe_layers_;
  int32_t num_experts_;
  int32_t window_steps_;
  int64_t num_steps_recorded_ = 0;
  // [num_moe_layers][window_steps * num_experts]; step s lives in row s % window_steps.
  std::vector<std::vector<int32_t>> ring_;
};

// How even a placement keeps the ranks on a trace. A replica carries load / replicas of its
// logical expert in every step (tokens spread evenly over an expert's copies).
struct RankLoadBalance {
  int32_t num_steps = 0;           // steps that routed any token (others are skipped)
  double mean_max_over_mean = 1;   // mean over steps of (busiest rank's load / mean rank load)
  double p99_max_over_mean = 1;    // its 99th percentile (nearest rank)
  double worst_max_over_mean = 1;  // its largest value
  double sum_of_step_peaks = 0;    // sum over steps of the busiest rank's load: the packing objective
};
RankLoadBalance evaluate_rank_balance(const ExpertPlacement& placement, const ExpertLoadWindow& trace);
// The per-step measure behind it: for each step of trace that routed any token, the busiest rank's
// load over the mean rank load; adds each step's busiest load to *sum_of_step_peaks.
std::vector<double> busiest_over_mean_per_step(const ExpertPlacement& placement, const ExpertLoadWindow& trace,
                                               double* sum_of_step_peaks);
// The summary of such per-step ratios (of one trace, or of consecutive placements' stretches).
RankLoadBalance summarize_rank_balance(std::vector<double> ratios, double sum_of_step_peaks);

// [num_steps, num_ranks] the load of each rank in each step of trace under placement.
std::vector<double> rank_loads_per_step(const ExpertPlacement& placement, const ExpertLoadWindow& trace);

}  // namespace deepinfer
