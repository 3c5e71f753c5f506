// Our EPLB policy (replicate, greedy peak-aware packing, swap search) and the per-layer entry
// points. The packing works on per-step load rows: what it minimises is a sum of per-step peaks.
#include "parallel/eplb.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "core/check.h"
#include "parallel/deepseek_eplb.h"

namespace deepinfer {

namespace {

// The state of a packing: which logical expert each rank's slots hold and each rank's per-step
// load, with the per-step peak kept current. One slot's load row is its expert's row divided by
// the expert's replica count (replica_rows).
class PeakAwarePacker {
 public:
  PeakAwarePacker(const ExpertLoadWindow& window, const std::vector<int32_t>& replica_counts, int32_t num_ranks)
      : num_steps_(window.num_steps()), num_ranks_(num_ranks) {
    const int32_t num_experts = window.num_experts;
    replica_rows_.assign(static_cast<size_t>(num_experts) * num_steps_, 0.0);
    for (int32_t t = 0; t < num_steps_; ++t) {
      const int32_t* tokens = window.step(t);
      for (int32_t e = 0; e < num_experts; ++e) row(e)[t] = static_cast<double>(tokens[e]) / replica_counts[e];
    }
    rank_loads_.assign(static_cast<size_t>(num_ranks) * num_steps_, 0.0);
    rank_totals_.assign(static_cast<size_t>(num_ranks), 0.0);
    rank_experts_.resize(static_cast<size_t>(num_ranks));
    peaks_.assign(static_cast<size_t>(num_steps_), 0.0);
  }

  const std::vector<int32_t>& experts_on(int32_t rank) const { return rank_experts_[rank]; }
  double objective() const { return std::accumulate(peaks_.begin(), peaks_.end(), 0.0); }

  // Whether rank holds a copy of expert.
  bool holds(int32_t rank, int32_t expert) const {
    const std::vector<int32_t>& experts = rank_experts_[rank];
    return std::find(experts.begin(), experts.end(), expert) != experts.end();
  }
  // Whether rank can take a copy of expert: it has room and, while a rank without the expert has
  // room, no copy already (a second copy on one rank balances nothing).
  bool can_take(int32_t rank, int32_t expert, int32_t slots_per_rank) const {
    const auto has_room = [&](int32_t r) { return static_cast<int32_t>(rank_experts_[r].size()) < slots_per_rank; };
    if (!has_room(rank)) return false;
    if (!holds(rank, expert)) return true;
    for (int32_t r = 0; r < num_ranks_; ++r) {
      if (has_room(r) && !holds(r, expert)) return false;
    }
    return true;
  }

  // The greedy pass's choice for one replica of expert among ranks that can take it (can_take).
  int32_t cheapest_rank_for(int32_t expert, int32_t slots_per_rank) const {
    const double* load = row(expert);
    int32_t best_rank = -1;
    double best_cost = std::numeric_limits<double>::infinity();
    for (int32_t r = 0; r < num_ranks_; ++r) {
      if (!can_take(r, expert, slots_per_rank)) continue;
      const double* rank_load = rank_row(r);
      double cost = 0;
      // Every term is >= 0, so a partial sum above the best so far already loses.
      for (int32_t t = 0; t < num_steps_ && cost <= best_cost; ++t) {
        cost += std::max(0.0, rank_load[t] + load[t] - peaks_[t]);
      }
      if (best_rank < 0 || cost < best_cost || (cost == best_cost && rank_totals_[r] < rank_totals_[best_rank])) {
        best_rank = r;
        best_cost = cost;
      }
    }
    return best_rank;
  }

  // The totals-balancing choice (DeepSeek's packing rule): the rank that can take the replica
  // (can_take) with the least total load.
  int32_t lightest_rank(int32_t expert, int32_t slots_per_rank) const {
    int32_t lightest = -1;
    for (int32_t r = 0; r < num_ranks_; ++r) {
      if (!can_take(r, expert, slots_per_rank)) continue;
      if (lightest < 0 || rank_totals_[r] < rank_totals_[lightest]) lightest = r;
    }
    return lightest;
  }

