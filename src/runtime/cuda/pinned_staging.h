// Host<->device copies through pinned buffers: two used in turn for pageable memory (vectors, the
// mapped checkpoint), copied into one while the device drains the other; and readbacks that land
// in pinned buffers of their own and are copied out when waited for. The buffers are mapped into
// the device's address space: a copy of up to kKernelCopyBytes (a step's inputs, its token ids)
// is one kernel on the stream reading or writing host memory, which follows and precedes the
// stream's kernels with no copy-engine hop (several microseconds each way on the H200); larger
// ones go by DMA.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/backend.h"

namespace deepinfer {

inline constexpr size_t kKernelCopyBytes = size_t{1} << 20;

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
  std::array<void*, 2> device_views_{};
  std::array<cudaEvent_t, 2> done_{};  // recorded after the copy that last read/wrote each buffer
  int next_ = 0;
};

// Backend::copy_to_host_later on one stream: each call's copies go into one pinned buffer behind
// the stream's earlier work, and an event says when they landed. Buffers and events of waited-for
// calls are kept for the next ones (a step's token ids: a few hundred bytes, every step).
class PinnedReadbacks {
 public:
  explicit PinnedReadbacks(cudaStream_t stream);
  std::unique_ptr<PendingCopies> enqueue(const std::vector<HostCopy>& copies);

  struct Slot {
    void* buffer = nullptr;
    void* device_view = nullptr;
    size_t capacity = 0;
    cudaEvent_t done = nullptr;
  };
  // The slots not in use; shared with the pending copies, which give theirs back when destroyed.
  struct FreeSlots {
    ~FreeSlots();
    std::mutex mutex;
    std::vector<Slot> slots;
  };

 private:
  cudaStream_t stream_;
  std::shared_ptr<FreeSlots> free_ = std::make_shared<FreeSlots>();
};

}  // namespace deepinfer
