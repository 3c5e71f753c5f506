// KvCacheManager::allocate_imported, the page tables of a store hit with SWA replay: the
// sliding-window table holds no block before the replay start, and those never-computed pages
// never become prefix hits.
#include <gtest/gtest.h>

#include "kvcache/kv_cache_manager.h"

namespace deepinfer {
namespace {

constexpr int32_t kBlock = 4;
constexpr int32_t kWindow = 8;

KvCacheManager split_manager() {
  KvCacheConfig config;
  config.num_blocks = 32;
  config.block_size = kBlock;
  config.model_fingerprint = "test";
  config.sliding_window = kWindow;
  config.num_swa_blocks = 32;
  return KvCacheManager(config);
}

std::vector<int32_t> tokens(int32_t count, int32_t seed = 0) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < count; ++i) t.push_back(i * 7 + seed);
  return t;
}

TEST(KvImport, SlidingTableStartsAtTheReplayAndOnlyComputedPagesHit) {
  KvCacheManager kv = split_manager();
  const std::vector<int32_t> prompt = tokens(41);
  int32_t cached = -1;
  ASSERT_TRUE(kv.allocate_imported(-1, prompt, 40, "", 24, &cached));
  EXPECT_EQ(cached, 0);
  const std::vector<int32_t>& full = kv.block_table(-1);
  const std::vector<int32_t>& swa = kv.swa_block_table(-1);
  ASSERT_EQ(full.size(), 10u);
  ASSERT_EQ(swa.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_GE(full[i], 0) << i;
    EXPECT_EQ(swa[i] >= 0, i >= 6) << i;  // pages from the replay start (24 / 4) on
  }
  EXPECT_EQ(kv.num_used_swa_blocks(), 4);
  kv.commit_computed(-1, prompt, 40);
  kv.check_invariants();
  kv.free(-1);
  kv.check_invariants();

  // The whole prefix hits; a prefix cut inside the never-computed sliding pages does not, except
  // where the window of the cut lies in replayed pages (cut at 32: pages 6 and 7).
  EXPECT_EQ(kv.num_cached_tokens(prompt, ""), 40);
  EXPECT_EQ(kv.num_cached_tokens(tokens(33), ""), 32);
  EXPECT_EQ(kv.num_cached_tokens(tokens(29), ""), 0);
  std::vector<int32_t> diverging = tokens(21);
  diverging.push_back(999);
  EXPECT_EQ(kv.num_cached_tokens(diverging, ""), 0);
}

TEST(KvImport, ADeviceHitPastTheReplayStartKeepsItsSlidingBlocks) {
  KvCacheManager kv = split_manager();
  const std::vector<int32_t> prompt = tokens(41);
  int32_t cached = -1;
  // A normal sequence computes 8 pages first.
  ASSERT_TRUE(kv.allocate(0, tokens(33), 33, "", &cached));
  kv.commit_computed(0, tokens(33), 33);
  kv.free(0);
  ASSERT_TRUE(kv.allocate_imported(-1, prompt, 40, "", 24, &cached));
  EXPECT_EQ(cached, 32);
  const std::vector<int32_t>& swa = kv.swa_block_table(-1);
  for (size_t i = 0; i < swa.size(); ++i) EXPECT_EQ(swa[i] >= 0, i >= 6) << i;  // the hit's window, then fresh
  kv.commit_computed(-1, prompt, 40);
  kv.check_invariants();
  kv.free(-1);
  EXPECT_EQ(kv.num_cached_tokens(prompt, ""), 40);
}

}  // namespace
}  // namespace deepinfer