  void place(int32_t expert, int32_t rank) {
    const double* load = row(expert);
    double* rank_load = rank_row(rank);
    for (int32_t t = 0; t < num_steps_; ++t) {
      rank_load[t] += load[t];
      peaks_[t] = std::max(peaks_[t], rank_load[t]);
      rank_totals_[rank] += load[t];
    }
    rank_experts_[rank].push_back(expert);
  }

  // Applies the best objective-lowering swap that moves load off one of the ranks that set a
  // step's peak; false when no such swap lowers the objective. work counts step evaluations.
  bool apply_best_swap(int64_t& work, int64_t max_work) {
    refresh_top_ranks();
    // The most the objective can fall by unloading rank r: the gaps to the runner-up where r peaks.
    std::vector<double> relief(static_cast<size_t>(num_ranks_), 0.0);
    for (int32_t t = 0; t < num_steps_; ++t) relief[first_rank_[t]] += peaks_[t] - second_[t];
    std::vector<int32_t> candidates;
    for (int32_t r = 0; r < num_ranks_; ++r) {
      if (relief[r] > 0) candidates.push_back(r);
    }
    std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) { return relief[a] > relief[b]; });
    // Float noise must not count as progress (it could cycle): a swap must gain a relative 1e-9.
    const double min_gain = 1e-9 * objective();
    for (const int32_t r : candidates) {
      Swap best{.delta = -min_gain};
      for (int32_t q = 0; q < num_ranks_ && work < max_work; ++q) {
        if (q != r) find_best_swap(r, q, best, work);
      }
      if (best.rank_a >= 0) {
        apply(best);
        return true;
      }
      if (work >= max_work) return false;
    }
    return false;
  }

 private:
  struct Swap {
    double delta = 0;
    int32_t rank_a = -1;
    int32_t slot_a = -1;
    int32_t rank_b = -1;
    int32_t slot_b = -1;
  };

  double* row(int32_t expert) { return replica_rows_.data() + static_cast<size_t>(expert) * num_steps_; }
  const double* row(int32_t expert) const { return replica_rows_.data() + static_cast<size_t>(expert) * num_steps_; }
  double* rank_row(int32_t rank) { return rank_loads_.data() + static_cast<size_t>(rank) * num_steps_; }
  const double* rank_row(int32_t rank) const { return rank_loads_.data() + static_cast<size_t>(rank) * num_steps_; }

  // Per step: the busiest rank, the runner-up's rank and load, and the third load, so the
  // load of "every rank but r and q" is known for any pair.
  void refresh_top_ranks() {
    first_rank_.assign(static_cast<size_t>(num_steps_), -1);
    second_rank_.assign(static_cast<size_t>(num_steps_), -1);
    second_.assign(static_cast<size_t>(num_steps_), 0.0);
    third_.assign(static_cast<size_t>(num_steps_), 0.0);
    for (int32_t t = 0; t < num_steps_; ++t) {
      double first = -1;
      double second = -1;
      double third = 0;
      for (int32_t r = 0; r < num_ranks_; ++r) {
        const double load = rank_row(r)[t];
        if (load > first) {
          third = std::max(third, second);
          second = first;
          second_rank_[t] = first_rank_[t];
          first = load;
          first_rank_[t] = r;
        } else if (load > second) {
          third = std::max(third, second);
          second = load;
          second_rank_[t] = r;
        } else {
          third = std::max(third, load);
        }
      }
      second_[t] = std::max(second, 0.0);
      third_[t] = third;
    }
  }

