// ExpertRebalancer: the recorder, the vote's request flag, and the re-placement between rounds.
#include "model/expert_rebalance.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/check.h"
#include "core/logging.h"
#include "parallel/eplb.h"

namespace deepinfer {

Result<std::unique_ptr<ExpertRebalancer>> ExpertRebalancer::create(ModelSource source, std::vector<MoeLayer*> moved,
                                                                   std::vector<const MoeLayer*> fixed) {
  DI_CHECK(source.expert_parallel != nullptr && !moved.empty(), "EPLB needs expert-parallel MoE layers");
  const ExpertParallelism& expert_parallel = *source.expert_parallel;
  if (expert_parallel.eplb_window_steps < 1 || expert_parallel.eplb_interval_steps < 0) {
    return Error{"EPLB: the window must be >= 1 step and the interval >= 0 steps (0: only on request), not " +
                 std::to_string(expert_parallel.eplb_window_steps) + " and " +
                 std::to_string(expert_parallel.eplb_interval_steps)};
  }
  const int32_t num_experts = moved.front()->num_experts();
  for (const MoeLayer* layer : moved) {
    if (layer->num_experts() != num_experts) {
      return Error{"EPLB needs every MoE layer to have the same number of experts (" + std::to_string(num_experts) +
                   " and " + std::to_string(layer->num_experts()) + ")"};
    }
  }
  std::unique_ptr<ExpertRebalancer> rebalancer(
      new ExpertRebalancer(std::move(source), std::move(moved), std::move(fixed), num_experts));
  rebalancer->write_placements();
  return rebalancer;
}

ExpertRebalancer::ExpertRebalancer(ModelSource source, std::vector<MoeLayer*> moved, std::vector<const MoeLayer*> fixed,
                                   int32_t num_experts)
    : source_(std::move(source)),
      expert_parallel_(*source_.expert_parallel),
      moved_(std::move(moved)),
      fixed_(std::move(fixed)),
      recorder_(static_cast<int32_t>(moved_.size()), num_experts, expert_parallel_.eplb_window_steps) {
  if (expert_parallel_.fixed_dispatch_tokens > 0) {
    routed_seen_.assign(moved_.size() * static_cast<size_t>(num_experts), 0);
    routed_on_device_ = source_.backend->allocate(routed_seen_.size() * sizeof(int64_t));
    for (size_t i = 0; i < moved_.size(); ++i) {
      moved_[i]->count_routed_on_device(routed_on_device_.as<int64_t>() + i * static_cast<size_t>(num_experts));
    }
  }
}

ExpertParallelism::Vote ExpertRebalancer::start_round(int64_t num_tokens, GroupForward kind) {
  if (round_pending_) record_round();
  const bool asked = requested_.exchange(false, std::memory_order_relaxed);
  const ExpertParallelism::Vote vote = expert_parallel_.vote(num_tokens, kind, asked);
  const int64_t interval = expert_parallel_.eplb_interval_steps;
  if (vote.rebalance || (interval > 0 && num_rounds_ - last_rebalance_round_ >= interval)) rebalance();
  round_pending_ = vote.max_tokens > 0;
  return vote;
}

void ExpertRebalancer::record_round() {
  std::vector<std::vector<int64_t>> tokens;
  tokens.reserve(moved_.size());
  for (MoeLayer* layer : moved_) tokens.push_back(layer->take_routed_tokens());
  // A round of fixed-size blocks (current_round is still the one recorded here) counted on the
  // device: one copy for every layer. Other rounds counted on the host, and need no copy.
  if (!routed_seen_.empty() && expert_parallel_.fixed_round()) {
    std::vector<int64_t> totals(routed_seen_.size());
    source_.backend->copy_to_host(totals.data(), routed_on_device_.data(), totals.size() * sizeof(int64_t));
    const size_t num_experts = tokens.front().size();
    for (size_t i = 0; i < totals.size(); ++i) tokens[i / num_experts][i % num_experts] += totals[i] - routed_seen_[i];
    routed_seen_.swap(totals);
  }
  const Result<void> recorded = recorder_.record_step(tokens);
  DI_CHECK(recorded.ok(), "EPLB: " << recorded.error().message);
  round_pending_ = false;
  ++num_rounds_;
}

std::vector<ExpertLoadWindow> ExpertRebalancer::group_windows() const {
  std::vector<ExpertLoadWindow> windows = recorder_.windows();
  const int32_t num_steps = windows.front().num_steps();
  // [num_steps, then every layer's window]: the step count checks that the ranks' windows line up.
  std::vector<int64_t> sums = {num_steps};
  for (const ExpertLoadWindow& window : windows) sums.insert(sums.end(), window.tokens.begin(), window.tokens.end());
  expert_parallel_.group->all_reduce_sum(sums);
  DI_CHECK(sums[0] == int64_t{num_steps} * expert_parallel_.group->world_size(),
           "EPLB: the ranks recorded different numbers of steps");
  size_t next = 1;
  for (ExpertLoadWindow& window : windows) {
    for (int32_t& count : window.tokens) {
      DI_CHECK(sums[next] <= std::numeric_limits<int32_t>::max(), "EPLB: a step's expert load overflows int32");
      count = static_cast<int32_t>(sums[next++]);
    }
  }
  return windows;
}

Result<std::vector<ExpertPlacement>> ExpertRebalancer::compute_placements(
    const std::vector<ExpertLoadWindow>& windows) const {
  Communicator& group = *expert_parallel_.group;
  const auto world = static_cast<size_t>(group.world_size());
  // Layer i on rank i % world: each rank a share of the policy's work, and one answer per layer.
  std::vector<ExpertPlacement> mine;
  std::string error;
  for (size_t i = static_cast<size_t>(group.rank()); i < moved_.size() && error.empty(); i += world) {
    EplbConfig config;
    config.num_ranks = group.world_size();
    config.num_redundant = moved_[i]->placement().num_redundant();
    config.policy = expert_parallel_.eplb_policy;
    // From where the experts are: a re-placement moves few of them (EplbConfig::max_moved_fraction).
    auto placement = rebalance_layer(windows[i], config, &moved_[i]->placement());
    if (placement.ok()) {
      mine.push_back(std::move(*placement));
    } else {
      error = "MoE layer " + std::to_string(i) + ": " + placement.error().message;
    }
  }
  // 'P' + the rank's layers' placements, or 'E' + what failed: every rank gets every answer.
  std::string answer(1, error.empty() ? 'P' : 'E');
  answer += error.empty() ? placements_to_json(mine) : error;
  const std::vector<std::string> gathered = group.all_gather(answer);
  std::vector<ExpertPlacement> placements(moved_.size());
  for (size_t r = 0; r < world; ++r) {
    const std::string& payload = gathered[r];
    if (payload.empty() || payload[0] != 'P') {
      return Error{"rank " + std::to_string(r) + ": " + (payload.empty() ? "no answer" : payload.substr(1))};
    }
    auto parsed = placements_from_json(std::string_view(payload).substr(1));
    if (!parsed.ok()) return Error{"rank " + std::to_string(r) + ": " + parsed.error().message};
    size_t j = 0;
    for (size_t i = r; i < moved_.size(); i += world, ++j) {
      if (j >= parsed->size()) return Error{"rank " + std::to_string(r) + " sent too few layers"};
      placements[i] = std::move((*parsed)[j]);
    }
  }
  return placements;
}

void ExpertRebalancer::rebalance() {
  const auto start = std::chrono::steady_clock::now();
  last_rebalance_round_ = num_rounds_;
  Communicator& group = *expert_parallel_.group;
  const bool leader = group.rank() == 0;
  const std::vector<ExpertLoadWindow> windows = group_windows();
  if (windows.front().num_steps() == 0) return;  // nothing recorded yet: the placement stays
  auto placements = compute_placements(windows);
  if (!placements.ok()) {  // the same on every rank
    if (leader) DI_LOG(kWarn, "EPLB: the experts stay where they are: " << placements.error().message);
    return;
  }
  // Load first, switch later: a rank that cannot load must not leave the others switched.
  std::vector<std::optional<StagedPlacement>> staged(moved_.size());
  std::string failure;
  int64_t num_loaded = 0;
  for (size_t i = 0; i < moved_.size() && failure.empty(); ++i) {
    const ExpertPlacement& now = moved_[i]->placement();
    const ExpertPlacement& next = (*placements)[i];
    if (next == now) continue;
    // A load that throws (a device out of memory) must still reach the agreement below, or the
    // other ranks would wait there for this one.
    try {
      auto layer = moved_[i]->stage_placement(source_, next);
      if (!layer.ok()) {
        failure = layer.error().message;
        break;
      }
      num_loaded += layer->num_loaded;
      staged[i] = std::move(*layer);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  std::vector<int64_t> outcome = {failure.empty() ? 0 : 1, num_loaded};
  group.all_reduce_sum(outcome);
  if (outcome[0] > 0) {
    for (size_t i = 0; i < moved_.size(); ++i) {
      if (staged[i]) moved_[i]->discard_placement(*source_.backend, std::move(*staged[i]));
    }
    if (!failure.empty()) {
      DI_LOG(kError, "EPLB: rank " << group.rank() << " could not load its new experts: " << failure);
    }
    if (leader) DI_LOG(kWarn, "EPLB: the experts stay where they are (" << outcome[0] << " rank(s) failed to load)");
    return;
  }
  double before = 0;
  double after = 0;
  if (leader) {
    for (size_t i = 0; i < moved_.size(); ++i) {
      before += evaluate_rank_balance(moved_[i]->placement(), windows[i]).mean_max_over_mean;
      after += evaluate_rank_balance((*placements)[i], windows[i]).mean_max_over_mean;
    }
  }
  for (size_t i = 0; i < moved_.size(); ++i) {
    if (staged[i]) moved_[i]->install_placement(*source_.backend, std::move(*staged[i]));
  }
  ++num_rebalances_;
  write_placements();
  if (!leader) return;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const auto layers = static_cast<double>(moved_.size());
  char numbers[96];
  std::snprintf(numbers, sizeof(numbers), "%.3f -> %.3f", before / layers, after / layers);
  char took[32];
  std::snprintf(took, sizeof(took), "%.1f ms", ms);
  DI_LOG(kInfo, "EPLB: re-placed the experts of " << moved_.size() << " MoE layers at forward round " << num_rounds_
                                                   << " (" << eplb_policy_name(expert_parallel_.eplb_policy)
                                                   << ", window of " << windows.front().num_steps()
                                                   << " rounds): busiest rank / mean " << numbers
                                                   << " on that window (mean over layers), " << outcome[1]
                                                   << " experts loaded over the ranks, " << took);
}

void ExpertRebalancer::write_placements() const {
  if (expert_parallel_.placement_out_file.empty() || expert_parallel_.group->rank() != 0) return;
  std::vector<ExpertPlacement> placements;
  for (const MoeLayer* layer : moved_) placements.push_back(layer->placement());
  for (const MoeLayer* layer : fixed_) placements.push_back(layer->placement());
  // Written aside and renamed over: a reader sees the old file or the new one, never half of one.
  const std::string& path = expert_parallel_.placement_out_file;
  const std::string temporary = path + ".tmp";
  Result<void> saved = save_placements(temporary, placements);
  std::error_code renamed;
  if (saved.ok()) std::filesystem::rename(temporary, path, renamed);
  if (!saved.ok() || renamed) {
    const std::string why = saved.ok() ? renamed.message() : saved.error().message;
    DI_LOG(kWarn, "EPLB: cannot write the expert placement to " << path << ": " << why);
  }
}

}  // namespace deepinfer
