// Slab-or-fallback allocation for page images.
#include "kvstore/slab_allocator.h"

#include <new>

#include "core/check.h"

namespace deepinfer {

SlabHostAllocator::SlabHostAllocator(std::shared_ptr<HostSlabPool> pool) : pool_(std::move(pool)) {
  DI_CHECK(pool_ != nullptr, "SlabHostAllocator needs a pool");
}

void* SlabHostAllocator::allocate(size_t bytes) {
  if (void* slab = pool_->take(bytes)) {
    slab_allocations_++;
    return slab;
  }
  fallbacks_++;
  return ::operator new(bytes);
}

void SlabHostAllocator::deallocate(void* ptr, size_t /*bytes*/) {
  if (pool_->owns(ptr)) {
    pool_->give_back(ptr);
  } else {
    ::operator delete(ptr);
  }
}

}  // namespace deepinfer
