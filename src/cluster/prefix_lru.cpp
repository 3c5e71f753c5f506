// PrefixLru: a list in recency order beside a hash index of its entries.
#include "cluster/prefix_lru.h"

namespace deepinfer {

int64_t PrefixLru::count_leading_blocks(std::span<const uint64_t> chain) const {
  int64_t count = 0;
  while (count < static_cast<int64_t>(chain.size()) && index_.count(chain[static_cast<size_t>(count)]) > 0) ++count;
  return count;
}

void PrefixLru::use(std::span<const uint64_t> chain) {
  for (auto block = chain.rbegin(); block != chain.rend(); ++block) {
    if (const auto found = index_.find(*block); found != index_.end()) {
      order_.splice(order_.begin(), order_, found->second);
      continue;
    }
    order_.push_front(*block);
    index_[*block] = order_.begin();
  }
  while (capacity_blocks_ > 0 && num_blocks() > capacity_blocks_) {
    index_.erase(order_.back());
    order_.pop_back();
  }
}

}  // namespace deepinfer
