// Moving a weight into the GPU's L2 cache ahead of the product that reads it, on a side stream, so
// the transfer fills time in which the decode step's own kernels leave memory idle (attention at
// short contexts) instead of delaying them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace deepinfer::kernels::cuda {

class L2Prefetcher {
 public:
  L2Prefetcher();
  ~L2Prefetcher();
  L2Prefetcher(const L2Prefetcher&) = delete;
  L2Prefetcher& operator=(const L2Prefetcher&) = delete;

  // Starts bulk L2 prefetches of [data, data + bytes) once the work enqueued on stream so far has
  // finished, without ordering anything after it on stream. A hint: nothing observable changes
  // (a pointer not 16-byte aligned is skipped, a tail of under 16 bytes left out).
  void prefetch(const void* data, size_t bytes, cudaStream_t stream);
  // Orders stream after every prefetch so far (a stream capture must rejoin the side stream it
  // forked before it ends). Errors are left to the capture's end to report.
  void join(cudaStream_t stream);

 private:
  cudaStream_t side_ = nullptr;
  cudaEvent_t forked_ = nullptr;  // on stream: where the next prefetch starts
  cudaEvent_t done_ = nullptr;    // on side_: after the last prefetch
  bool pending_ = false;          // a prefetch since the last join
};

}  // namespace deepinfer::kernels::cuda
