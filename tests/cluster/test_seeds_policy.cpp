// The seeds' policy on hand-built snapshots: length buckets and their demand-following split,
// quota pull between DP groups (of a fixed size, or as the instances name them), least-loaded
// inside a group, and the decode rule. Expectations
// follow from the rules (cluster/seeds_policy.h, cluster/length_buckets.h), worked out by hand.
#include <gtest/gtest.h>

#include <vector>

#include "cluster/seeds_policy.h"

namespace deepinfer {
namespace {

// One millisecond a token and nothing else, so a request's demand is its length.
CostModel one_ms_a_token() {
  CostModel model;
  model.prefill_step_overhead_ms = 0;
  model.prefill_per_token_ms = 1;
  model.prefill_attention_per_token_pair_ms = 0;
  model.store_load_per_token_ms = 0;
  return model;
}

RoutingRequest request_at(double now_ms, int64_t input_tokens) {
  RoutingRequest request;
  request.now_ms = now_ms;
  request.input_tokens = input_tokens;
  return request;
}

std::vector<InstanceLoad> queued_ms(const std::vector<double>& milliseconds) {
  std::vector<InstanceLoad> loads(milliseconds.size());
  for (size_t i = 0; i < milliseconds.size(); ++i) loads[i].queued_prefill_ms = milliseconds[i];
  return loads;
}

InstanceLoad decode_load(int32_t running, int64_t kv_used, int64_t kv_free = 1'000'000) {
  InstanceLoad load;
  load.num_running_requests = running;
  load.kv_tokens_used = kv_used;
  load.kv_tokens_free = kv_free;
  return load;
}

TEST(LengthBuckets, BucketsAtTheSeedsBoundaries) {
  EXPECT_EQ(LengthBuckets::bucket_of(1), 0);
  EXPECT_EQ(LengthBuckets::bucket_of(16383), 0);
  EXPECT_EQ(LengthBuckets::bucket_of(16384), 1);
  EXPECT_EQ(LengthBuckets::bucket_of(65535), 1);
  EXPECT_EQ(LengthBuckets::bucket_of(65536), 2);
  EXPECT_EQ(LengthBuckets::bucket_of(262143), 2);
  EXPECT_EQ(LengthBuckets::bucket_of(262144), 3);
}

TEST(LengthBuckets, NoSplitUntilTheFirstWindowEnds) {
  LengthBuckets buckets(1000);
  buckets.record(0, 0, 500);
  buckets.record(999, 2, 500);
  EXPECT_FALSE(buckets.has_split());
  EXPECT_EQ(buckets.instances_for(3, 8), (std::pair<size_t, size_t>{0, 8}));
}

TEST(LengthBuckets, SplitsInstancesByTheLastWindowsDemand) {
  LengthBuckets buckets(1000);
  buckets.record(0, 0, 20000);
  buckets.record(10, 1, 60000);
  buckets.record(1500, 0, 1);  // opens the second window: the first one's demand is adopted
  // Shares 1/4 and 3/4 of 8 instances: 2 and 6, in bucket order.
  EXPECT_EQ(buckets.split(8), (std::array<size_t, 4>{2, 6, 0, 0}));
  EXPECT_EQ(buckets.instances_for(0, 8), (std::pair<size_t, size_t>{0, 2}));
  EXPECT_EQ(buckets.instances_for(1, 8), (std::pair<size_t, size_t>{2, 8}));
  // Bucket 2 has none: its nearest neighbour with instances is bucket 1; bucket 3's too.
  EXPECT_EQ(buckets.instances_for(2, 8), (std::pair<size_t, size_t>{2, 8}));
  EXPECT_EQ(buckets.instances_for(3, 8), (std::pair<size_t, size_t>{2, 8}));
  // The second window (demand only in bucket 0) is adopted once a third begins.
  buckets.record(2000, 3, 1);
  EXPECT_EQ(buckets.split(8), (std::array<size_t, 4>{8, 0, 0, 0}));
}

TEST(LengthBuckets, EveryBucketWithDemandGetsOneThenTheFurthestBelowItsShare) {
  LengthBuckets buckets(1000);
  for (int bucket = 0; bucket < 4; ++bucket) buckets.record(0, bucket, 100);
  buckets.record(1000, 0, 1);
  // Equal shares of 6 are 1.5 each: one apiece, then the two spare ones to the first buckets.
  EXPECT_EQ(buckets.split(6), (std::array<size_t, 4>{2, 2, 1, 1}));
}

TEST(LengthBuckets, FewerInstancesThanBucketsGoToTheLargestDemands) {
  LengthBuckets buckets(1000);
  buckets.record(0, 0, 1);
  buckets.record(0, 1, 5);
  buckets.record(0, 2, 3);
  buckets.record(1000, 0, 1);
  EXPECT_EQ(buckets.split(2), (std::array<size_t, 4>{0, 1, 1, 0}));
  // Bucket 0 has none and borrows bucket 1's instance, its nearest neighbour.
  EXPECT_EQ(buckets.instances_for(0, 2), (std::pair<size_t, size_t>{0, 1}));
  EXPECT_EQ(buckets.instances_for(2, 2), (std::pair<size_t, size_t>{1, 2}));
}

TEST(SeedsPolicy, TheGroupWithTheMostQuotaLeftPullsTheRequestNotTheIdlestInstance) {
  SeedsPolicy policy(one_ms_a_token(), SeedsPolicyOptions{.window_ms = 1000, .quota_ms = 1000, .group_size = 4});
  // Quota left, the sum of what each process lacks of 1000 ms: group [0, 4) has
  // 1000 + 600 + 700 + 700 = 3000 although instance 0 is idle, group [4, 8) 800 + 800 + 840 + 800
  // = 3240. The second group pulls it, and inside it the least queued work, instance 6, takes it
  // (a flat least-loaded choice would have been instance 0).
  const auto loads = queued_ms({0, 400, 300, 300, 200, 200, 160, 200});
  EXPECT_EQ(policy.choose_prefill(request_at(0, 1000), loads), 6u);
}

TEST(SeedsPolicy, InstancesThatNameTheirDpGroupAreGroupedByItNotByTheGroupSize) {
  SeedsPolicy policy(one_ms_a_token(), SeedsPolicyOptions{.window_ms = 1000, .quota_ms = 1000, .group_size = 2});
  // By the group size: [0, 2) has 1000 + 1000 ms of quota left, [2, 4) 900 + 900; the first pulls
  // and its first idle instance takes it.
  auto loads = queued_ms({0, 0, 100, 100});
  EXPECT_EQ(policy.choose_prefill(request_at(0, 1000), loads), 0u);
  // Named groups {0} (1000 ms left) and {1, 2, 3} (1000 + 900 + 900): the second pulls, and inside
  // it the least queued, instance 1, takes it.
  for (size_t i = 0; i < loads.size(); ++i) loads[i].dp_group = i == 0 ? 0 : 1;
  EXPECT_EQ(policy.choose_prefill(request_at(1, 1000), loads), 1u);
}

TEST(SeedsPolicy, InsideTheGroupTheLeastQueuedComputeWinsAndTheLowestIndexOnATie) {
  SeedsPolicy policy(one_ms_a_token(), SeedsPolicyOptions{.window_ms = 1000, .quota_ms = 500, .group_size = 8});
  const auto loads = queued_ms({50, 30, 70, 30, 90, 40, 30, 60});
  EXPECT_EQ(policy.choose_prefill(request_at(0, 1000), loads), 1u);
}

TEST(SeedsPolicy, AProcessBusyWithALongPromptTakesNoQuotaFromTheRestOfItsGroup) {
  SeedsPolicy policy(one_ms_a_token(), SeedsPolicyOptions{.window_ms = 1000, .quota_ms = 1000, .group_size = 4});
  // Group [0, 4): three processes far over quota, one idle: 1000 ms left. Group [4, 8): 4 x 100.
  const auto loads = queued_ms({5000, 5000, 5000, 0, 900, 900, 900, 900});
  EXPECT_EQ(policy.choose_prefill(request_at(0, 1000), loads), 3u);
}

TEST(SeedsPolicy, HoldsTheRequestWhileNoGroupHasQuotaAndCountsItsDemandOnce) {
  SeedsPolicy policy(one_ms_a_token(), SeedsPolicyOptions{.window_ms = 1000, .quota_ms = 500, .group_size = 4});
  EXPECT_EQ(policy.choose_prefill(request_at(0, 3000), queued_ms({500, 600, 700, 800})), std::nullopt);
  RoutingRequest retry = request_at(10, 3000);
  retry.is_retry = true;
  EXPECT_EQ(policy.choose_prefill(retry, queued_ms({500, 499, 700, 800})), 1u);
  // One 3000-token request of demand in the first window (not two): a 20000-token request's
  // 20000 ms alongside it split 8 instances 1 / 7, not 2 / 6.
  policy.choose_prefill(request_at(20, 20000), queued_ms({0, 0, 0, 0}));
  policy.choose_prefill(request_at(1000, 10), queued_ms(std::vector<double>(8, 0)));
  EXPECT_EQ(policy.buckets().split(8), (std::array<size_t, 4>{1, 7, 0, 0}));
}

TEST(SeedsPolicy, ARequestStaysInsideItsLengthBucketsInstances) {
  SeedsPolicy policy(one_ms_a_token(), SeedsPolicyOptions{.window_ms = 1000, .quota_ms = 1000, .group_size = 8});
  const auto idle = queued_ms(std::vector<double>(8, 0));
  // First window: 20000 ms of demand under 16K tokens, 60000 ms in 16-64K: a 2 / 6 split.
  policy.choose_prefill(request_at(0, 10000), idle);
  policy.choose_prefill(request_at(0, 10000), idle);
  policy.choose_prefill(request_at(0, 60000), idle);
  // In the next window a short request may only go to instances 0-1, even when they are the
  // busiest (quota left: 100 + 200); a 40K one only to 2-7.
  const auto loads = queued_ms({900, 800, 10, 10, 5, 10, 10, 10});
  EXPECT_EQ(policy.choose_prefill(request_at(1000, 3000), loads), 1u);
  EXPECT_EQ(policy.choose_prefill(request_at(1001, 40000), loads), 4u);
}

TEST(SeedsPolicy, DecodeSendsAShortRequestToTheFewestRequestsPreferringTheLongerCache) {
  SeedsPolicy policy(CostModel{}, SeedsPolicyOptions{});
  // 20 requests hold 186000 tokens: a mean context of 9300.
  const std::vector<InstanceLoad> loads = {decode_load(10, 100000), decode_load(2, 5000), decode_load(2, 80000),
                                           decode_load(6, 1000)};
  // 2000 tokens is short: fewest requests (1 and 2 tie at 2), then the longer cache: 2.
  EXPECT_EQ(policy.choose_decode(request_at(0, 2000), loads), 2u);
}

TEST(SeedsPolicy, DecodeSendsALongRequestToTheLeastKv) {
  SeedsPolicy policy(CostModel{}, SeedsPolicyOptions{});
  const std::vector<InstanceLoad> loads = {decode_load(10, 100000), decode_load(2, 5000), decode_load(2, 80000),
                                           decode_load(6, 1000)};
  EXPECT_EQ(policy.choose_decode(request_at(0, 50000), loads), 3u);
  // A known output length counts: 5000 in + 10000 out = 15000 is over the mean of 9300.
  RoutingRequest with_output = request_at(0, 5000);
  with_output.output_tokens_estimate = 10000;
  EXPECT_EQ(policy.choose_decode(with_output, loads), 3u);
}

TEST(SeedsPolicy, DecodeSkipsInstancesWithoutRoomForTheRequest) {
  SeedsPolicy policy(CostModel{}, SeedsPolicyOptions{});
  // The least KV in use (instance 0) has only 10000 tokens of room left for a 50000-token request.
  const std::vector<InstanceLoad> loads = {decode_load(1, 0, 10000), decode_load(5, 20000), decode_load(3, 30000)};
  EXPECT_EQ(policy.choose_decode(request_at(0, 50000), loads), 1u);
}

}  // namespace
}  // namespace deepinfer
