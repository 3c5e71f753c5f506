// Page-locked slab pool with per-slab DMA fences.
#include "runtime/cuda/pinned_pool.h"

#include "kernels/cuda/cuda_check.h"

namespace deepinfer {

std::unique_ptr<PinnedPool> PinnedPool::create(size_t region_bytes, size_t slab_bytes, OnDestroy on_destroy) {
  void* base = nullptr;
  // Mapped, so a kernel can read a page straight from its slab (CudaBackend::scatter_to_device).
  DI_CUDA_CHECK(cudaHostAlloc(&base, region_bytes, cudaHostAllocPortable | cudaHostAllocMapped));
  void* device_base = nullptr;
  const cudaError_t mapped = cudaHostGetDevicePointer(&device_base, base, 0);
  if (mapped != cudaSuccess) {
    cudaFreeHost(base);
    DI_CUDA_CHECK(mapped);
  }
  return std::unique_ptr<PinnedPool>(
      new PinnedPool(base, device_base, region_bytes, slab_bytes, std::move(on_destroy)));
}

PinnedPool::PinnedPool(void* base, const void* device_base, size_t region_bytes, size_t slab_bytes,
                       OnDestroy on_destroy)
    : HostSlabPool(base, region_bytes, slab_bytes),
      on_destroy_(std::move(on_destroy)),
      device_base_(static_cast<const uint8_t*>(device_base)),
      read_done_(num_slabs(), nullptr) {}

PinnedPool::~PinnedPool() {
  if (on_destroy_) on_destroy_(this);
  for (cudaEvent_t event : read_done_) {
    if (event == nullptr) continue;
    cudaEventSynchronize(event);
    cudaEventDestroy(event);
  }
  cudaFreeHost(const_cast<void*>(base()));
}

void PinnedPool::record_read(const void* p, cudaStream_t stream) {
  cudaEvent_t& event = read_done_[slab_of(p)];
  if (event == nullptr) DI_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  DI_CUDA_CHECK(cudaEventRecord(event, stream));
}

void PinnedPool::wait_reusable(size_t slab) {
  // Only this thread holds the slab now; an event never recorded (nullptr) means no DMA read it.
  if (read_done_[slab] != nullptr) DI_CUDA_CHECK(cudaEventSynchronize(read_done_[slab]));
}

}  // namespace deepinfer
