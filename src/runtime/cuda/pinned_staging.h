// Host<->device copies through two pinned buffers used in turn: pageable memory (vectors, the
// mapped checkpoint) is copied into one while the DMA engine drains the other.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>

namespace deepinfer {

class PinnedStaging {
 public:
  explicit PinnedStaging(cudaStream_t stream);
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Enqueues the copy; src may be reused as soon as this returns. Not thread-safe.
  void to_device(void* dst, const void* src, size_t size_bytes);
  // Waits for the stream's earlier work, then copies. Not thread-safe.
  void to_host(void* dst, const void* src, size_t size_bytes);

  static constexpr size_t kChunkBytes = size_t{32} << 20;

 private:
  cudaStream_t stream_;
  std::array<void*, 2> buffers_{};
  std::array<cudaEvent_t, 2> done_{};  // recorded after the copy that last read/wrote each buffer
  int next_ = 0;
};

}  // namespace deepinfer
