// The cluster simulation on traces small enough to work out by hand from the cost model.
#include <gtest/gtest.h>

#include <vector>

#include "cluster/baseline_policies.h"
#include "cluster/cluster_sim.h"

namespace deepinfer {
namespace {

TraceRequest request(double timestamp_ms, int64_t input_tokens, int64_t output_tokens, std::vector<uint64_t> blocks) {
  return TraceRequest{timestamp_ms, input_tokens, output_tokens, std::move(blocks)};
}

ClusterSimConfig one_and_one() {
  ClusterSimConfig config;
  config.num_prefill_instances = 1;
  config.num_decode_instances = 1;
  config.prefill_step_budget_ms = 1e9;  // whole prompts in one step
  return config;
}

TEST(ClusterSim, OneRequestTakesItsPrefillThenOneDecodeStepPerFurtherToken) {
  const ClusterSimConfig config = one_and_one();
  const std::vector<TraceRequest> trace = {request(0, 1024, 3, {10, 11})};
  LeastLoadedPolicy policy;
  const ClusterSimResult result = simulate_cluster(trace, config, policy, nullptr);
  const CostModel& cost = config.cost_model;
  const double prefill_ms = cost.prefill_ms(1024, 0);
  // Tokens 2 and 3 come from two decode steps of a batch of one, at contexts 1025 and 1026.
  const double decode_ms = cost.decode_step_ms(1, 1025) + cost.decode_step_ms(1, 1026);
  EXPECT_EQ(result.num_finished, 1);
  EXPECT_DOUBLE_EQ(result.ttft_p50_ms, prefill_ms);
  EXPECT_NEAR(result.tpot_p50_ms, decode_ms / 2, 1e-9);
  EXPECT_NEAR(result.makespan_ms, prefill_ms + decode_ms, 1e-9);
  EXPECT_EQ(result.generated_tokens, 3);
  EXPECT_EQ(result.cached_tokens, 0);
  EXPECT_NEAR(result.balanced_fraction, 1, 1e-12);
}

TEST(ClusterSim, ALaterRequestReusesTheSharedFullBlocksButNeverItsLastToken) {
  ClusterSimConfig config = one_and_one();
  // The first prompt is exactly two full blocks, both cached after its prefill; the second
  // (1500 tokens) starts with the same two and reuses them. A prompt never reuses its last token,
  // so 1024 tokens with both blocks cached would still compute one.
  const std::vector<TraceRequest> trace = {request(0, 1024, 1, {10, 11}), request(10'000, 1500, 1, {10, 11, 12})};
  RoundRobinPolicy policy;
  const ClusterSimResult result = simulate_cluster(trace, config, policy, nullptr);
  EXPECT_EQ(result.cached_tokens, 1024);
  EXPECT_EQ(result.local_cached_tokens, 1024);
  EXPECT_EQ(result.computed_prefill_tokens, 1024 + 476);
  // The second arrives at an idle instance: 476 new tokens after 1024 cached.
  EXPECT_NEAR(result.makespan_ms, 10'000 + config.cost_model.prefill_ms(476, 1024), 1e-9);
}

TEST(ClusterSim, ASharedStoreLetsAnotherInstanceReuseAPrefixAtItsLoadCost) {
  ClusterSimConfig config = one_and_one();
  config.num_prefill_instances = 2;
  const std::vector<TraceRequest> trace = {request(0, 2000, 1, {1, 2, 3, 4}), request(10'000, 2000, 1, {1, 2, 3, 4})};
  RoundRobinPolicy with_store;
  const ClusterSimResult shared = simulate_cluster(trace, config, with_store, nullptr);
  // Three full blocks (1536 tokens) reusable; the second request runs on the other instance.
  EXPECT_EQ(shared.cached_tokens, 1536);
  EXPECT_EQ(shared.local_cached_tokens, 0);
  const CostModel& cost = config.cost_model;
  EXPECT_NEAR(shared.makespan_ms, 10'000 + cost.store_load_ms(1536) + cost.prefill_ms(464, 1536), 1e-9);
  config.shared_store = false;
  RoundRobinPolicy without_store;
  EXPECT_EQ(simulate_cluster(trace, config, without_store, nullptr).cached_tokens, 0);
}

TEST(ClusterSim, QueuedPromptsWaitAndTheBalancedFractionSeesAnIdleInstance) {
  ClusterSimConfig config = one_and_one();
  config.num_prefill_instances = 2;
  const std::vector<TraceRequest> trace = {request(0, 4000, 1, {}), request(0, 4000, 1, {})};
  SingleInstancePolicy single;
  const ClusterSimResult queued = simulate_cluster(trace, config, single, nullptr);
  // The first prompt's step starts as it arrives; the second waits for it: TTFTs t and 2t, whose
  // median (interpolated) is 1.5t.
  const double one_ms = config.cost_model.prefill_ms(4000, 0);
  EXPECT_NEAR(queued.ttft_p50_ms, 1.5 * one_ms, 1e-9);
  // All the work on one of two instances: the balanced makespan is half the simulated one.
  EXPECT_NEAR(queued.balanced_fraction, 0.5, 1e-12);
  EXPECT_NEAR(queued.prefill_busy_max_over_mean, 2, 1e-12);
  RoundRobinPolicy spread;
  EXPECT_NEAR(simulate_cluster(trace, config, spread, nullptr).balanced_fraction, 1, 1e-12);
}

}  // namespace
}  // namespace deepinfer
