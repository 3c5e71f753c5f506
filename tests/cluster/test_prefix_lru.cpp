// The block-level prefix cache: leading-block matches, recency, eviction order.
#include <gtest/gtest.h>

#include <vector>

#include "cluster/prefix_lru.h"

namespace deepinfer {
namespace {

using Chain = std::vector<uint64_t>;

TEST(PrefixLru, CountsOnlyLeadingBlocks) {
  PrefixLru cache(0);
  cache.use(Chain{1, 2, 3});
  EXPECT_EQ(cache.count_leading_blocks(Chain{1, 2, 3, 4}), 3);
  EXPECT_EQ(cache.count_leading_blocks(Chain{1, 2, 9, 3}), 2);
  EXPECT_EQ(cache.count_leading_blocks(Chain{7, 1}), 0);
}

TEST(PrefixLru, EvictsTheLeastRecentlyUsedAndAChainsTailBeforeItsHead) {
  PrefixLru cache(3);
  cache.use(Chain{1, 2, 3});  // recency: 1, 2, 3
  cache.use(Chain{5});        // evicts 3, the chain's tail
  EXPECT_EQ(cache.num_blocks(), 3);
  EXPECT_EQ(cache.count_leading_blocks(Chain{1, 2, 3}), 2);
  cache.use(Chain{1});  // recency: 1, 5, 2
  cache.use(Chain{6});  // evicts 2
  EXPECT_EQ(cache.count_leading_blocks(Chain{1, 2}), 1);
  EXPECT_EQ(cache.count_leading_blocks(Chain{5}), 1);
}

TEST(PrefixLru, ProbingDoesNotRefresh) {
  PrefixLru cache(2);
  cache.use(Chain{1});
  cache.use(Chain{2});  // recency: 2, 1
  EXPECT_EQ(cache.count_leading_blocks(Chain{1}), 1);
  cache.use(Chain{3});  // still evicts 1
  EXPECT_EQ(cache.count_leading_blocks(Chain{1}), 0);
  EXPECT_EQ(cache.count_leading_blocks(Chain{2}), 1);
}

}  // namespace
}  // namespace deepinfer