  void find_best_swap(int32_t r, int32_t q, Swap& best, int64_t& work) {
    // others[t]: the busiest load among ranks other than r and q; decrease_left[t]: the most the
    // steps from t on can still lower the objective (only steps that r or q peaks can fall).
    others_.resize(static_cast<size_t>(num_steps_));
    decrease_left_.resize(static_cast<size_t>(num_steps_) + 1);
    decrease_left_[num_steps_] = 0;
    for (int32_t t = num_steps_ - 1; t >= 0; --t) {
      const bool first_in = first_rank_[t] == r || first_rank_[t] == q;
      const bool second_in = second_rank_[t] == r || second_rank_[t] == q;
      others_[t] = !first_in ? peaks_[t] : (!second_in ? second_[t] : third_[t]);
      decrease_left_[t] = decrease_left_[t + 1] + (peaks_[t] - others_[t]);
    }
    const double* load_r = rank_row(r);
    const double* load_q = rank_row(q);
    constexpr int32_t kBoundCheckSteps = 64;
    for (size_t a = 0; a < rank_experts_[r].size(); ++a) {
      const double* x_a = row(rank_experts_[r][a]);
      for (size_t b = 0; b < rank_experts_[q].size(); ++b) {
        if (rank_experts_[q][b] == rank_experts_[r][a]) continue;  // two copies of one expert: no change
        // A swap that would put a second copy of an expert on one rank balances nothing.
        if (holds(r, rank_experts_[q][b]) || holds(q, rank_experts_[r][a])) continue;
        const double* x_b = row(rank_experts_[q][b]);
        double delta = 0;
        int32_t t = 0;
        while (t < num_steps_) {
          const int32_t end = std::min(num_steps_, t + kBoundCheckSteps);
          for (; t < end; ++t) {
            const double moved = x_b[t] - x_a[t];
            delta += std::max({others_[t], load_r[t] + moved, load_q[t] - moved}) - peaks_[t];
          }
          if (delta - decrease_left_[t] >= best.delta) break;  // cannot beat the best any more
        }
        work += t;
        if (t == num_steps_ && delta < best.delta) {
          best = Swap{.delta = delta, .rank_a = r, .slot_a = static_cast<int32_t>(a), .rank_b = q,
                      .slot_b = static_cast<int32_t>(b)};
        }
      }
    }
  }

  void apply(const Swap& swap) {
    int32_t& expert_a = rank_experts_[swap.rank_a][swap.slot_a];
    int32_t& expert_b = rank_experts_[swap.rank_b][swap.slot_b];
    const double* x_a = row(expert_a);
    const double* x_b = row(expert_b);
    double* load_a = rank_row(swap.rank_a);
    double* load_b = rank_row(swap.rank_b);
    for (int32_t t = 0; t < num_steps_; ++t) {
      const double moved = x_b[t] - x_a[t];
      load_a[t] += moved;
      load_b[t] -= moved;
      rank_totals_[swap.rank_a] += moved;
      rank_totals_[swap.rank_b] -= moved;
    }
    std::swap(expert_a, expert_b);
    // Peaks can fall anywhere the two ranks peaked: recompute them all.
    for (int32_t t = 0; t < num_steps_; ++t) {
      double peak = 0;
      for (int32_t r = 0; r < num_ranks_; ++r) peak = std::max(peak, rank_row(r)[t]);
      peaks_[t] = peak;
    }
  }

  int32_t num_steps_;
  int32_t num_ranks_;
  std::vector<double> replica_rows_;           // [num_experts, num_steps] one replica's load
  std::vector<double> rank_loads_;             // [num_ranks, num_steps]
  std::vector<double> rank_totals_;            // [num_ranks] summed over the steps
  std::vector<std::vector<int32_t>> rank_experts_;  // [num_ranks][filled slots] logical ids
  std::vector<double> peaks_;                  // [num_steps] the busiest rank's load
  std::vector<int32_t> first_rank_, second_rank_;   // [num_steps] for the swap search
  std::vector<double> second_, third_, others_, decrease_left_;
};

}  // namespace

