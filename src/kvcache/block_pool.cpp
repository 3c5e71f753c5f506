// Free-list block allocation.
#include "kvcache/block_pool.h"

#include "core/check.h"

namespace deepinfer {

BlockPool::BlockPool(int32_t num_blocks) : num_blocks_(num_blocks), is_free_(static_cast<size_t>(num_blocks), true) {
  DI_CHECK(num_blocks >= 0);
  free_ids_.reserve(static_cast<size_t>(num_blocks));
  // Lowest ids first out, so a fresh pool hands out 0, 1, 2, ...
  for (int32_t id = num_blocks - 1; id >= 0; --id) free_ids_.push_back(id);
}

std::vector<int32_t> BlockPool::allocate(int32_t count) {
  DI_CHECK(can_allocate(count), "asked for " << count << " blocks, " << num_free_blocks() << " free");
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) {
    const int32_t id = free_ids_.back();
    free_ids_.pop_back();
    is_free_[static_cast<size_t>(id)] = false;
    ids.push_back(id);
  }
  return ids;
}

void BlockPool::deallocate(const std::vector<int32_t>& block_ids) {
  for (int32_t id : block_ids) {
    DI_CHECK(id >= 0 && id < num_blocks_ && !is_free_[static_cast<size_t>(id)], "block " << id << " is not allocated");
    is_free_[static_cast<size_t>(id)] = true;
    free_ids_.push_back(id);
  }
}

}  // namespace deepinfer
