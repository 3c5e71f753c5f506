// copy_pieces: one launch that copies many pieces between device-visible addresses (device memory,
// or pinned host memory read or written through its device-mapped pointer), as they are or rounding
// float32 to bfloat16 on the way. A KV store page's K and V blocks of every layer in one go instead
// of a copy per block; a step's small inputs and outputs with no copy-engine hop before and after.
// And gather_rows, the device-side row copies between a step's inputs and the step before's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace deepinfer::kernels::cuda {

struct CopyPiece {
  const void* src;    // 4-byte aligned
  void* dst;          // 4-byte aligned (2-byte when to_bf16)
  size_t num_floats;  // 4-byte words read from src (float32, or two bf16 copied as they are)
  bool to_bf16;       // dst gets num_floats bfloat16 (float32 rounded to nearest even) instead of the words
};

// Where the pieces land: device memory, or host memory (a readback; its kernel is named apart).
enum class CopyInto : uint8_t { kDevice, kHost };

// A host address in a piece must be device-visible (cudaHostGetDevicePointer of mapped pinned
// memory). Launches once per kMaxPiecesPerLaunch pieces; enqueued on stream.
void copy_pieces(const std::vector<CopyPiece>& pieces, cudaStream_t stream, CopyInto into = CopyInto::kDevice);

inline constexpr size_t kMaxPiecesPerLaunch = 96;

// kernels/ops.h gather_rows; all device memory.
void gather_rows(const int32_t* src, const int32_t* row_of, int64_t num_rows, int64_t width, int32_t* dst,
                 cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
