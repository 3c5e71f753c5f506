// A caching allocator for device memory on one stream: freed blocks go to per-size-class free lists
// and are handed out again without cudaMalloc/cudaFree (which synchronise the device). Because
// every user enqueues on the same stream, a block freed after its last use was enqueued can be
// reused at once: the stream orders the new user's work after the old.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace deepinfer {

class DeviceAllocator {
 public:
  DeviceAllocator() = default;
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // At least size_bytes of device memory, 256-byte aligned, contents undefined. Retries once after
  // releasing the cache when the device is out of memory; throws CudaError if it still is.
  // Thread-safe.
  void* allocate(size_t size_bytes);
  // Returns a block from allocate. Blocks above kUncachedBytes (KV caches, weights) go straight back
  // to the device. Thread-safe.
  void deallocate(void* p);
  // Frees every cached block (cudaFree: waits for the device).
  void release_cached();
  // Bytes held in free lists (reusable without the device).
  size_t cached_bytes() const;
  // Bytes handed out and not yet returned: now, and the most at once since reset_peak().
  size_t in_use_bytes() const;
  size_t peak_in_use_bytes() const;
  void reset_peak();

  static constexpr size_t kUncachedBytes = size_t{256} << 20;

 private:
  static size_t size_class(size_t size_bytes);
  void hand_out(void* p, size_t size);  // with mutex_ held

  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;               // block -> its class size
  std::map<size_t, std::vector<void*>> free_;            // class size -> free blocks
  size_t cached_bytes_ = 0;
  size_t in_use_bytes_ = 0;
  size_t peak_in_use_bytes_ = 0;
};

}  // namespace deepinfer