std::string_view eplb_policy_name(EplbPolicy policy) {
  switch (policy) {
    case EplbPolicy::kContiguous: return "contiguous";
    case EplbPolicy::kPeakAware: return "peak-aware";
    case EplbPolicy::kDeepSeek: return "deepseek";
  }
  return "unknown";
}

Result<EplbPolicy> parse_eplb_policy(std::string_view name) {
  for (const EplbPolicy policy : {EplbPolicy::kContiguous, EplbPolicy::kPeakAware, EplbPolicy::kDeepSeek}) {
    if (name == eplb_policy_name(policy)) return policy;
  }
  return Error{"unknown EPLB policy '" + std::string(name) + "' (expected contiguous, peak-aware or deepseek)"};
}

std::vector<int32_t> replicate_by_load(const std::vector<int64_t>& total_tokens, int32_t num_physical) {
  const auto num_logical = static_cast<int32_t>(total_tokens.size());
  DI_CHECK(num_physical >= num_logical, num_physical << " slots for " << num_logical << " experts");
  std::vector<int32_t> counts(total_tokens.size(), 1);
  for (int32_t slot = num_logical; slot < num_physical; ++slot) {
    int32_t hottest = 0;
    for (int32_t e = 1; e < num_logical; ++e) {
      // load_e / count_e > load_h / count_h, compared without division.
      if (static_cast<double>(total_tokens[e]) * counts[hottest] >
          static_cast<double>(total_tokens[hottest]) * counts[e]) {
        hottest = e;
      }
    }
    ++counts[hottest];
  }
  return counts;
}

namespace {

// The start that keeps current's experts where they are: each rank first takes back the experts
// it holds that still have a replica to place, then the remaining replicas (heaviest first) go
// where the peak-aware greedy puts them. False where a replica finds no rank (then the fresh
// starts serve).
bool keep_current(const ExpertPlacement& current, const std::vector<int32_t>& replicas, std::vector<int32_t> quota,
                  int32_t slots_per_rank, PeakAwarePacker& packer, int32_t& placed_anew) {
  for (int32_t r = 0; r < current.num_ranks; ++r) {
    for (int32_t slot = 0; slot < current.slots_per_rank; ++slot) {
      const int32_t expert = current.physical_to_logical[static_cast<size_t>(r * current.slots_per_rank + slot)];
      if (quota[expert] == 0 || !packer.can_take(r, expert, slots_per_rank)) continue;
      packer.place(expert, r);
      --quota[expert];
    }
  }
  for (const int32_t expert : replicas) {
    if (quota[expert] == 0) continue;
    const int32_t rank = packer.cheapest_rank_for(expert, slots_per_rank);
    if (rank < 0) return false;
    packer.place(expert, rank);
    --quota[expert];
    ++placed_anew;
  }
  return true;
}

}  // namespace

