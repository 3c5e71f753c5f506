// The slab pool's free list.
#include "runtime/host_slab_pool.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer {

HostSlabPool::HostSlabPool(void* base, size_t region_bytes, size_t slab_bytes)
    : base_(static_cast<uint8_t*>(base)),
      slab_bytes_((std::max<size_t>(slab_bytes, 1) + kSlabAlign - 1) / kSlabAlign * kSlabAlign),
      num_slabs_(base == nullptr ? 0 : region_bytes / slab_bytes_),
      taken_(num_slabs_, false) {
  for (size_t i = 0; i < num_slabs_; ++i) free_.push_back(i);
}

void* HostSlabPool::take(size_t bytes) {
  if (bytes > slab_bytes_) return nullptr;
  size_t slab = 0;
  {
    std::lock_guard lock(mutex_);
    if (free_.empty()) return nullptr;
    slab = free_.front();
    free_.pop_front();
    taken_[slab] = true;
  }
  wait_reusable(slab);
  return base_ + slab * slab_bytes_;
}

void HostSlabPool::give_back(void* slab) {
  DI_CHECK(owns(slab), "give_back of memory outside the slab pool");
  const size_t index = slab_of(slab);
  DI_CHECK(static_cast<uint8_t*>(slab) == base_ + index * slab_bytes_, "give_back needs a slab's start address");
  std::lock_guard lock(mutex_);
  DI_CHECK(taken_[index], "slab given back twice");
  taken_[index] = false;
  free_.push_back(index);
}

bool HostSlabPool::owns(const void* p, size_t bytes) const {
  const auto* q = static_cast<const uint8_t*>(p);
  if (num_slabs_ == 0 || q < base_ || q >= base_ + num_slabs_ * slab_bytes_) return false;
  const size_t offset = static_cast<size_t>(q - base_);
  return offset % slab_bytes_ + bytes <= slab_bytes_;
}

size_t HostSlabPool::slab_of(const void* p) const {
  return static_cast<size_t>(static_cast<const uint8_t*>(p) - base_) / slab_bytes_;
}

size_t HostSlabPool::num_free() const {
  std::lock_guard lock(mutex_);
  return free_.size();
}

}  // namespace deepinfer
