// Retention: sliding TTL per traffic class with an injected clock, capacity eviction order
// (probation first, then fewest uses and deepest), admission (a new page is not its own victim).
#include <gtest/gtest.h>

#include <algorithm>

#include "kvstore/host_tier.h"
#include "kvstore/retention.h"
#include "kvstore_test_util.h"

namespace deepinfer {
namespace {

BlockHash hash_of(int i) {
  BlockHash hash{};
  hash[0] = static_cast<uint8_t>(i);
  hash[1] = static_cast<uint8_t>(i >> 8);
  return hash;
}

PageEntryInfo info(int64_t bytes, int32_t depth, TrafficClass traffic_class = TrafficClass::kDefault) {
  return PageEntryInfo{bytes, depth, traffic_class};
}

constexpr int64_t kHour = 3600;
constexpr int64_t kDay = 24 * kHour;

TEST(Retention, DefaultTtlsFollowTheSeeds) {
  const RetentionConfig config;
  EXPECT_EQ(config.ttl_s(TrafficClass::kDefault), 72 * kHour);
  EXPECT_EQ(config.ttl_s(TrafficClass::kChat), 7 * kDay);
  EXPECT_EQ(config.ttl_s(TrafficClass::kAgent), 3 * kDay);
}

TEST(Retention, TtlPerClassExpiresAndHitsRefreshIt) {
  RetentionPolicy policy(RetentionConfig{}, 1 << 20);
  ASSERT_TRUE(policy.admit(hash_of(1), info(10, 0, TrafficClass::kChat), 0));
  ASSERT_TRUE(policy.admit(hash_of(2), info(10, 0, TrafficClass::kAgent), 0));
  ASSERT_TRUE(policy.admit(hash_of(3), info(10, 0, TrafficClass::kDefault), 0));
  EXPECT_TRUE(policy.take_expired(3 * kDay - 1).empty());
  // Day 3: the agent and default pages (both 72 h) go; the chat page stays.
  std::vector<BlockHash> expired = policy.take_expired(3 * kDay);
  std::sort(expired.begin(), expired.end());
  EXPECT_EQ(expired, (std::vector<BlockHash>{hash_of(2), hash_of(3)}));
  // A hit on day 6 restarts the chat page's 7 days.
  EXPECT_TRUE(policy.touch(hash_of(1), 6 * kDay));
  EXPECT_TRUE(policy.take_expired(7 * kDay).empty());
  EXPECT_EQ(policy.take_expired(13 * kDay), std::vector<BlockHash>{hash_of(1)});
  EXPECT_EQ(policy.num_pages(), 0u);
}

TEST(Retention, ATouchAfterTheTtlIsAMiss) {
  RetentionPolicy policy(RetentionConfig{}, 1 << 20);
  ASSERT_TRUE(policy.admit(hash_of(1), info(10, 0), 100));
  EXPECT_FALSE(policy.touch(hash_of(1), 100 + 72 * kHour));
  EXPECT_FALSE(policy.contains(hash_of(1)));
}

TEST(Retention, RewritingAnExpiredPageAdmitsItAgain) {
  RetentionPolicy policy(RetentionConfig{}, 1 << 20);
  ASSERT_TRUE(policy.admit(hash_of(1), info(10, 0), 0));
  ASSERT_TRUE(policy.admit(hash_of(1), info(10, 0), 72 * kHour));
  EXPECT_TRUE(policy.contains(hash_of(1)));
  EXPECT_EQ(policy.used_bytes(), 10);
  EXPECT_TRUE(policy.take_expired(72 * kHour + 1).empty());
}

TEST(Retention, ProbationPagesGoFirstThenFewestUsesThenDeepest) {
  RetentionConfig config;
  config.probation_fraction = 0.5;
  RetentionPolicy policy(config, 100);
  // Four protected pages: used once each, depths 0..3; page 0 used twice more.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(policy.admit(hash_of(i), info(20, i), 0));
    ASSERT_TRUE(policy.touch(hash_of(i), 1));
  }
  ASSERT_TRUE(policy.touch(hash_of(0), 2));
  ASSERT_TRUE(policy.touch(hash_of(0), 3));
  // A new page fits (100 bytes).
  auto victims = policy.admit(hash_of(10), info(20, 5), 4);
  ASSERT_TRUE(victims);
  EXPECT_TRUE(victims->empty());
  // Another new page: probation (40 bytes with it) is within its 50-byte share, so the least
  // valuable protected page goes: one use, deepest (page 3).
  victims = policy.admit(hash_of(11), info(20, 6), 5);
  ASSERT_TRUE(victims);
  EXPECT_EQ(*victims, std::vector<BlockHash>{hash_of(3)});
  // Probation would hold 60 > 50 bytes: its oldest page (10) goes, never the page being admitted.
  victims = policy.admit(hash_of(12), info(20, 7), 6);
  ASSERT_TRUE(victims);
  EXPECT_EQ(*victims, std::vector<BlockHash>{hash_of(10)});
  EXPECT_TRUE(policy.contains(hash_of(12)));
  // A scan of one-off pages only churns probation: the re-used pages survive it.
  for (int i = 20; i < 30; ++i) ASSERT_TRUE(policy.admit(hash_of(i), info(20, 9), 7));
  for (int i : {0, 1, 2}) EXPECT_TRUE(policy.contains(hash_of(i))) << i;
  for (int i = 20; i < 28; ++i) EXPECT_FALSE(policy.contains(hash_of(i))) << i;
  EXPECT_TRUE(policy.contains(hash_of(29)));
  EXPECT_LE(policy.used_bytes(), 100);
}

TEST(Retention, APageLargerThanTheTierIsNotAdmitted) {
  RetentionPolicy policy(RetentionConfig{}, 100);
  EXPECT_FALSE(policy.admit(hash_of(1), info(101, 0), 0).has_value());
  EXPECT_EQ(policy.num_pages(), 0u);
}

TEST(Retention, HostTierExpiresWithAnInjectedClock) {
  int64_t now = 1000;
  RetentionConfig config;
  config.clock = [&] { return now; };
  config.default_ttl_s = 60;
  HostTier tier(1 << 20, config);
  const auto pages = testing::make_chain(2, 4, 64);
  PageContent content{PageIdentity{pages[0].request.hash, 1, 0, pages[0].request.token_ids}, TrafficClass::kDefault,
                      now, pages[0].payload};
  ASSERT_TRUE(tier.put(pages[0].request.hash, info(100, 0), encode_page(content, default_host_allocator())));
  now += 59;
  EXPECT_TRUE(tier.get(pages[0].request.hash).has_value());  // refreshed: lives until 1119
  now += 59;
  tier.expire();
  EXPECT_TRUE(tier.contains(pages[0].request.hash));
  now += 1;
  tier.expire();
  EXPECT_FALSE(tier.contains(pages[0].request.hash));
  EXPECT_EQ(tier.stats().expirations, 1);
}

}  // namespace
}  // namespace deepinfer
