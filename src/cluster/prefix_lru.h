// A prefix cache modelled in blocks: which prefix blocks an instance (or the shared store) holds,
// evicting the least recently used block when full. Bookkeeping only; no KV bytes.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>

namespace deepinfer {

class PrefixLru {
 public:
  // capacity_blocks 0: unbounded.
  explicit PrefixLru(int64_t capacity_blocks) : capacity_blocks_(capacity_blocks) {}

  // How many leading blocks of the chain it holds (stops at the first missing one). Does not
  // count as a use: routing probes every instance and must not refresh them all.
  int64_t count_leading_blocks(std::span<const uint64_t> chain) const;
  // Marks the chain's blocks used, adding the missing ones and evicting the least recently used.
  // The chain's first block ends most recent, so a prefix outlives the blocks that extend it.
  void use(std::span<const uint64_t> chain);
  int64_t num_blocks() const { return static_cast<int64_t>(index_.size()); }

 private:
  int64_t capacity_blocks_;
  std::list<uint64_t> order_;  // most recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> index_;
};

}  // namespace deepinfer
