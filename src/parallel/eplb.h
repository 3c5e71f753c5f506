// EPLB: the expert placement a MoE layer should have, fitted to its recorded routing window.
// Our policy (kPeakAware) replicates the experts with the largest load per replica, then packs
// physical experts onto ranks to minimise the sum over the recorded steps of the busiest rank's
// load (the seeds' objective); DeepSeek's published policy (parallel/deepseek_eplb.h) packs by
// window totals instead. rebalance_layers is what a running engine calls at its re-placement
// interval. Pure functions of their inputs; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "parallel/expert_load.h"
#include "parallel/expert_placement.h"

namespace deepinfer {

enum class EplbPolicy : uint8_t {
  kContiguous,  // no rebalancing: ExpertPlacement::contiguous
  kPeakAware,   // ours
  kDeepSeek,    // DeepSeek's eplb.py
};
std::string_view eplb_policy_name(EplbPolicy policy);
// "contiguous", "peak-aware" or "deepseek"; the error lists them.
Result<EplbPolicy> parse_eplb_policy(std::string_view name);

struct EplbConfig {
  int32_t num_ranks = 1;
  int32_t num_redundant = 0;  // extra physical slots over the logical experts (--num-redundant-experts)
  EplbPolicy policy = EplbPolicy::kPeakAware;
  // DeepSeek's policy only: its hierarchical mode (expert groups packed to nodes first) runs when
  // num_nodes divides num_groups, its global mode otherwise.
  int32_t num_groups = 1;
  int32_t num_nodes = 1;
  // Ours only: a ceiling on the swap search's work, counted in (candidate swap x step)
  // evaluations, so a re-placement takes bounded time whatever the sizes (~0.1-0.3 s at the default).
  int64_t max_search_work = 100'000'000;
};

// Our replication: replica counts [num_logical] for num_physical slots. Every expert gets one;
// each further slot goes to the expert whose total load per replica is largest (lowest id on ties).
std::vector<int32_t> replicate_by_load(const std::vector<int64_t>& total_tokens, int32_t num_physical);

// What our packing reports besides the placement.
struct PeakAwarePackingStats {
  double greedy_objective = 0;  // sum over steps of the busiest rank's load where the search started
  bool started_from_totals = false;  // packing by totals gave the better start
  double final_objective = 0;   // the same after the swap search
  int32_t num_swaps = 0;        // swaps the search applied
  bool search_converged = false;  // no improving swap was left (false: the work ceiling stopped it)
};

// Our policy on one layer's window: replicate_by_load on the window totals, then pack. Packing:
// physical experts in decreasing total load, each to the rank with room whose choice raises
// sum_t max_rank load_t least (ties: the rank with the least total load, then the lowest rank);
// the same experts packed by totals (each to the lightest rank with room) is the other start, and
// the search begins from the one with the lower objective; then, while the objective falls, the
// best swap between a rank that is the busiest in some step and any other rank. A replica carries
// load / replicas of its expert in every step.
// Cost, with P physical experts, N ranks, S = P / N slots per rank and T steps: the greedy passes
// O(P N T); each search round O(N T) plus O(S P T) per rank it scans, all rounds together capped by
// config.max_search_work step evaluations. Ranks hold their slots in ascending logical id order.
Result<ExpertPlacement> peak_aware_placement(const ExpertLoadWindow& window, const EplbConfig& config,
                                             PeakAwarePackingStats* stats = nullptr);

// The placement config.policy gives one layer. A window with no steps keeps the contiguous placement.
Result<ExpertPlacement> rebalance_layer(const ExpertLoadWindow& window, const EplbConfig& config);
// Every MoE layer's placement from its window (ExpertLoadRecorder::windows()), in the same order:
// the table the engine swaps in at a step boundary. Errors name the layer.
Result<std::vector<ExpertPlacement>> rebalance_layers(const std::vector<ExpertLoadWindow>& windows,
                                                      const EplbConfig& config);

}  // namespace deepinfer
