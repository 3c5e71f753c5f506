// Double-buffered pinned staging; pinned readbacks.
#include "runtime/cuda/pinned_staging.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/copy_pieces.h"
#include "kernels/cuda/cuda_check.h"

namespace deepinfer {
namespace {

namespace kc = kernels::cuda;

// Pinned memory the device can address; *device_view is its device-side address.
void* allocate_mapped(size_t bytes, void** device_view) {
  void* buffer = nullptr;
  DI_CUDA_CHECK(cudaHostAlloc(&buffer, bytes, cudaHostAllocMapped));
  if (const cudaError_t error = cudaHostGetDevicePointer(device_view, buffer, 0); error != cudaSuccess) {
    cudaFreeHost(buffer);
    DI_CUDA_CHECK(error);
  }
  return buffer;
}

bool by_kernel(size_t size_bytes) { return size_bytes <= kKernelCopyBytes && size_bytes % sizeof(float) == 0; }

}  // namespace

PinnedStaging::PinnedStaging(cudaStream_t stream) : stream_(stream) {
  for (int i = 0; i < 2; ++i) {
    const auto slot = static_cast<size_t>(i);
    buffers_[slot] = allocate_mapped(kChunkBytes, &device_views_[slot]);
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&done_[static_cast<size_t>(i)], cudaEventDisableTiming));
  }
}

PinnedStaging::~PinnedStaging() {
  for (size_t i = 0; i < 2; ++i) {
    if (done_[i] != nullptr) {
      cudaEventSynchronize(done_[i]);
      cudaEventDestroy(done_[i]);
    }
    if (buffers_[i] != nullptr) cudaFreeHost(buffers_[i]);
  }
}

void PinnedStaging::to_device(void* dst, const void* src, size_t size_bytes) {
  for (size_t offset = 0; offset < size_bytes; offset += kChunkBytes) {
    const size_t bytes = std::min(kChunkBytes, size_bytes - offset);
    const auto slot = static_cast<size_t>(next_);
    next_ ^= 1;
    DI_CUDA_CHECK(cudaEventSynchronize(done_[slot]));  // the copy that last read this buffer is done
    std::memcpy(buffers_[slot], static_cast<const char*>(src) + offset, bytes);
    if (by_kernel(bytes)) {
      kc::copy_pieces({{device_views_[slot], static_cast<char*>(dst) + offset, bytes / sizeof(float), false}},
                      stream_);
    } else {
      DI_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + offset, buffers_[slot], bytes, cudaMemcpyHostToDevice,
                                    stream_));
    }
    DI_CUDA_CHECK(cudaEventRecord(done_[slot], stream_));
  }
}

void PinnedStaging::to_host(void* dst, const void* src, size_t size_bytes) {
  for (size_t offset = 0; offset < size_bytes; offset += kChunkBytes) {
    const size_t bytes = std::min(kChunkBytes, size_bytes - offset);
    const auto slot = static_cast<size_t>(next_);
    next_ ^= 1;
    DI_CUDA_CHECK(cudaEventSynchronize(done_[slot]));
    DI_CUDA_CHECK(cudaMemcpyAsync(buffers_[slot], static_cast<const char*>(src) + offset, bytes,
                                  cudaMemcpyDeviceToHost, stream_));
    DI_CUDA_CHECK(cudaEventRecord(done_[slot], stream_));
    DI_CUDA_CHECK(cudaEventSynchronize(done_[slot]));
    std::memcpy(static_cast<char*>(dst) + offset, buffers_[slot], bytes);
  }
}

namespace {

class PinnedCopies final : public PendingCopies {
 public:
  PinnedCopies(std::vector<HostCopy> copies, PinnedReadbacks::Slot slot,
               std::shared_ptr<PinnedReadbacks::FreeSlots> free)
      : copies_(std::move(copies)), slot_(slot), free_(std::move(free)) {}
  ~PinnedCopies() override {
    // Not waited for (the step failed, or its engine is closing): the copy may still be writing.
    if (!waited_) cudaEventSynchronize(slot_.done);
    const std::lock_guard lock(free_->mutex);
    free_->slots.push_back(slot_);
  }
  void wait() override {
    DI_CUDA_CHECK(cudaEventSynchronize(slot_.done));
    waited_ = true;
    size_t offset = 0;
    for (const HostCopy& copy : copies_) {
      std::memcpy(copy.dst, static_cast<const char*>(slot_.buffer) + offset, copy.size_bytes);
      offset += copy.size_bytes;
    }
  }

 private:
  std::vector<HostCopy> copies_;
  PinnedReadbacks::Slot slot_;
  std::shared_ptr<PinnedReadbacks::FreeSlots> free_;
  bool waited_ = false;
};

}  // namespace

PinnedReadbacks::FreeSlots::~FreeSlots() {
  for (const Slot& slot : slots) {
    cudaEventDestroy(slot.done);
    cudaFreeHost(slot.buffer);
  }
}

PinnedReadbacks::PinnedReadbacks(cudaStream_t stream) : stream_(stream) {}

std::unique_ptr<PendingCopies> PinnedReadbacks::enqueue(const std::vector<HostCopy>& copies) {
  size_t bytes = 0;
  for (const HostCopy& copy : copies) bytes += copy.size_bytes;
  Slot slot;
  void* too_small = nullptr;
  {
    const std::lock_guard lock(free_->mutex);
    std::vector<Slot>& slots = free_->slots;
    auto best = slots.end();  // the smallest free buffer that fits
    for (auto it = slots.begin(); it != slots.end(); ++it) {
      if (it->capacity >= bytes && (best == slots.end() || it->capacity < best->capacity)) best = it;
    }
    if (best == slots.end() && !slots.empty()) {
      // None fits: the largest makes room for a bigger one and lends it its event.
      best = std::max_element(slots.begin(), slots.end(),
                              [](const Slot& a, const Slot& b) { return a.capacity < b.capacity; });
      too_small = best->buffer;
      best->buffer = nullptr;
    }
    if (best != slots.end()) {
      slot = *best;
      slots.erase(best);
    }
  }
  if (too_small != nullptr) DI_CUDA_CHECK(cudaFreeHost(too_small));
  if (slot.done == nullptr) DI_CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
  if (slot.buffer == nullptr) {
    slot.capacity = std::max<size_t>(bytes, 4096);
    try {
      slot.buffer = allocate_mapped(slot.capacity, &slot.device_view);
    } catch (...) {
      cudaEventDestroy(slot.done);
      throw;
    }
  }
  auto pending = std::make_unique<PinnedCopies>(copies, slot, free_);
  const bool kernel = by_kernel(bytes) && std::all_of(copies.begin(), copies.end(), [](const HostCopy& copy) {
                        return copy.size_bytes % sizeof(float) == 0 &&
                               reinterpret_cast<uintptr_t>(copy.src) % sizeof(float) == 0;
                      });
  std::vector<kc::CopyPiece> pieces;
  size_t offset = 0;
  for (const HostCopy& copy : copies) {
    if (copy.size_bytes > 0 && kernel) {
      pieces.push_back(
          {copy.src, static_cast<char*>(slot.device_view) + offset, copy.size_bytes / sizeof(float), false});
    } else if (copy.size_bytes > 0) {
      DI_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(slot.buffer) + offset, copy.src, copy.size_bytes,
                                    cudaMemcpyDeviceToHost, stream_));
    }
    offset += copy.size_bytes;
  }
  if (!pieces.empty()) kc::copy_pieces(pieces, stream_, kc::CopyInto::kHost);
  DI_CUDA_CHECK(cudaEventRecord(slot.done, stream_));
  return pending;
}

}  // namespace deepinfer
