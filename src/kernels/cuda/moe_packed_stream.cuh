// Pieces shared by the streamed tiles of packed experts (moe_mxfp4.cu, moe_fp8.cu): steps of up to
// 8 tokens stage their input rows in shared memory as f16, one-token steps split each warp's k, and
// the launch that picks staged, one-token or unstaged tiles. Both kernels feed each mma.sync
// m16n8k16 the codes k and k + 4 of a row as one f16 pair (x paired alike), lane t taking k
// 32t..32t+31 of each 128-element span.
#pragma once

#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/moe_grouped.cuh"

namespace deepinfer::kernels::cuda {

constexpr size_t kPackedDefaultSharedBytes = 48 * 1024;  // dynamic shared memory without opting in
constexpr size_t kPackedMaxSharedBytes = 227 * 1024;     // what a Hopper block may opt in to

// Steps of up to 8 tokens (one n-tile) read the tile's input rows from shared memory, staged once
// as f16: a lane's x of 8 codes (an MXFP4 word, two FP8 words) is a load there instead of two loads
// from L1 or L2 and four conversions, and those loads no longer wait, one after another, in every
// chunk of every span. Chunk c of a row holds k 8c..8c+7 as the chunk's two products' B fragments
// (x0 x4, x1 x5 | x2 x6, x3 x7). Lane t reads chunks 4t + w of a 16-chunk span: chunks 8-15 of each
// span swap their pairs (c ^ 2), and rows sit an odd number of 16-byte chunks apart modulo 8, so the
// 8 lanes of a load phase (two rows, four t) hit distinct banks.
// Rows take whole spans of 16 chunks, the chunks past k_in zero, so a span's loads need no bound.
__device__ __forceinline__ int staged_chunk(int c) { return c ^ (((c >> 3) & 1) << 1); }
__host__ __device__ inline int staged_row_chunks(int64_t k_in) { return static_cast<int>((k_in / 8 + 15) / 16 * 16 + 1); }
constexpr int64_t kStagedRows = 8;
constexpr int kStageLoads = 4;  // chunks a thread has in flight while staging

template <bool kGateUp>
__device__ __forceinline__ void stage_input_f16(const float* in, const GroupedExperts& experts,
                                                const MoeGrouping& grouping, const ExpertTile& tile, int64_t k_in,
                                                uint4* staged) {
  const int chunks = static_cast<int>(k_in / 8);
  const int row_chunks = staged_row_chunks(k_in);
  const int rows = min(tile.num_rows, static_cast<int>(kStagedRows));
  const int total = rows * chunks;
  const int step = static_cast<int>(blockDim.x);
  const int padding = row_chunks - 1 - chunks;
  for (int i = static_cast<int>(threadIdx.x); i < rows * padding; i += step) {
    staged[(i / padding) * row_chunks + staged_chunk(chunks + i % padding)] = uint4{};
  }
  for (int first = static_cast<int>(threadIdx.x); first < total; first += kStageLoads * step) {
    float4 values[kStageLoads][2];
    int slots[kStageLoads];
#pragma unroll
    for (int q = 0; q < kStageLoads; ++q) {
      const int i = first + q * step;
      if (i >= total) break;
      const int r = i / chunks;
      const int c = i - r * chunks;
      const int32_t grouped = tile.row_begin + r;
      const float* row =
          in + (kGateUp ? int64_t{grouping.rows[grouped] / experts.top_k} : int64_t{grouped}) * k_in + 8 * c;
      values[q][0] = __ldg(reinterpret_cast<const float4*>(row));
      values[q][1] = __ldg(reinterpret_cast<const float4*>(row + 4));
      slots[q] = r * row_chunks + staged_chunk(c);
    }
#pragma unroll
    for (int q = 0; q < kStageLoads; ++q) {
      if (first + q * step >= total) break;
      const float4 a = values[q][0];
      const float4 b = values[q][1];
      staged[slots[q]] = make_uint4(pack_f16(a.x, b.x), pack_f16(a.y, b.y), pack_f16(a.z, b.z), pack_f16(a.w, b.w));
    }
  }
}

// A streamed tile's inputs for lane group g: with one n-tile (kNTiles 1) the tile's rows staged in
// shared memory (staged_row_chunks(k_in) chunks of dynamic shared memory a token), returning
// the lane's staged row; otherwise x_rows gets its n-tiles' rows of in (streamed_input_rows).
template <int kNTiles, bool kGateUp>
__device__ __forceinline__ const uint4* packed_stream_inputs(const float* in, const GroupedExperts& experts,
                                                             const MoeGrouping& grouping, const ExpertTile& tile, int g,
                                                             int64_t k_in, const float* (&x_rows)[kNTiles]) {
  if constexpr (kNTiles == 1) {
    extern __shared__ uint4 staged[];
    stage_input_f16<kGateUp>(in, experts, grouping, tile, k_in, staged);
    __syncthreads();
    return staged + min(g, tile.num_rows - 1) * staged_row_chunks(k_in);
  } else {
    streamed_input_rows<kNTiles, kGateUp>(in, experts, grouping, tile, g, k_in, x_rows);
    return nullptr;
  }
}

// The packed rows a lane streams (row_lo of gate for gate|up, else of down; row_hi of up, else of
// down) and their rows of scales.
template <typename Scale>
struct PackedRows {
  const uint8_t* codes_lo = nullptr;
  const uint8_t* codes_hi = nullptr;
  const Scale* scales_lo = nullptr;
  const Scale* scales_hi = nullptr;
};

// row_bytes: a row's bytes of codes; scale_lo and scale_hi: the two rows' offsets into their scales.
template <bool kGateUp, typename Scale>
__device__ __forceinline__ PackedRows<Scale> packed_rows(const ExpertPointers& p, int64_t row_lo, int64_t row_hi,
                                                         int64_t row_bytes, int64_t scale_lo, int64_t scale_hi) {
  return {static_cast<const uint8_t*>(kGateUp ? p.gate : p.down) + row_lo * row_bytes,
          static_cast<const uint8_t*>(kGateUp ? p.up : p.down) + row_hi * row_bytes,
          static_cast<const Scale*>(kGateUp ? p.gate_scales : p.down_scales) + scale_lo,
          static_cast<const Scale*>(kGateUp ? p.up_scales : p.down_scales) + scale_hi};
}

// A warp's share of k when a block's warps split it in kSplit parts (warp / (kWarps / kSplit)):
// part p takes spans [p * per, (p + 1) * per) of kSpanK columns, per = ceil(spans / kSplit).
struct KRange {
  int64_t begin;
  int64_t end;
};
template <int kSplit, int kWarps>
__device__ __forceinline__ KRange split_k_range(int64_t k_in, int64_t span_k) {
  const int part = static_cast<int>(threadIdx.x / 32) / (kWarps / kSplit);
  const int64_t per = ((k_in + span_k - 1) / span_k + kSplit - 1) / kSplit * span_k;
  return {min(k_in, part * per), min(k_in, (part + 1) * per)};
}

// Where a streamed tile's thread starts: its lane (its warp's columns shared by the kSplit parts of
// k), its part of k, and the block's tile, if any. Gate|up waits for the grouping before finding
// it; down finds it (the grouping's, already written) before waiting for gate|up.
struct PackedTileStart {
  StreamedLane lane;
  KRange k_range;
  ExpertTile tile;
  bool has_tile;
};
template <bool kGateUp, int kSplit, int kWarps>
__device__ __forceinline__ PackedTileStart start_packed_tile(const GroupedExperts& experts, const MoeGrouping& grouping,
                                                             int64_t k_in, int64_t span_k, int tile_rows) {
  constexpr int kColumnWarps = kWarps / kSplit;
  PackedTileStart start{streamed_lane<kGateUp, kColumnWarps>(static_cast<int>(threadIdx.x / 32) % kColumnWarps),
                        split_k_range<kSplit, kWarps>(k_in, span_k),
                        {},
                        false};
  if constexpr (kGateUp) wait_for_previous_grid();
  start.has_tile = find_tile(grouping, experts.num_experts, static_cast<int32_t>(blockIdx.x), tile_rows, start.tile);
  return start;
}

// With k split (kSplit > 1), the first part's warps add the other parts' sums, in part order, and
// return true: only they store. Every thread of the block must call it.
template <int kSplit, int kWarps, int kNTiles>
__device__ __forceinline__ bool gather_split_sums(float (&acc)[kNTiles][4]) {
  if constexpr (kSplit == 1) {
    return true;
  } else {
    constexpr int kColumnWarps = kWarps / kSplit;
    __shared__ float partial[kSplit - 1][kColumnWarps][kNTiles * 4][32];
    const int warp = static_cast<int>(threadIdx.x / 32);
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int part = warp / kColumnWarps;
    const int column_warp = warp % kColumnWarps;
    if (part > 0) {
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) partial[part - 1][column_warp][4 * j + i][lane] = acc[j][i];
      }
    }
    __syncthreads();
    if (part > 0) return false;
#pragma unroll
    for (int p = 0; p < kSplit - 1; ++p) {
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[j][i] += partial[p][column_warp][4 * j + i][lane];
      }
    }
    return true;
  }
}

