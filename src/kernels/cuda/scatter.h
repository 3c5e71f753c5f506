// scatter_from_host: one launch that copies many pieces of a host buffer (read through its
// device-mapped pointer) to device addresses, as they are or rounding float32 to bfloat16 on the way:
// a KV store page's K and V blocks of every layer in one go instead of a copy per block.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace deepinfer::kernels::cuda {

struct ScatterPiece {
  void* dst;
  size_t src_offset;  // bytes from the source's start; a multiple of 4
  size_t num_floats;  // 4-byte words read from the source (float32, or two bf16 copied as they are)
  bool to_bf16;       // dst gets num_floats bfloat16 (float32 rounded to nearest even) instead of the words
};

// src: a device-visible pointer to the host buffer (cudaHostGetDevicePointer, or the host pointer
// under UVA). Launches once per kMaxPiecesPerLaunch pieces; enqueued on stream.
void scatter_from_host(const uint8_t* src, const std::vector<ScatterPiece>& pieces, cudaStream_t stream);

inline constexpr size_t kMaxPiecesPerLaunch = 96;

}  // namespace deepinfer::kernels::cuda
