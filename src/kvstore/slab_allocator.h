// SlabHostAllocator: the store's HostAllocator over a backend's slab pool (pinned memory on
// CUDA, runtime/host_slab_pool.h). A page image that does not fit a slab, or arrives when every
// slab is taken, gets ordinary memory instead and is counted, so the store never fails for want
// of pinned memory; such a page only loses the direct DMA.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "kvstore/page_format.h"
#include "runtime/host_slab_pool.h"

namespace deepinfer {

class SlabHostAllocator final : public HostAllocator {
 public:
  explicit SlabHostAllocator(std::shared_ptr<HostSlabPool> pool);

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;

  int64_t slab_allocations() const { return slab_allocations_.load(); }
  int64_t fallbacks() const { return fallbacks_.load(); }
  const HostSlabPool& pool() const { return *pool_; }

 private:
  std::shared_ptr<HostSlabPool> pool_;
  std::atomic<int64_t> slab_allocations_{0};
  std::atomic<int64_t> fallbacks_{0};
};

}  // namespace deepinfer