// Lets kKernel ask for up to kPackedMaxSharedBytes of dynamic shared memory (once per kernel).
template <auto kKernel>
void allow_packed_max_shared() {
  static const bool opted_in = [] {
    DI_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kPackedMaxSharedBytes)));
    return true;
  }();
  (void)opted_in;
}

// Launches kStaged (kNTiles 1, input rows staged) when the step has at most kStagedRows tokens and
// they fit in shared memory, kOneToken (staged, each warp's k split in kOneTokenSplit) for steps of
// one token, else kUnstaged; all take (in, experts, grouping, n_out, k_in, out) on a grid of the
// worst case's tiles by the output columns of a block's warps (kWarps / kOneTokenSplit of them for
// kOneToken, whose warps share columns).
template <auto kStaged, auto kOneToken, int kOneTokenSplit, auto kUnstaged, bool kGateUp, int kWarps>
void launch_packed_stream(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                          float* out, cudaStream_t stream) {
  const int64_t n_out = kGateUp ? experts.intermediate : experts.hidden;
  const int64_t k_in = kGateUp ? experts.hidden : experts.intermediate;
  const auto grid_for = [&](int column_warps) {
    const int64_t columns = column_warps * streamed_warp_columns<kGateUp>();
    return dim3(static_cast<unsigned>(moe_max_tiles(MoeKernel::kTensorCoreStream, num_rows, experts.num_experts)),
                static_cast<unsigned>((n_out + columns - 1) / columns));
  };
  // A token routes to distinct experts, so a tile holds at most one row per token: the staged rows
  // are the step's tokens. Rows too long to stage take the unstaged tiles at every size.
  const int64_t tokens = num_rows / experts.top_k;
  const size_t shared = std::min(tokens, kStagedRows) * staged_row_chunks(k_in) * sizeof(uint4);
  if (tokens > kStagedRows || shared > kPackedMaxSharedBytes) {
    launch_dependent(kUnstaged, grid_for(kWarps), dim3(kWarps * 32), 0, stream, in, experts, grouping, n_out, k_in,
                     out);
    return;
  }
  const bool one_token = tokens == 1;
  if (shared > kPackedDefaultSharedBytes) {
    one_token ? allow_packed_max_shared<kOneToken>() : allow_packed_max_shared<kStaged>();
  }
  launch_dependent(one_token ? kOneToken : kStaged, grid_for(one_token ? kWarps / kOneTokenSplit : kWarps),
                   dim3(kWarps * 32), shared, stream, in, experts, grouping, n_out, k_in, out);
}

}  // namespace deepinfer::kernels::cuda
