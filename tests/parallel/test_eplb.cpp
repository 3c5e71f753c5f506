// EPLB: the load recorder's window, the rank-balance measure, our policy's invariants and its
// objective next to DeepSeek's, and DeepSeek's policy against their own eplb.py's output
// (tests/data/eplb/deepseek_eplb.json, made by running it; README there).
#include "parallel/eplb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "parallel/deepseek_eplb.h"

namespace deepinfer {
namespace {

// num_steps steps of Zipf(skew)-popular experts (a random order per seed), tokens_per_step
// top-k assignments per step drawn independently: a small stand-in for a routing trace.
ExpertLoadWindow random_trace(uint64_t seed, int32_t num_experts, int32_t num_steps, int32_t tokens_per_step,
                              double skew) {
  std::mt19937_64 rng(seed);
  std::vector<double> popularity(static_cast<size_t>(num_experts));
  for (int32_t e = 0; e < num_experts; ++e) popularity[e] = 1.0 / std::pow(1.0 + e, skew);
  std::shuffle(popularity.begin(), popularity.end(), rng);
  std::discrete_distribution<int32_t> pick(popularity.begin(), popularity.end());
  ExpertLoadWindow trace;
  trace.num_experts = num_experts;
  trace.tokens.assign(static_cast<size_t>(num_steps) * num_experts, 0);
  for (int32_t t = 0; t < num_steps; ++t) {
    for (int32_t i = 0; i < tokens_per_step; ++i) ++trace.tokens[static_cast<size_t>(t) * num_experts + pick(rng)];
  }
  return trace;
}

TEST(ExpertLoadRecorder, KeepsTheLastStepsOldestFirst) {
  ExpertLoadRecorder recorder(2, 3, 2);
  EXPECT_EQ(recorder.num_steps_in_window(), 0);
  EXPECT_EQ(recorder.window(0).num_steps(), 0);
  ASSERT_TRUE(recorder.record_step({{1, 2, 3}, {4, 5, 6}}).ok());
  ASSERT_TRUE(recorder.record_step({{7, 8, 9}, {1, 1, 1}}).ok());
  ASSERT_TRUE(recorder.record_step({{0, 0, 5}, {2, 2, 2}}).ok());
  EXPECT_EQ(recorder.num_steps_recorded(), 3);
  EXPECT_EQ(recorder.num_steps_in_window(), 2);
  EXPECT_EQ(recorder.window(0).tokens, (std::vector<int32_t>{7, 8, 9, 0, 0, 5}));
  EXPECT_EQ(recorder.window(1).tokens, (std::vector<int32_t>{1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(recorder.window(0).totals(), (std::vector<int64_t>{7, 8, 14}));
  EXPECT_EQ(recorder.window(0).slice(1, 2).tokens, (std::vector<int32_t>{0, 0, 5}));
  EXPECT_EQ(recorder.windows().size(), 2U);
  recorder.clear();
  EXPECT_EQ(recorder.num_steps_in_window(), 0);
}

TEST(ExpertLoadRecorder, RejectsStepsOfTheWrongShape) {
  ExpertLoadRecorder recorder(2, 3);
  EXPECT_EQ(recorder.window_steps(), kDefaultEplbWindowSteps);
  const Result<void> layers = recorder.record_step({{1, 2, 3}});
  ASSERT_FALSE(layers.ok());
  EXPECT_NE(layers.error().message.find("counts for 1 MoE layers, the recorder has 2"), std::string::npos);
  const Result<void> experts = recorder.record_step({{1, 2, 3}, {1, 2}});
  ASSERT_FALSE(experts.ok());
  EXPECT_NE(experts.error().message.find("MoE layer 1 gave 2 expert counts"), std::string::npos);
  const Result<void> negative = recorder.record_step({{1, 2, 3}, {1, -2, 3}});
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.error().message.find("not a running total"), std::string::npos);
  EXPECT_EQ(recorder.num_steps_recorded(), 0);
}

TEST(RankBalance, MeasuresTheBusiestRankOverTheMeanPerStep) {
  // Two ranks: {0, 1} and {2, 3}; expert 0 has a second copy on rank 1.
  ExpertPlacement placement;
  placement.num_logical_experts = 3;
  placement.num_ranks = 2;
  placement.slots_per_rank = 2;
  placement.physical_to_logical = {0, 1, 2, 0};
  ExpertLoadWindow trace;
  trace.num_experts = 3;
  trace.tokens = {4, 2, 2,   // ranks 2 + 2 = 4 and 2 + 2 = 4: ratio 1
                  8, 0, 0,   // 4 and 4: 1
                  0, 6, 0,   // 6 and 0: 2
                  0, 0, 0};  // nothing routed: skipped
  EXPECT_EQ(rank_loads_per_step(placement, trace), (std::vector<double>{4, 4, 4, 4, 6, 0, 0, 0}));
  const RankLoadBalance balance = evaluate_rank_balance(placement, trace);
  EXPECT_EQ(balance.num_steps, 3);
  EXPECT_DOUBLE_EQ(balance.mean_max_over_mean, 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(balance.p99_max_over_mean, 2.0);
  EXPECT_DOUBLE_EQ(balance.worst_max_over_mean, 2.0);
  EXPECT_DOUBLE_EQ(balance.sum_of_step_peaks, 14.0);

  // Stretches measured one after another (a placement each, as the rolling bench does) add up to
  // the whole trace's measure.
  double peaks = 0;
  std::vector<double> ratios = busiest_over_mean_per_step(placement, trace.slice(0, 2), &peaks);
  EXPECT_EQ(ratios, (std::vector<double>{1, 1}));
  for (const double ratio : busiest_over_mean_per_step(placement, trace.slice(2, 4), &peaks)) ratios.push_back(ratio);
  const RankLoadBalance stitched = summarize_rank_balance(ratios, peaks);
  EXPECT_EQ(stitched.num_steps, balance.num_steps);
  EXPECT_DOUBLE_EQ(stitched.mean_max_over_mean, balance.mean_max_over_mean);
  EXPECT_DOUBLE_EQ(stitched.p99_max_over_mean, balance.p99_max_over_mean);
  EXPECT_DOUBLE_EQ(stitched.worst_max_over_mean, balance.worst_max_over_mean);
  EXPECT_DOUBLE_EQ(stitched.sum_of_step_peaks, balance.sum_of_step_peaks);
}

TEST(Eplb, ReplicatesTheLargestLoadPerReplica) {
  EXPECT_EQ(replicate_by_load({100, 10, 40}, 3), (std::vector<int32_t>{1, 1, 1}));
  // Expert 0 at 100, then 50 per copy, then 33.3, below expert 2's 40.
  EXPECT_EQ(replicate_by_load({100, 10, 40}, 5), (std::vector<int32_t>{3, 1, 1}));
  EXPECT_EQ(replicate_by_load({100, 10, 40}, 6), (std::vector<int32_t>{3, 1, 2}));
  // 60 / 2 ties with 30 / 1: the lower id takes the copy.
  EXPECT_EQ(replicate_by_load({60, 30}, 4), (std::vector<int32_t>{3, 1}));
}

TEST(Eplb, PoliciesKeepEveryExpertAndFillEveryRank) {
  for (const EplbPolicy policy : {EplbPolicy::kContiguous, EplbPolicy::kPeakAware, EplbPolicy::kDeepSeek}) {
    for (const auto& [num_experts, num_ranks, num_redundant] :
         std::vector<std::tuple<int32_t, int32_t, int32_t>>{{8, 2, 0}, {8, 2, 2}, {8, 4, 4}, {16, 8, 8}, {64, 16, 16},
                                                             {64, 8, 0}, {32, 32, 32}}) {
      const ExpertLoadWindow trace = random_trace(num_experts * 131 + num_ranks, num_experts, 50, 400, 1.0);
      const EplbConfig config{.num_ranks = num_ranks, .num_redundant = num_redundant, .policy = policy};
      auto placement = rebalance_layer(trace, config);
      ASSERT_TRUE(placement.ok()) << placement.error().message;
      SCOPED_TRACE(std::string(eplb_policy_name(policy)) + " " + std::to_string(num_experts) + " experts on " +
                   std::to_string(num_ranks) + " ranks + " + std::to_string(num_redundant));
      EXPECT_TRUE(placement->validate().ok());
      EXPECT_EQ(placement->num_ranks, num_ranks);
      EXPECT_EQ(placement->num_physical(), num_experts + num_redundant);
      EXPECT_EQ(placement->slots_per_rank * num_ranks, num_experts + num_redundant);
      const std::vector<int32_t> counts = placement->replica_counts();
      EXPECT_TRUE(std::all_of(counts.begin(), counts.end(), [](int32_t count) { return count >= 1; }));
      if (policy == EplbPolicy::kPeakAware) {
        EXPECT_EQ(counts, replicate_by_load(trace.totals(), num_experts + num_redundant));
      }
    }
  }
}

// A second copy of an expert on a rank that already holds one balances nothing: ours spreads an
// expert's copies over different ranks (a rank holds at most ceil(copies / ranks) of them; skewed
// traces, where hot experts get several copies, some more than there are ranks).
TEST(Eplb, OursPutsAnExpertsCopiesOnDifferentRanks) {
  for (const auto& [num_experts, num_ranks, num_redundant] :
       std::vector<std::tuple<int32_t, int32_t, int32_t>>{{8, 2, 2}, {8, 4, 4}, {16, 8, 8}, {64, 16, 16}, {32, 4, 12}}) {
    const ExpertLoadWindow trace = random_trace(num_experts * 7 + num_redundant, num_experts, 50, 400, 1.2);
    const EplbConfig config{.num_ranks = num_ranks, .num_redundant = num_redundant, .policy = EplbPolicy::kPeakAware};
    auto placement = rebalance_layer(trace, config);
    ASSERT_TRUE(placement.ok()) << placement.error().message;
    const std::vector<int32_t> copies = placement->replica_counts();
    EXPECT_TRUE(std::any_of(copies.begin(), copies.end(), [](int32_t c) { return c >= 2; }));
    for (int32_t r = 0; r < num_ranks; ++r) {
      std::vector<int32_t> held_copies(static_cast<size_t>(num_experts), 0);
      for (int32_t slot = 0; slot < placement->slots_per_rank; ++slot) {
        ++held_copies[static_cast<size_t>(placement->physical_to_logical[r * placement->slots_per_rank + slot])];
      }
      for (int32_t e = 0; e < num_experts; ++e) {
        const int32_t most = (copies[static_cast<size_t>(e)] + num_ranks - 1) / num_ranks;
        EXPECT_LE(held_copies[static_cast<size_t>(e)], most)
            << num_experts << " experts on " << num_ranks << " ranks + " << num_redundant << ": rank " << r
            << " holds " << held_copies[static_cast<size_t>(e)] << " of expert " << e << "'s "
            << copies[static_cast<size_t>(e)] << " copies";
      }
    }
  }
}

// Ours starts from the better of its own greedy pass and packing by totals (DeepSeek's rule on the
// same replicas), and its search only lowers the objective.
TEST(Eplb, OursIsNeverWorseThanDeepSeeksOnTheObjective) {
  int32_t num_strictly_better = 0;
  int32_t num_cases = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    for (const auto& [num_ranks, num_redundant] :
         std::vector<std::pair<int32_t, int32_t>>{{4, 4}, {8, 8}, {16, 0}, {16, 16}}) {
      const double skew = 0.6 + 0.1 * static_cast<double>(seed % 6);
      const ExpertLoadWindow trace = random_trace(seed, 64, 100, 64 * 8 * 4, skew);
      EplbConfig config{.num_ranks = num_ranks, .num_redundant = num_redundant, .policy = EplbPolicy::kPeakAware};
      PeakAwarePackingStats stats;
      auto ours = peak_aware_placement(trace, config, &stats);
      config.policy = EplbPolicy::kDeepSeek;
      auto theirs = rebalance_layer(trace, config);
      ASSERT_TRUE(ours.ok() && theirs.ok());
      const double ours_objective = evaluate_rank_balance(*ours, trace).sum_of_step_peaks;
      const double theirs_objective = evaluate_rank_balance(*theirs, trace).sum_of_step_peaks;
      EXPECT_LE(ours_objective, theirs_objective * (1 + 1e-12)) << "seed " << seed << ", " << num_ranks << " ranks";
      EXPECT_NEAR(stats.final_objective, ours_objective, 1e-9 * ours_objective);
      EXPECT_LE(stats.final_objective, stats.greedy_objective);
      num_strictly_better += ours_objective < theirs_objective ? 1 : 0;
      ++num_cases;
    }
  }
  EXPECT_GT(num_strictly_better, num_cases / 2) << "per-step packing should beat packing by totals on most traces";
}

// Re-placing from the current placement (what a running engine does) gives a new expert to at most
// max_moved_fraction of the slots, where packing afresh for a new window moves most of them, and
// still lowers the objective on the new window below the current placement's.
TEST(Eplb, ReplacingFromTheCurrentPlacementMovesFewExperts) {
  const EplbConfig config{.num_ranks = 8, .num_redundant = 8};
  const auto current = peak_aware_placement(random_trace(11, 64, 50, 400, 1.2), config);
  ASSERT_TRUE(current.ok());
  // A window whose popular experts are others: the reversed ids.
  ExpertLoadWindow shifted = random_trace(12, 64, 50, 400, 1.2);
  for (int32_t t = 0; t < shifted.num_steps(); ++t) {
    std::reverse(shifted.tokens.begin() + t * 64, shifted.tokens.begin() + (t + 1) * 64);
  }
  PeakAwarePackingStats stats;
  const auto kept = peak_aware_placement(shifted, config, &stats, &*current);
  const auto fresh = peak_aware_placement(shifted, config);
  ASSERT_TRUE(kept.ok() && fresh.ok());
  ASSERT_TRUE(kept->validate().ok()) << kept->validate().error().message;
  EXPECT_TRUE(stats.started_from_current);
  EXPECT_LE(kept->experts_gained_from(*current),
            static_cast<int32_t>(config.max_moved_fraction * kept->num_physical()));
  EXPECT_GT(fresh->experts_gained_from(*current), kept->num_physical() / 2)
      << "a fresh packing should move most experts";
  EXPECT_LT(evaluate_rank_balance(*kept, shifted).sum_of_step_peaks,
            evaluate_rank_balance(*current, shifted).sum_of_step_peaks);
  // A placement of another shape is no start: the search packs afresh.
  const auto other_shape =
      peak_aware_placement(shifted, EplbConfig{.num_ranks = 4, .num_redundant = 4}, &stats, &*current);
  ASSERT_TRUE(other_shape.ok());
  EXPECT_FALSE(stats.started_from_current);
}

TEST(Eplb, RebalanceLayersNamesTheLayerAndKeepsEmptyWindowsContiguous) {
  ExpertLoadRecorder recorder(2, 8, 100);
  auto placements = rebalance_layers(recorder.windows(), EplbConfig{.num_ranks = 2, .num_redundant = 2});
  ASSERT_TRUE(placements.ok()) << placements.error().message;
  ASSERT_EQ(placements->size(), 2U);
  EXPECT_EQ((*placements)[0], *ExpertPlacement::contiguous(8, 2, 2));

  const ExpertLoadWindow trace = random_trace(7, 8, 20, 100, 1.2);
  std::vector<std::vector<int64_t>> step(2, std::vector<int64_t>(8));
  for (int32_t t = 0; t < trace.num_steps(); ++t) {
    for (int32_t e = 0; e < 8; ++e) step[0][e] = step[1][e] = trace.step(t)[e];
    ASSERT_TRUE(recorder.record_step(step).ok());
  }
  placements = rebalance_layers(recorder.windows(), EplbConfig{.num_ranks = 2, .num_redundant = 2});
  ASSERT_TRUE(placements.ok());
  EXPECT_EQ((*placements)[0], *peak_aware_placement(trace, EplbConfig{.num_ranks = 2, .num_redundant = 2}));

  const auto uneven = rebalance_layers(recorder.windows(), EplbConfig{.num_ranks = 3, .num_redundant = 0});
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.error().message.find("MoE layer 0: "), std::string::npos);
  EXPECT_NE(uneven.error().message.find("do not split evenly over 3 ranks"), std::string::npos);
}

TEST(Eplb, ParsesPolicyNames) {
  EXPECT_EQ(*parse_eplb_policy("peak-aware"), EplbPolicy::kPeakAware);
  EXPECT_EQ(*parse_eplb_policy("deepseek"), EplbPolicy::kDeepSeek);
  EXPECT_EQ(*parse_eplb_policy("contiguous"), EplbPolicy::kContiguous);
  const auto unknown = parse_eplb_policy("greedy");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("expected contiguous, peak-aware or deepseek"), std::string::npos);
}

TEST(DeepSeekEplb, RejectsShapesTheirAssertsReject) {
  const std::vector<float> weights(8, 1.0F);
  EXPECT_FALSE(deepseek_rebalance_experts(weights, 6, 1, 1, 2).ok());   // fewer slots than experts
  EXPECT_FALSE(deepseek_rebalance_experts(weights, 10, 1, 1, 4).ok());  // 10 slots over 4 GPUs
  EXPECT_FALSE(deepseek_rebalance_experts(weights, 12, 3, 3, 4).ok());  // 8 experts in 3 groups
  EXPECT_FALSE(deepseek_rebalance_experts(weights, 12, 4, 4, 6).ok());  // 6 GPUs on 4 nodes
}

// Their rebalance_experts, run by tests/data/eplb/make_deepseek_fixture.py, against ours.
TEST(DeepSeekEplb, MatchesTheirEplbPy) {
  auto text = read_text_file(std::string(DEEPINFER_TEST_DATA_DIR) + "/eplb/deepseek_eplb.json");
  ASSERT_TRUE(text.ok()) << text.error().message;
  const nlohmann::json fixture = nlohmann::json::parse(*text);
  int32_t num_layers_checked = 0;
  for (const nlohmann::json& test_case : fixture.at("cases")) {
    const std::string name = test_case.at("name").get<std::string>();
    const auto num_replicas = test_case.at("num_replicas").get<int32_t>();
    const auto num_groups = test_case.at("num_groups").get<int32_t>();
    const auto num_nodes = test_case.at("num_nodes").get<int32_t>();
    const auto num_gpus = test_case.at("num_gpus").get<int32_t>();
    const nlohmann::json& weight = test_case.at("weight");
    for (size_t layer = 0; layer < weight.size(); ++layer) {
      SCOPED_TRACE(name + " layer " + std::to_string(layer));
      const auto loads = weight[layer].get<std::vector<float>>();
      auto tables = deepseek_rebalance_experts(loads, num_replicas, num_groups, num_nodes, num_gpus);
      ASSERT_TRUE(tables.ok()) << tables.error().message;
      EXPECT_EQ(tables->physical_to_logical, test_case.at("phy2log")[layer].get<std::vector<int32_t>>());
      EXPECT_EQ(tables->logical_count, test_case.at("logcnt")[layer].get<std::vector<int32_t>>());
      const auto their_log2phy = test_case.at("log2phy")[layer].get<std::vector<std::vector<int32_t>>>();
      ASSERT_EQ(their_log2phy.size(), loads.size());
      for (size_t e = 0; e < loads.size(); ++e) {
        // Their rows are padded with -1 to the largest count; an expert's copies weigh the same,
        // and torch's unstable sort decides which copy takes which slot (README there).
        std::vector<int32_t> theirs = their_log2phy[e];
        theirs.erase(std::remove(theirs.begin(), theirs.end(), -1), theirs.end());
        std::vector<int32_t> ours = tables->logical_to_physical[e];
        ASSERT_EQ(ours.size(), theirs.size()) << "expert " << e;
        if (ours.size() > 1) {
          std::sort(ours.begin(), ours.end());
          std::sort(theirs.begin(), theirs.end());
        }
        EXPECT_EQ(ours, theirs) << "expert " << e;
      }
      ++num_layers_checked;
    }
  }
  EXPECT_GE(num_layers_checked, 16);
}

}  // namespace
}  // namespace deepinfer
