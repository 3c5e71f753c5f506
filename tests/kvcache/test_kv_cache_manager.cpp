// KvCacheManager contracts, worked by hand with 4-token blocks: allocation and failure, prefix
// hits (from the first token only, per tenant, never the last token), counters, eviction order,
// forks and sliding-window release.
#include "kvcache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/check.h"

namespace deepinfer {
namespace {

constexpr int32_t kBlock = 4;

KvCacheManager make_manager(int32_t num_blocks, int32_t sliding_window = 0, bool prefix_caching = true) {
  KvCacheConfig config;
  config.num_blocks = num_blocks;
  config.block_size = kBlock;
  config.enable_prefix_caching = prefix_caching;
  config.model_fingerprint = "test-model/bf16/kv4";
  config.sliding_window = sliding_window;
  return KvCacheManager(config);
}

std::vector<int32_t> iota_tokens(int32_t count, int32_t first = 100) {
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Allocates the whole prompt, "computes" it and commits it; returns the cached token count.
int32_t run_prompt(KvCacheManager& kv, int64_t seq_id, const std::vector<int32_t>& tokens, std::string_view salt = "") {
  int32_t cached = -1;
  EXPECT_TRUE(kv.allocate(seq_id, tokens, static_cast<int32_t>(tokens.size()), salt, &cached));
  kv.commit_computed(seq_id, tokens, static_cast<int32_t>(tokens.size()));
  kv.check_invariants();
  return cached;
}

TEST(KvCacheManager, AllocateGrowsTheTable) {
  KvCacheManager kv = make_manager(8);
  const std::vector<int32_t> tokens = iota_tokens(10);
  int32_t cached = -1;
  ASSERT_TRUE(kv.allocate(1, tokens, 6, "", &cached));
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(kv.block_table(1), (std::vector<int32_t>{0, 1}));
  ASSERT_TRUE(kv.allocate(1, tokens, 10, "", &cached));
  EXPECT_EQ(kv.block_table(1), (std::vector<int32_t>{0, 1, 2}));
  ASSERT_TRUE(kv.allocate(1, tokens, 9, "", &cached));  // already covered
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  EXPECT_EQ(kv.num_free_blocks(), 5);
  EXPECT_DOUBLE_EQ(kv.usage(), 3.0 / 8.0);
  kv.check_invariants();
  kv.free(1);
  kv.free(1);  // unknown ids are ignored
  EXPECT_FALSE(kv.has(1));
  EXPECT_THROW(kv.block_table(1), InvariantError);
  EXPECT_EQ(kv.num_free_blocks(), 8);
  EXPECT_DOUBLE_EQ(kv.usage(), 0.0);
  kv.check_invariants();
}

TEST(KvCacheManager, FailedAllocateChangesNothing) {
  KvCacheManager kv = make_manager(3);
  const std::vector<int32_t> a = iota_tokens(8);
  run_prompt(kv, 1, a);
  int32_t cached = -1;
  EXPECT_FALSE(kv.allocate(2, iota_tokens(8, 500), 8, "", &cached));
  EXPECT_FALSE(kv.has(2));
  EXPECT_FALSE(kv.allocate(1, a, 13, "", &cached));
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  EXPECT_EQ(kv.num_free_blocks(), 1);
  EXPECT_EQ(kv.stats().queried_tokens, 8);
  kv.check_invariants();
}

TEST(KvCacheManager, PrefixHitSharesFullComputedBlocks) {
  KvCacheManager kv = make_manager(8);
  const std::vector<int32_t> a = iota_tokens(10);
  int32_t cached = -1;
  ASSERT_TRUE(kv.allocate(1, a, 10, "", &cached));
  kv.commit_computed(1, a, 7);  // one full computed block
  EXPECT_EQ(kv.num_cached_tokens(a, ""), 4);
  kv.commit_computed(1, a, 10);
  EXPECT_EQ(kv.num_cached_tokens(a, ""), 8);

  const std::vector<int32_t> b = concat(std::vector<int32_t>(a.begin(), a.begin() + 8), {7, 7, 7});
  EXPECT_EQ(run_prompt(kv, 2, b), 8);
  EXPECT_EQ(kv.block_table(2)[0], kv.block_table(1)[0]);
  EXPECT_EQ(kv.block_table(2)[1], kv.block_table(1)[1]);
  EXPECT_NE(kv.block_table(2)[2], kv.block_table(1)[2]);
  EXPECT_EQ(kv.num_free_blocks(), 8 - 4);
  int32_t later = -1;
  ASSERT_TRUE(kv.allocate(2, b, 12, "", &later));
  EXPECT_EQ(later, 0);  // cached tokens are reported on the first call only
}

TEST(KvCacheManager, NeverCachesTheLastToken) {
  KvCacheManager kv = make_manager(8);
  const std::vector<int32_t> a = iota_tokens(8);
  run_prompt(kv, 1, a);
  EXPECT_EQ(kv.num_cached_tokens(a, ""), 4);  // both blocks cached, but the last token must run
  EXPECT_EQ(kv.num_cached_tokens(concat(a, {1}), ""), 8);
  EXPECT_EQ(kv.num_cached_tokens(std::vector<int32_t>{a[0]}, ""), 0);
  EXPECT_EQ(kv.num_cached_tokens({}, ""), 0);
}

TEST(KvCacheManager, HitsOnlyFromTheFirstToken) {
  KvCacheManager kv = make_manager(16);
  const std::vector<int32_t> x = {1, 2, 3, 4};
  const std::vector<int32_t> y = {5, 6, 7, 8};
  run_prompt(kv, 1, concat(concat(x, y), {9}));
  // The same block contents at another offset.
  EXPECT_EQ(kv.num_cached_tokens(concat(concat({0, 0, 0, 0}, x), {9}), ""), 0);
  // The second block in place, after a different first block.
  EXPECT_EQ(kv.num_cached_tokens(concat(concat({1, 2, 3, 5}, y), {9}), ""), 0);
  EXPECT_EQ(kv.num_cached_tokens(concat(concat(x, {5, 6, 7, 0}), {9}), ""), 4);
}

TEST(KvCacheManager, SaltIsolatesTenants) {
  KvCacheManager kv = make_manager(16);
  const std::vector<int32_t> a = iota_tokens(9);
  run_prompt(kv, 1, a, "tenant-a");
  EXPECT_EQ(kv.num_cached_tokens(a, "tenant-a"), 8);
  EXPECT_EQ(kv.num_cached_tokens(a, "tenant-b"), 0);
  EXPECT_EQ(kv.num_cached_tokens(a, ""), 0);
  EXPECT_EQ(run_prompt(kv, 2, a, "tenant-b"), 0);
  EXPECT_EQ(kv.num_cached_tokens(a, "tenant-b"), 8);
}

TEST(KvCacheManager, SaltHoldsForASequenceStartedWithoutTokens) {
  KvCacheManager kv = make_manager(4);
  const std::vector<int32_t> a = iota_tokens(5);
  int32_t cached = -1;
  ASSERT_TRUE(kv.allocate(1, {}, 5, "tenant-a", &cached));
  kv.commit_computed(1, a, 5);
  EXPECT_EQ(kv.num_cached_tokens(a, "tenant-a"), 4);
  EXPECT_EQ(kv.num_cached_tokens(a, ""), 0);
  kv.check_invariants();
}

TEST(KvCacheManager, CountsQueriedAndHitTokens) {
  KvCacheManager kv = make_manager(16);
  const std::vector<int32_t> a = iota_tokens(9);
  run_prompt(kv, 1, a);
  run_prompt(kv, 2, a);
  run_prompt(kv, 3, concat(std::vector<int32_t>(a.begin(), a.begin() + 5), {0, 0}));
  EXPECT_EQ(kv.num_cached_tokens(a, ""), 8);  // a query that does not allocate is not counted
  EXPECT_EQ(kv.stats().queried_tokens, 9 + 9 + 7);
  EXPECT_EQ(kv.stats().hit_tokens, 0 + 8 + 4);
}

TEST(KvCacheManager, DisabledPrefixCachingNeverHits) {
  KvCacheManager kv = make_manager(6, 0, false);
  const std::vector<int32_t> a = iota_tokens(9);
  EXPECT_EQ(run_prompt(kv, 1, a), 0);
  EXPECT_EQ(run_prompt(kv, 2, a), 0);
  EXPECT_EQ(kv.num_cached_tokens(a, ""), 0);
  EXPECT_NE(kv.block_table(1)[0], kv.block_table(2)[0]);
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  EXPECT_EQ(kv.stats().queried_tokens, 0);
  kv.check_invariants();
}

TEST(KvCacheManager, EvictableHitsCountAgainstRoom) {
  KvCacheManager kv = make_manager(3);
  const std::vector<int32_t> a = iota_tokens(9);
  run_prompt(kv, 1, a);
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), 3);
  int32_t cached = -1;
  // 13 tokens need 4 blocks: the 2 cached ones and 2 fresh, one more than the pool has. The
  // failed attempt must not evict the cached blocks.
  EXPECT_FALSE(kv.allocate(2, concat(a, {1, 2, 3, 4}), 13, "", &cached));
  EXPECT_EQ(kv.num_cached_tokens(a, ""), 8);
  EXPECT_TRUE(kv.allocate(2, concat(a, {1, 2, 3}), 12, "", &cached));
  EXPECT_EQ(cached, 8);
  EXPECT_EQ(kv.num_free_blocks(), 0);
  kv.check_invariants();
}

TEST(KvCacheManager, FreeEvictsTheChainFromItsTail) {
  KvCacheManager kv = make_manager(3);
  const std::vector<int32_t> a = iota_tokens(12);
  run_prompt(kv, 1, a);
  kv.free(1);
  const std::vector<int32_t> probe = concat(a, {0});
  EXPECT_EQ(kv.num_cached_tokens(probe, ""), 12);
  int32_t cached = -1;
  ASSERT_TRUE(kv.allocate(2, std::vector<int32_t>{7}, 1, "", &cached));
  EXPECT_EQ(kv.num_cached_tokens(probe, ""), 8);
  ASSERT_TRUE(kv.allocate(3, std::vector<int32_t>{8}, 1, "", &cached));
  EXPECT_EQ(kv.num_cached_tokens(probe, ""), 4);
  kv.check_invariants();
}

TEST(KvCacheManager, ForkSharesFullBlocksAndCopiesThePartialOne) {
  KvCacheManager kv = make_manager(5);
  const std::vector<int32_t> a = iota_tokens(10);
  run_prompt(kv, 1, a);
  std::vector<std::pair<int32_t, int32_t>> copies;
  ASSERT_TRUE(kv.fork(1, 2, &copies));
  const std::vector<int32_t>& parent = kv.block_table(1);
  const std::vector<int32_t>& child = kv.block_table(2);
  ASSERT_EQ(child.size(), 3u);
  EXPECT_EQ(child[0], parent[0]);
  EXPECT_EQ(child[1], parent[1]);
  EXPECT_NE(child[2], parent[2]);
  EXPECT_EQ(copies, (std::vector<std::pair<int32_t, int32_t>>{{parent[2], child[2]}}));
  EXPECT_EQ(kv.num_free_blocks(), 1);
  kv.check_invariants();
  // Each sequence grows on its own; the shared blocks stay until both are gone.
  int32_t cached = -1;
  ASSERT_TRUE(kv.allocate(2, concat(a, {1, 2, 3}), 13, "", &cached));
  EXPECT_FALSE(kv.fork(1, 3, &copies));  // no free block for the copy
  EXPECT_FALSE(kv.has(3));
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), 1);  // the parent's partial block; the shared two remain
  kv.free(2);
  EXPECT_EQ(kv.num_free_blocks(), 5);
  kv.check_invariants();
}

