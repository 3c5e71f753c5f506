// KvCacheManager with separate sliding-window tables (num_swa_blocks > 0), worked by hand with
// 4-token blocks and an 8-token window: the sliding layers' pages stay bounded by the window
// while the full-attention table keeps every page; prefix hits need the window's pages; forks
// copy the partial block in both groups; allocation is all-or-nothing across the two pools.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kvcache/kv_cache_manager.h"

namespace deepinfer {
namespace {

constexpr int32_t kBlock = 4;
constexpr int32_t kWindow = 8;

KvCacheManager make_split(int32_t num_blocks, int32_t num_swa_blocks) {
  KvCacheConfig config;
  config.num_blocks = num_blocks;
  config.block_size = kBlock;
  config.model_fingerprint = "test-model/split";
  config.sliding_window = kWindow;
  config.num_swa_blocks = num_swa_blocks;
  return KvCacheManager(config);
}

std::vector<int32_t> iota_tokens(int32_t count, int32_t first = 100) {
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

int32_t live(const std::vector<int32_t>& table) {
  return static_cast<int32_t>(std::count_if(table.begin(), table.end(), [](int32_t b) { return b >= 0; }));
}

// Token by token to 200 tokens: the full table grows to 50 pages, the sliding table never holds
// more than the window's 2 pages plus the partly filled one and the one being written.
TEST(KvCacheSwa, LongDecodeKeepsSlidingPagesBoundedByTheWindow) {
  KvCacheManager kv = make_split(64, 6);
  ASSERT_TRUE(kv.has_swa_tables());
  const std::vector<int32_t> tokens = iota_tokens(200);
  int32_t cached = 0;
  int32_t max_used = 0;
  for (int32_t n = 1; n <= 200; ++n) {
    ASSERT_TRUE(kv.allocate(7, tokens, n, "", &cached)) << "token " << n;
    kv.commit_computed(7, tokens, n);
    max_used = std::max(max_used, kv.num_used_swa_blocks());
    ASSERT_EQ(live(kv.swa_block_table(7)), kv.num_used_swa_blocks());
    kv.check_invariants();
  }
  EXPECT_EQ(kv.block_table(7).size(), 50u);
  EXPECT_EQ(live(kv.block_table(7)), 50);  // full-attention layers keep everything
  EXPECT_EQ(kv.swa_block_table(7).size(), 50u);
  EXPECT_LE(max_used, kWindow / kBlock + 2);
  // After 200 tokens the next token sees keys 193..200: pages 48 and 49 (page 48 starts at 192,
  // the slack position), everything before is released.
  EXPECT_EQ(live(kv.swa_block_table(7)), 2);
  EXPECT_EQ(kv.swa_block_table(7)[47], -1);
  kv.free(7);
  EXPECT_EQ(kv.num_used_swa_blocks(), 0);
  kv.check_invariants();
}

// A whole prompt in one step needs sliding pages for all of it during that step; afterwards they
// drop back to the window.
TEST(KvCacheSwa, PrefillTakesPagesForTheChunkThenReleasesThem) {
  KvCacheManager kv = make_split(16, 12);
  const std::vector<int32_t> tokens = iota_tokens(40);
  int32_t cached = -1;
  ASSERT_TRUE(kv.allocate(1, tokens, 40, "", &cached));
  EXPECT_EQ(kv.num_used_swa_blocks(), 10);
  kv.commit_computed(1, tokens, 40);
  EXPECT_EQ(kv.num_used_swa_blocks(), 2);  // pages 8 and 9: keys 32..39 (32 is the slack position)
  // The sliding pool is the one that runs out: nothing changes in either pool.
  const int32_t free_full = kv.num_free_blocks();
  ASSERT_FALSE(kv.allocate(2, iota_tokens(40, 900), 40, "", &cached));
  EXPECT_EQ(kv.num_free_blocks(), free_full);
  EXPECT_FALSE(kv.has(2));
  kv.check_invariants();
}

TEST(KvCacheSwa, PrefixHitNeedsTheSlidingPagesInsideTheWindow) {
  KvCacheManager kv = make_split(32, 12);
  const std::vector<int32_t> prompt = iota_tokens(41);
  int32_t cached = -1;
  ASSERT_TRUE(kv.allocate(1, prompt, 41, "", &cached));
  kv.commit_computed(1, prompt, 41);
  kv.free(1);
  // All 10 full blocks are cached in both pools (released sliding pages stay registered).
  EXPECT_EQ(kv.num_cached_tokens(prompt, ""), 40);
  ASSERT_TRUE(kv.allocate(2, prompt, 41, "", &cached));
  EXPECT_EQ(cached, 40);
  // The sliding table references only the pages inside the window of position 40 (8 and 9) and
  // the fresh page 10.
  EXPECT_EQ(live(kv.swa_block_table(2)), 3);
  EXPECT_EQ(live(kv.block_table(2)), 11);
  kv.check_invariants();
  kv.commit_computed(2, prompt, 41);
  kv.free(2);

  // A 48-token prompt takes all 12 sliding pages, evicting every page of the first prompt there,
  // while its 10 full-attention pages stay cached: without the window's sliding pages nothing hits.
  const std::vector<int32_t> other = iota_tokens(48, 5000);
  ASSERT_TRUE(kv.allocate(3, other, 48, "", &cached));
  kv.commit_computed(3, other, 48);
  kv.free(3);
  EXPECT_EQ(kv.num_cached_tokens(prompt, ""), 0);
  ASSERT_TRUE(kv.allocate(4, prompt, 41, "", &cached));
  EXPECT_EQ(cached, 0);
  kv.check_invariants();
}

TEST(KvCacheSwa, ForkCopiesThePartialBlockInBothGroups) {
  KvCacheManager kv = make_split(16, 8);
  const std::vector<int32_t> prompt = iota_tokens(14);
  int32_t cached = -1;
  ASSERT_TRUE(kv.allocate(1, prompt, 14, "", &cached));
  kv.commit_computed(1, prompt, 14);
  std::vector<std::pair<int32_t, int32_t>> copies, swa_copies;
  ASSERT_TRUE(kv.fork(1, 2, &copies, &swa_copies));
  ASSERT_EQ(copies.size(), 1u);
  ASSERT_EQ(swa_copies.size(), 1u);
  EXPECT_EQ(copies[0].first, kv.block_table(1)[3]);
  EXPECT_EQ(copies[0].second, kv.block_table(2)[3]);
  EXPECT_EQ(swa_copies[0].first, kv.swa_block_table(1)[3]);
  EXPECT_EQ(swa_copies[0].second, kv.swa_block_table(2)[3]);
  EXPECT_EQ(kv.swa_block_table(2)[0], -1);  // released in the parent before the fork
  kv.check_invariants();
}

}  // namespace
}  // namespace deepinfer
