// BlockPool contracts: allocation order, reference counts, the hash index and LRU eviction.
#include "kvcache/block_pool.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/check.h"

namespace deepinfer {
namespace {

BlockHash hash_of(int32_t n) {
  const BlockHash root = prefix_root_hash("test", "");
  return chain_block_hash(root, &n, 1, "");
}

TEST(BlockPool, FreshPoolHandsOutLowestIdsFirst) {
  BlockPool pool(4);
  EXPECT_EQ(pool.num_blocks(), 4);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_EQ(pool.allocate(3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_TRUE(pool.can_allocate(1));
  EXPECT_FALSE(pool.can_allocate(2));
  EXPECT_THROW(pool.allocate(2), InvariantError);
  EXPECT_TRUE(pool.allocate(0).empty());
  pool.check_invariants();
}

TEST(BlockPool, RefCountsFreeAtZero) {
  BlockPool pool(2);
  const int32_t id = pool.allocate(1).front();
  EXPECT_EQ(pool.ref_count(id), 1);
  EXPECT_THROW(pool.incref(1), InvariantError);  // free blocks cannot be revived
  pool.decref(id);
  EXPECT_EQ(pool.ref_count(id), 0);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_EQ(pool.num_evictable_blocks(), 0);
  EXPECT_THROW(pool.decref(id), InvariantError);
  pool.check_invariants();
}

TEST(BlockPool, CachedBlockIsEvictableAndRevivable) {
  BlockPool pool(2);
  const int32_t id = pool.allocate(1).front();
  pool.register_hash(id, hash_of(7));
  pool.incref(id);
  EXPECT_EQ(pool.ref_count(id), 2);
  pool.decref(id);
  pool.decref(id);
  // Unreferenced but cached: counts as free, still found.
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_EQ(pool.num_evictable_blocks(), 1);
  EXPECT_EQ(pool.find_cached(hash_of(7)), id);
  pool.incref(id);
  EXPECT_EQ(pool.num_evictable_blocks(), 0);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_EQ(pool.ref_count(id), 1);
  pool.check_invariants();
}

TEST(BlockPool, FirstRegistrationStaysCanonical) {
  BlockPool pool(3);
  const std::vector<int32_t> ids = pool.allocate(2);
  pool.register_hash(ids[0], hash_of(1));
  pool.register_hash(ids[1], hash_of(1));  // same prefix computed twice: the first copy stays
  EXPECT_EQ(pool.find_cached(hash_of(1)), ids[0]);
  pool.register_hash(ids[0], hash_of(1));  // re-registering the same hash is a no-op
  EXPECT_THROW(pool.register_hash(ids[0], hash_of(2)), InvariantError);
  pool.decref(ids[1]);  // never got the hash: goes straight back to the free list
  EXPECT_EQ(pool.num_evictable_blocks(), 0);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_FALSE(pool.find_cached(hash_of(3)).has_value());
  pool.check_invariants();
}

TEST(BlockPool, FreeBlocksGoBeforeCachedOnes) {
  BlockPool pool(3);
  const std::vector<int32_t> ids = pool.allocate(3);
  pool.register_hash(ids[0], hash_of(0));
  pool.decref(ids[0]);
  pool.decref(ids[1]);
  EXPECT_EQ(pool.allocate(1), std::vector<int32_t>{ids[1]});
  EXPECT_EQ(pool.find_cached(hash_of(0)), ids[0]);  // still cached
  EXPECT_EQ(pool.allocate(1), std::vector<int32_t>{ids[0]});
  EXPECT_FALSE(pool.find_cached(hash_of(0)).has_value());  // evicted with its index entry
  EXPECT_EQ(pool.ref_count(ids[0]), 1);
  pool.check_invariants();
}

TEST(BlockPool, EvictsLeastRecentlyReleasedFirst) {
  BlockPool pool(4);
  const std::vector<int32_t> ids = pool.allocate(4);
  for (int32_t i = 0; i < 4; ++i) pool.register_hash(ids[static_cast<size_t>(i)], hash_of(i));
  // Release order 2, 0, 3, 1; then 0 is revived and released again, moving it to the back.
  for (int32_t i : {2, 0, 3, 1}) pool.decref(ids[static_cast<size_t>(i)]);
  pool.incref(ids[0]);
  pool.decref(ids[0]);
  pool.check_invariants();
  std::vector<int32_t> order;
  for (int32_t i = 0; i < 4; ++i) order.push_back(pool.allocate(1).front());
  EXPECT_EQ(order, (std::vector<int32_t>{ids[2], ids[3], ids[1], ids[0]}));
  for (int32_t i = 0; i < 4; ++i) EXPECT_FALSE(pool.find_cached(hash_of(i)).has_value());
  pool.check_invariants();
}

TEST(BlockPool, EvictedBlockComesBackWithoutHash) {
  BlockPool pool(1);
  const int32_t id = pool.allocate(1).front();
  pool.register_hash(id, hash_of(5));
  pool.decref(id);
  EXPECT_EQ(pool.allocate(1).front(), id);
  pool.decref(id);  // no hash any more: free, not evictable
  EXPECT_EQ(pool.num_evictable_blocks(), 0);
  pool.check_invariants();
}

}  // namespace
}  // namespace deepinfer