TEST(KvCacheManager, ForkOfFullBlocksCopiesNothing) {
  KvCacheManager kv = make_manager(4);
  const std::vector<int32_t> a = iota_tokens(8);
  int32_t cached = -1;
  ASSERT_TRUE(kv.allocate(1, a, 12, "", &cached));  // a block ahead of the computed tokens
  kv.commit_computed(1, a, 8);
  std::vector<std::pair<int32_t, int32_t>> copies;
  ASSERT_TRUE(kv.fork(1, 2, &copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(kv.block_table(2), (std::vector<int32_t>{kv.block_table(1)[0], kv.block_table(1)[1]}));
  kv.check_invariants();
}

TEST(KvCacheManager, SlidingWindowReleasesBlocksBehindTheWindow) {
  // Window 6: after 10 computed tokens the next one (position 10) sees keys 5..10, so block 0
  // (positions 0-3) can go and block 1 (4-7) must stay.
  KvCacheManager kv = make_manager(6, 6);
  const std::vector<int32_t> a = iota_tokens(20);
  int32_t cached = -1;
  ASSERT_TRUE(kv.allocate(1, a, 20, "", &cached));
  const std::vector<int32_t> full = kv.block_table(1);
  kv.commit_computed(1, a, 9);
  EXPECT_EQ(kv.block_table(1)[0], full[0]);
  kv.commit_computed(1, a, 10);
  EXPECT_EQ(kv.block_table(1), (std::vector<int32_t>{-1, full[1], full[2], full[3], full[4]}));
  kv.commit_computed(1, a, 20);  // next position 20 sees 15..20: blocks 3 (12-15) and 4 stay
  EXPECT_EQ(kv.block_table(1), (std::vector<int32_t>{-1, -1, -1, full[3], full[4]}));
  kv.check_invariants();
  // Released blocks were registered first: a request with the same prefix walks the chain
  // through them but references only the blocks its own window needs.
  EXPECT_EQ(kv.num_cached_tokens(concat(a, {0}), ""), 20);
  EXPECT_EQ(run_prompt(kv, 2, concat(a, {0})), 20);
  EXPECT_EQ(kv.block_table(2)[0], -1);
  EXPECT_EQ(kv.block_table(2)[2], -1);
  EXPECT_EQ(kv.block_table(2)[3], full[3]);
  EXPECT_EQ(kv.block_table(2)[4], full[4]);
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  kv.check_invariants();
}

TEST(KvCacheManager, SlidingWindowWithoutCachingFreesReleasedBlocks) {
  KvCacheManager kv = make_manager(3, 4, false);
  const std::vector<int32_t> a = iota_tokens(12);
  int32_t cached = -1;
  ASSERT_TRUE(kv.allocate(1, a, 8, "", &cached));
  kv.commit_computed(1, a, 8);
  EXPECT_EQ(kv.block_table(1)[0], -1);
  // The released block is free again, so the sequence can keep growing in a 3-block pool.
  ASSERT_TRUE(kv.allocate(1, a, 12, "", &cached));
  ASSERT_TRUE(kv.allocate(2, std::vector<int32_t>{1}, 1, "", &cached));
  kv.check_invariants();
}

}  // namespace
}  // namespace deepinfer
