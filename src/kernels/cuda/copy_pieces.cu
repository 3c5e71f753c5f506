// One-launch copy of many pieces, and the row gather (kernels/cuda/copy_pieces.h). Each grid row y
// of the copy is one piece; its blocks stride over the piece's words, so every thread keeps a PCIe
// read or write in flight.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/copy_pieces.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kThreads = 256;
// About 1024 blocks a launch in all (a few per SM), so enough PCIe reads are in flight for one
// big piece as for many small ones.
constexpr size_t kBlocksPerLaunch = 1024;

struct PieceTable {
  CopyPiece pieces[kMaxPiecesPerLaunch];
};

// The host's f32_to_bf16 (core/dtype.h) bit for bit: NaN stays quiet NaN, else round to nearest even.
__device__ __forceinline__ uint32_t bf16_bits(uint32_t bits) {
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40u;
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

// kVec words per thread step: 4 (uint4 loads) when every source, destination and size allows it.
template <int kVec>
__device__ __forceinline__ void copy_piece(const PieceTable& table) {
  const CopyPiece& piece = table.pieces[blockIdx.y];
  const auto* words = static_cast<const uint32_t*>(piece.src);
  const size_t steps = piece.num_floats / kVec;
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < steps; i += size_t{gridDim.x} * kThreads) {
    if constexpr (kVec == 4) {
      const uint4 v = reinterpret_cast<const uint4*>(words)[i];
      if (piece.to_bf16) {
        reinterpret_cast<uint2*>(piece.dst)[i] =
            make_uint2(bf16_bits(v.x) | (bf16_bits(v.y) << 16), bf16_bits(v.z) | (bf16_bits(v.w) << 16));
      } else {
        reinterpret_cast<uint4*>(piece.dst)[i] = v;
      }
    } else {
      const uint32_t v = words[i];
      if (piece.to_bf16) {
        static_cast<uint16_t*>(piece.dst)[i] = static_cast<uint16_t>(bf16_bits(v));
      } else {
        static_cast<uint32_t*>(piece.dst)[i] = v;
      }
    }
  }
}

// The same copy under two names, so a trace tells a step's readback from its uploads.
template <int kVec>
__global__ void copy_pieces_kernel(PieceTable table) {
  copy_piece<kVec>(table);
}
template <int kVec>
__global__ void copy_pieces_to_host_kernel(PieceTable table) {
  copy_piece<kVec>(table);
}

// One thread per element of dst's rows.
__global__ void gather_rows_kernel(const int32_t* __restrict__ src, const int32_t* __restrict__ row_of, int64_t total,
                                   int64_t width, int32_t* __restrict__ dst) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total; i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / width;
    const int64_t from = row_of != nullptr ? row_of[r] : r;
    if (from >= 0) dst[i] = src[from * width + i % width];
  }
}

bool vectorizable(const CopyPiece& piece) {
  const auto src_addr = reinterpret_cast<uintptr_t>(piece.src);
  const auto dst_addr = reinterpret_cast<uintptr_t>(piece.dst);
  return src_addr % 16 == 0 && dst_addr % (piece.to_bf16 ? 8 : 16) == 0 && piece.num_floats % 4 == 0;
}

}  // namespace

void copy_pieces(const std::vector<CopyPiece>& pieces, cudaStream_t stream, CopyInto into) {
  for (size_t first = 0; first < pieces.size(); first += kMaxPiecesPerLaunch) {
    const size_t count = std::min(kMaxPiecesPerLaunch, pieces.size() - first);
    PieceTable table{};
    size_t max_floats = 0;
    bool vec = true;
    for (size_t i = 0; i < count; ++i) {
      table.pieces[i] = pieces[first + i];
      max_floats = std::max(max_floats, table.pieces[i].num_floats);
      vec = vec && vectorizable(table.pieces[i]);
    }
    if (max_floats == 0) continue;
    const size_t steps = vec ? max_floats / 4 : max_floats;
    const size_t per_piece = std::max<size_t>(kBlocksPerLaunch / count, 4);
    const dim3 grid(static_cast<unsigned>(std::min((steps + kThreads - 1) / kThreads, per_piece)),
                    static_cast<unsigned>(count));
    const bool to_host = into == CopyInto::kHost;
    if (vec) {
      (to_host ? copy_pieces_to_host_kernel<4> : copy_pieces_kernel<4>)<<<grid, kThreads, 0, stream>>>(table);
    } else {
      (to_host ? copy_pieces_to_host_kernel<1> : copy_pieces_kernel<1>)<<<grid, kThreads, 0, stream>>>(table);
    }
    DI_CUDA_CHECK_LAUNCH("copy_pieces_kernel");
  }
}

void gather_rows(const int32_t* src, const int32_t* row_of, int64_t num_rows, int64_t width, int32_t* dst,
                 cudaStream_t stream) {
  const int64_t total = num_rows * width;
  if (total == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, kBlocksPerLaunch));
  gather_rows_kernel<<<blocks, kThreads, 0, stream>>>(src, row_of, total, width, dst);
  DI_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

}  // namespace deepinfer::kernels::cuda