Result<ExpertPlacement> peak_aware_placement(const ExpertLoadWindow& window, const EplbConfig& config,
                                             PeakAwarePackingStats* stats, const ExpertPlacement* current) {
  ExpertPlacement placement;
  DI_ASSIGN(placement, ExpertPlacement::contiguous(window.num_experts, config.num_ranks, config.num_redundant));
  const std::vector<int64_t> totals = window.totals();
  const std::vector<int32_t> replica_counts = replicate_by_load(totals, placement.num_physical());

  // Heaviest replicas first (ties: lower expert id); a replica's total is its expert's share.
  std::vector<int32_t> replicas;
  for (int32_t e = 0; e < window.num_experts; ++e) replicas.insert(replicas.end(), replica_counts[e], e);
  std::stable_sort(replicas.begin(), replicas.end(), [&](int32_t a, int32_t b) {
    return static_cast<double>(totals[a]) * replica_counts[b] > static_cast<double>(totals[b]) * replica_counts[a];
  });
  // Two greedy starts: ours, and packing by totals (what DeepSeek's policy does with the same
  // replicas). The search starts from the better one, so ours never ends above packing by totals.
  const int32_t slots_per_rank = placement.slots_per_rank;
  PeakAwarePacker peak_aware(window, replica_counts, config.num_ranks);
  PeakAwarePacker by_totals(window, replica_counts, config.num_ranks);
  for (const int32_t expert : replicas) {
    peak_aware.place(expert, peak_aware.cheapest_rank_for(expert, slots_per_rank));
    by_totals.place(expert, by_totals.lightest_rank(expert, slots_per_rank));
  }
  PeakAwarePackingStats local_stats;
  local_stats.started_from_totals = by_totals.objective() < peak_aware.objective();
  // A running engine's re-placement starts from where the experts are, so the search moves only
  // the experts its swaps and the changed replica counts need.
  PeakAwarePacker kept(window, replica_counts, config.num_ranks);
  local_stats.started_from_current =
      current != nullptr && current->num_ranks == config.num_ranks && current->slots_per_rank == slots_per_rank &&
      current->num_logical_experts == window.num_experts &&
      keep_current(*current, replicas, replica_counts, slots_per_rank, kept, local_stats.replicas_placed_anew);
  if (local_stats.started_from_current) local_stats.started_from_totals = false;
  PeakAwarePacker& packer =
      local_stats.started_from_current ? kept : (local_stats.started_from_totals ? by_totals : peak_aware);
  local_stats.greedy_objective = packer.objective();
  int64_t work = 0;
  // From the current placement, swaps (two moved experts each) stop where the moves would pass
  // config.max_moved_fraction of the slots, counting the replicas keep_current placed anew.
  const int64_t max_swaps =
      local_stats.started_from_current
          ? std::max<int64_t>(0, (static_cast<int64_t>(config.max_moved_fraction * placement.num_physical()) -
                                  local_stats.replicas_placed_anew) /
                                     2)
          : std::numeric_limits<int64_t>::max();
  while (local_stats.num_swaps < max_swaps) {
    if (!packer.apply_best_swap(work, config.max_search_work)) break;
    ++local_stats.num_swaps;
  }
  local_stats.search_converged = work < config.max_search_work;
  local_stats.final_objective = packer.objective();
  if (stats != nullptr) *stats = local_stats;

  for (int32_t r = 0; r < config.num_ranks; ++r) {
    std::vector<int32_t> experts = packer.experts_on(r);
    std::sort(experts.begin(), experts.end());
    std::copy(experts.begin(), experts.end(), placement.physical_to_logical.begin() + r * placement.slots_per_rank);
  }
  DI_CHECK(placement.validate().ok(), placement.validate().error().message);
  return placement;
}

Result<ExpertPlacement> rebalance_layer(const ExpertLoadWindow& window, const EplbConfig& config,
                                        const ExpertPlacement* current) {
  if (window.num_steps() == 0 || config.policy == EplbPolicy::kContiguous) {
    return ExpertPlacement::contiguous(window.num_experts, config.num_ranks, config.num_redundant);
  }
  if (config.policy == EplbPolicy::kPeakAware) return peak_aware_placement(window, config, nullptr, current);
  const std::vector<int64_t> totals = window.totals();
  const std::vector<float> weights(totals.begin(), totals.end());
  return deepseek_placement(weights, window.num_experts + config.num_redundant, config.num_groups, config.num_nodes,
                            config.num_ranks);
}

Result<std::vector<ExpertPlacement>> rebalance_layers(const std::vector<ExpertLoadWindow>& windows,
                                                      const EplbConfig& config) {
  std::vector<ExpertPlacement> placements;
  for (size_t layer = 0; layer < windows.size(); ++layer) {
    Result<ExpertPlacement> placement = rebalance_layer(windows[layer], config);
    if (!placement.ok()) return Error{"MoE layer " + std::to_string(layer) + ": " + placement.error().message};
    placements.push_back(std::move(placement).value());
  }
  return placements;
}

}  // namespace deepinfer
