// PinnedPool: a HostSlabPool over one cudaHostAlloc region, for the KV store's page images.
// The CUDA backend DMAs straight from its slabs; each slab remembers (by an event) the last copy
// that read it, and the pool hands a slab out again only after that copy finished, so a page
// freed while its upload is in flight is never overwritten under the DMA engine.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <vector>

#include "runtime/host_slab_pool.h"

namespace deepinfer {

class PinnedPool final : public HostSlabPool {
 public:
  // Allocates the region (cudaHostAlloc); throws CudaError when it cannot. on_destroy(this) runs
  // first in the destructor (the backend forgets the region there).
  using OnDestroy = std::function<void(const PinnedPool*)>;
  static std::unique_ptr<PinnedPool> create(size_t region_bytes, size_t slab_bytes, OnDestroy on_destroy);
  // Waits for the copies still reading slabs, then frees the region (cudaFreeHost waits for the device).
  ~PinnedPool() override;

  // Records that work enqueued on stream so far reads the slab holding p (engine thread).
  void record_read(const void* p, cudaStream_t stream);
  // p (inside the region) as a pointer kernels can read: the region is mapped into the device.
  const uint8_t* device_view(const void* p) const {
    return device_base_ + (static_cast<const uint8_t*>(p) - static_cast<const uint8_t*>(base()));
  }

 protected:
  void wait_reusable(size_t slab) override;

 private:
  PinnedPool(void* base, const void* device_base, size_t region_bytes, size_t slab_bytes, OnDestroy on_destroy);

  OnDestroy on_destroy_;
  const uint8_t* device_base_;
  // Per slab, created at its first DMA: recorded after the last copy that read the slab. Written
  // by the engine thread while the slab is taken, read by take() after it came back (the pool's
  // lock orders the two).
  std::vector<cudaEvent_t> read_done_;
};

}  // namespace deepinfer
