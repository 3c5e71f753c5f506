// L2Prefetcher: one thread per 16 KiB chunk issues a bulk prefetch (cp.async.bulk.prefetch.L2,
// Hopper's TMA); the kernel ends at once and the copy engine brings the lines in behind it.
#include "kernels/cuda/l2_prefetch.h"

#include <cstdint>

#include "kernels/cuda/cuda_check.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr size_t kChunkBytes = size_t{16} << 10;
constexpr int kThreads = 32;

__global__ void l2_prefetch_kernel(const uint8_t* data, size_t bytes) {
  const size_t begin = (blockIdx.x * size_t{kThreads} + threadIdx.x) * kChunkBytes;
  if (begin >= bytes) return;
  const auto size = static_cast<uint32_t>(bytes - begin < kChunkBytes ? bytes - begin : kChunkBytes);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(data + begin), "r"(size) : "memory");
#endif
}

}  // namespace

L2Prefetcher::L2Prefetcher() {
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  DI_CUDA_CHECK(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
  DI_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

L2Prefetcher::~L2Prefetcher() {
  cudaStreamSynchronize(side_);
  cudaEventDestroy(done_);
  cudaEventDestroy(forked_);
  cudaStreamDestroy(side_);
}

void L2Prefetcher::prefetch(const void* data, size_t bytes, cudaStream_t stream) {
  // The bulk copy engine takes 16-byte units; a hint may leave a ragged tail out.
  bytes -= bytes % 16;
  if (bytes == 0 || reinterpret_cast<uintptr_t>(data) % 16 != 0) return;
  DI_CUDA_CHECK(cudaEventRecord(forked_, stream));
  DI_CUDA_CHECK(cudaStreamWaitEvent(side_, forked_, 0));
  const size_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
  const auto blocks = static_cast<unsigned>((chunks + kThreads - 1) / kThreads);
  l2_prefetch_kernel<<<blocks, kThreads, 0, side_>>>(static_cast<const uint8_t*>(data), bytes);
  DI_CUDA_CHECK_LAUNCH("l2_prefetch_kernel");
  DI_CUDA_CHECK(cudaEventRecord(done_, side_));
  pending_ = true;
}

void L2Prefetcher::join(cudaStream_t stream) {
  if (!pending_) return;
  pending_ = false;
  (void)cudaStreamWaitEvent(stream, done_, 0);
}

}  // namespace deepinfer::kernels::cuda
