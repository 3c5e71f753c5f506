// BlockPool: KV-cache block ids with reference counts and the prefix-cache index (CPU
// bookkeeping only; the backend owns the bytes). A block is free (on the free list), in use
// (ref_count > 0), or cached-evictable (ref_count == 0 but still holding a registered prefix
// hash, reusable until allocate() evicts it, least recently released first).
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kvcache/prefix_hash.h"

namespace deepinfer {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);
  ~BlockPool();
  BlockPool(BlockPool&&) noexcept;
  BlockPool& operator=(BlockPool&&) noexcept;

  int32_t num_blocks() const;
  // Blocks allocate() can hand out now: free ones plus evictable cached ones.
  int32_t num_free_blocks() const;
  // Of those, the ones still holding a cached prefix (ref_count 0, hash registered).
  int32_t num_evictable_blocks() const;
  bool can_allocate(int32_t count) const { return count <= num_free_blocks(); }
  // Takes count blocks (free first, then evicting the least recently released cached ones,
  // whose hashes leave the index); each comes back with ref_count 1 and no hash. The caller
  // checks can_allocate first.
  std::vector<int32_t> allocate(int32_t count);
  // Adds a reference; revives an evictable cached block.
  void incref(int32_t block_id);
  // Drops a reference; at zero the block becomes evictable if it has a hash, else free.
  void decref(int32_t block_id);
  int32_t ref_count(int32_t block_id) const;

  // The block registered for this prefix hash, if any (in use or evictable).
  std::optional<int32_t> find_cached(const BlockHash& hash) const;
  // Registers a full, computed block under its prefix hash (no-op if the hash is already
  // registered to another block: the first copy stays canonical).
  void register_hash(int32_t block_id, const BlockHash& hash);

  // Asserts (DI_CHECK) that free list, evictable list, ref counts and the hash index agree.
  void check_invariants() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Number of blocks that hold num_tokens tokens.
inline int32_t blocks_for_tokens(int64_t num_tokens, int32_t block_size) {
  return static_cast<int32_t>((num_tokens + block_size - 1) / block_size);
}

}  // namespace deepinfer
