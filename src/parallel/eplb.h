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
  // Ours, re-placing from a current placement: the most of the physical slots a re-placement may
  // give a new expert (each a load of that expert's weights on its rank). Measured on drifting
  // traces with a re-placement every 100 steps: 0.15 kept EP 8-64 within 1.10x (docs/benchmarks.md).
  double max_moved_fraction = 0.15;
};

// Our replication: replica counts [num_logical] for num_physical slots. Every expert gets one;
// each further slot goes to the expert whose total load per replica is largest (lowest id on ties).
std::vector<int32_t> replicate_by_load(const std::vector<int64_t>& total_tokens, int32_t num_physical);

// What our packing reports besides the placement.
struct PeakAwarePackingStats {
  double greedy_objective = 0;  // sum over steps of the busiest rank's load where the search started
  bool started_from_totals = false;  // packing by totals gave the better start
  bool started_from_current = false;  // the search started from the current placement
  int32_t replicas_placed_anew = 0;   // from it: replicas no rank held before (changed counts)
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
// With current (the layer's placement now, of the same shape), the search starts instead from
// current's experts kept on their ranks (those whose replica counts fell give up copies, new
// replicas go where the greedy puts them) and stops before moving more than
// config.max_moved_fraction of the slots: a running engine then loads that few experts, where a
// fresh packing moves most of them.
Result<ExpertPlacement> peak_aware_placement(const ExpertLoadWindow& window, const EplbConfig& config,
                                             PeakAwarePackingStats* stats = nullptr,
                                             const ExpertPlacement* current = nullptr);

// The placement config.policy gives one layer (current: as peak_aware_placement's; DeepSeek's
// policy packs afresh). A window with no steps keeps the contiguous placement.
Result<ExpertPlacement> rebalance_layer(const ExpertLoadWindow& window, const EplbConfig& config,
                                        const ExpertPlacement* current = nullptr);
// Every MoE layer's placement from its window (ExpertLoadRecorder::windows()), in the same order:
// the table the engine swaps in at a step boundary. Errors name the layer.
Result<std::vector<ExpertPlacement>> rebalance_layers(const std::vector<ExpertLoadWindow>& windows,
                                                      const EplbConfig& config);

}  // namespace deepinfer
