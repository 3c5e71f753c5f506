// The baseline policies' choices on hand-built snapshots; each expectation follows from the
// policy's rule as documented in cluster/baseline_policies.h.
#include <gtest/gtest.h>

#include <vector>

#include "cluster/baseline_policies.h"
#include "cluster/seeds_policy.h"

namespace deepinfer {
namespace {

InstanceLoad prefill_load(int64_t queued_tokens, int64_t cached_prefix_tokens = 0) {
  InstanceLoad load;
  load.queued_prefill_tokens = queued_tokens;
  load.cached_prefix_tokens = cached_prefix_tokens;
  return load;
}

InstanceLoad decode_load(int32_t running, int64_t kv_used) {
  InstanceLoad load;
  load.num_running_requests = running;
  load.kv_tokens_used = kv_used;
  load.kv_tokens_free = 1'000'000;
  return load;
}

RoutingRequest request_of(int64_t input_tokens) {
  RoutingRequest request;
  request.input_tokens = input_tokens;
  return request;
}

TEST(RoundRobinPolicy, CyclesPrefillAndDecodeEachOnItsOwn) {
  RoundRobinPolicy policy;
  const std::vector<InstanceLoad> three(3);
  const std::vector<InstanceLoad> two(2);
  const RoutingRequest request = request_of(100);
  EXPECT_EQ(policy.choose_prefill(request, three), 0u);
  EXPECT_EQ(policy.choose_prefill(request, three), 1u);
  EXPECT_EQ(policy.choose_decode(request, two), 0u);
  EXPECT_EQ(policy.choose_prefill(request, three), 2u);
  EXPECT_EQ(policy.choose_prefill(request, three), 0u);
  EXPECT_EQ(policy.choose_decode(request, two), 1u);
  EXPECT_EQ(policy.choose_decode(request, two), 0u);
}

TEST(LeastLoadedPolicy, PrefillTakesTheFewestQueuedTokensAndTheLowestIndexOnATie) {
  LeastLoadedPolicy policy;
  const std::vector<InstanceLoad> loads = {prefill_load(500), prefill_load(100), prefill_load(100), prefill_load(300)};
  EXPECT_EQ(policy.choose_prefill(request_of(1000), loads), 1u);
}

TEST(LeastLoadedPolicy, DecodeTakesTheFewestRequestsThenTheLeastKv) {
  LeastLoadedPolicy policy;
  const std::vector<InstanceLoad> loads = {decode_load(3, 100), decode_load(2, 900), decode_load(2, 400)};
  EXPECT_EQ(policy.choose_decode(request_of(1000), loads), 2u);
}

TEST(PrefixAffinityPolicy, FollowsAPrefixCoveringHalfThePromptWhateverTheLoad) {
  PrefixAffinityPolicy policy;
  EXPECT_TRUE(policy.reads_cached_prefix());
  const std::vector<InstanceLoad> loads = {prefill_load(0, 0), prefill_load(99'999, 2048), prefill_load(0, 1024)};
  EXPECT_EQ(policy.choose_prefill(request_of(4096), loads), 1u);
}

TEST(PrefixAffinityPolicy, AmongEqualPrefixesTakesTheLeastQueued) {
  PrefixAffinityPolicy policy;
  const std::vector<InstanceLoad> loads = {prefill_load(900, 3072), prefill_load(200, 3072), prefill_load(0, 512)};
  EXPECT_EQ(policy.choose_prefill(request_of(4096), loads), 1u);
}

TEST(PrefixAffinityPolicy, FallsBackToLeastLoadedBelowHalfThePrompt) {
  PrefixAffinityPolicy policy;
  // 1536 of 4096 tokens is under half: the fewest queued tokens decide.
  const std::vector<InstanceLoad> loads = {prefill_load(700, 0), prefill_load(50, 1536), prefill_load(20, 0)};
  EXPECT_EQ(policy.choose_prefill(request_of(4096), loads), 2u);
}

TEST(SingleInstancePolicy, SendsEverythingToTheFirstInstance) {
  SingleInstancePolicy policy;
  const std::vector<InstanceLoad> loads = {prefill_load(1'000'000), prefill_load(0)};
  EXPECT_EQ(policy.choose_prefill(request_of(10), loads), 0u);
  EXPECT_EQ(policy.choose_decode(request_of(10), loads), 0u);
}

TEST(BalancerPolicy, MakesEveryNamedPolicyAndRejectsAnUnknownName) {
  for (const std::string& name : balancer_policy_names()) {
    auto policy = make_balancer_policy(name, CostModel{}, SeedsPolicyOptions{});
    ASSERT_TRUE(policy.ok()) << name;
    EXPECT_EQ((*policy)->name(), name);
  }
  EXPECT_EQ(balancer_policy_names().front(), "seeds");
  auto unknown = make_balancer_policy("random", CostModel{}, SeedsPolicyOptions{});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("round-robin"), std::string::npos) << unknown.error().message;
}

}  // namespace
}  // namespace deepinfer
