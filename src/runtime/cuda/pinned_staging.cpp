// Double-buffered pinned staging.
#include "runtime/cuda/pinned_staging.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/cuda_check.h"

namespace deepinfer {

PinnedStaging::PinnedStaging(cudaStream_t stream) : stream_(stream) {
  for (int i = 0; i < 2; ++i) {
    DI_CUDA_CHECK(cudaMallocHost(&buffers_[static_cast<size_t>(i)], kChunkBytes));
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
    DI_CUDA_CHECK(cudaEventSynchronize(done_[slot]));  // the DMA that last read this buffer is done
    std::memcpy(buffers_[slot], static_cast<const char*>(src) + offset, bytes);
    DI_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + offset, buffers_[slot], bytes, cudaMemcpyHostToDevice,
                                  stream_));
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

}  // namespace deepinfer
