// BlockPool: hands out KV-cache block ids from a fixed pool (CPU bookkeeping only; the backend
// owns the bytes). Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_ids_.size()); }
  bool can_allocate(int32_t count) const { return count <= num_free_blocks(); }
  // Takes count free blocks; the caller checks can_allocate first.
  std::vector<int32_t> allocate(int32_t count);
  // Returns blocks to the pool; each id must be allocated and not yet freed.
  void deallocate(const std::vector<int32_t>& block_ids);

 private:
  int32_t num_blocks_;
  std::vector<int32_t> free_ids_;
  std::vector<bool> is_free_;
};

// Number of blocks that hold num_tokens tokens.
inline int32_t blocks_for_tokens(int64_t num_tokens, int32_t block_size) {
  return static_cast<int32_t>((num_tokens + block_size - 1) / block_size);
}

}  // namespace deepinfer
