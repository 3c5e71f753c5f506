// Grouped expert products on CUDA cores for decode-sized batches: a block takes one tile of up to
// kRows grouped rows of one expert and kWeightRows weight rows (gate|up: the gate rows and the up
// rows of the same columns; down: as many columns); its warps split K, as the dense GEMV's
// do (gemv.cu), so even an expert's 768-element down rows keep every lane's loads in flight, and
// the warps' sums are added in warp order (deterministic). BF16/F16 weights see x rounded to their
// dtype (as the tensor-core path does); F32 weights see x as is; float32 accumulation. Launched as
// dependent kernels: blocks are resident before the grouping they read is done (gate|up) or before
// h is (down, whose first weights are then on their way to L2). Also the dispatch of
// grouped_gate_up/down.
#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe_grouped.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kCols = 4;          // output columns of a gate|up block; down blocks: weight_rows
constexpr int kRows = 4;          // grouped rows per tile
constexpr int kTensorRows = 64;

// kVec consecutive weights: one 16-byte load on the vector path, scalar loads otherwise.
template <typename W, int kVec>
struct alignas(kVec * sizeof(W) == 16 ? 16 : alignof(W)) Packet {
  W v[kVec];
};

template <typename W, int kVec>
__device__ __forceinline__ Packet<W, kVec> load_packet(const W* p) {
  Packet<W, kVec> out;
  if constexpr (kVec * sizeof(W) == 16) {
    *reinterpret_cast<uint4*>(&out) = __ldcs(reinterpret_cast<const uint4*>(p));
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) out.v[i] = p[i];
  }
  return out;
}

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

template <int kVec>
__device__ __forceinline__ void load_x(const float* p, float (&out)[kVec]) {
  if constexpr (kVec % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kVec; i += 4) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(p + i));
      out[i] = v.x;
      out[i + 1] = v.y;
      out[i + 2] = v.z;
      out[i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = p[i];
  }
}

// Weight rows a block streams: down blocks of one-row tiles (batch-1 steps) take twice the rows,
// 16 loads in flight per lane in half the blocks (each block's tile lookup, reduction and barrier
// weighed on an expert's short down rows: with the early L2 prefetch below, Qwen3-30B-A3B's down
// went 10.9 -> 9.2 us a layer; gate|up blocks of 16 rows measured 1.4 us slower).
__host__ __device__ constexpr int weight_rows(bool gate_up, int tile_rows) {
  return !gate_up && tile_rows == 1 ? 4 * kCols : 2 * kCols;
}

// kGateUp: in = x (token rows), two weight matrices, the activation into out = h. Otherwise in = h
// (grouped rows), the down matrix into out = y. n_out, k_in: the weights' [rows, cols].
// kTileRows: the most rows a tile holds in this launch (a tile of a batch of one token holds one),
// so accumulators and x loads are kept for no more; with kWeightRows 16-byte loads in flight per
// lane, four or more blocks fit an SM (with twice the loads and four rows of accumulators it took
// 255 registers, two blocks fit, and gate|up ran in four waves).
template <typename W, int kVec, bool kGateUp, int kTileRows>
__global__ void __launch_bounds__(kWarps * 32, 4)
    rowwise_kernel(const float* __restrict__ in, GroupedExperts experts, MoeGrouping grouping, int64_t n_out,
                   int64_t k_in, float* __restrict__ out) {
  constexpr int kWeightRows = weight_rows(kGateUp, kTileRows);
  constexpr int kOut = kGateUp ? kWeightRows / 2 : kWeightRows;  // output columns of the block
  __shared__ float partial[kWarps][kTileRows][kWeightRows];
  const int64_t col0 = blockIdx.y * int64_t{kOut};
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t vecs = k_in / kVec;
  const int64_t chunk = (vecs + kWarps - 1) / kWarps;
  const int64_t begin = warp * chunk;
  const int64_t end = min(begin + chunk, vecs);
  ExpertTile tile;  // the same for the whole block, so whole blocks leave
  const ExpertPointers* p = nullptr;
  const W* cols[kWeightRows];
  const auto find = [&] {
    if (!find_tile(grouping, experts.num_experts, static_cast<int32_t>(blockIdx.x), kRows, tile)) return false;
    p = &experts.experts[tile.expert];
#pragma unroll
    for (int c = 0; c < kWeightRows; ++c) {
      // Past n_out: a duplicate row, not stored. Up rows are the gate rows' columns in the up matrix.
      const int64_t col = min(col0 + c % kOut, n_out - 1);
      const void* matrix = kGateUp ? (c < kOut ? p->gate : p->up) : p->down;
      cols[c] = static_cast<const W*>(matrix) + col * k_in;
    }
    return true;
  };
  // The grouping finished before gate|up (the kernel before down) started, so a down block of a
  // one- or two-token step finds its tile and has its first weights on their way to L2 (a prefetch
  // holds no registers) before it waits for h. (With four rows' accumulators the pointers kept
  // across the wait spill.)
  constexpr bool kEarly = !kGateUp && kTileRows <= 2;
  bool has_tile = true;
  if constexpr (kEarly) {
    has_tile = find();
    if (has_tile && begin + lane < end) {
#pragma unroll
      for (int c = 0; c < kWeightRows; ++c) prefetch_l2(cols[c] + (begin + lane) * kVec);
    }
  }
  wait_for_previous_grid();
  allow_next_grid();
  if constexpr (!kEarly) has_tile = find();
  if (!has_tile) return;
  // More rows than kTileRows only where a token routed to one expert twice: its weights are read again.
  for (int32_t first = 0; first < tile.num_rows; first += kTileRows) {
    const int32_t num_rows = min(kTileRows, tile.num_rows - first);
    const float* rows[kTileRows];
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) {
      const int32_t i = tile.row_begin + first + min(r, num_rows - 1);
      rows[r] = kGateUp ? in + (grouping.rows[i] / experts.top_k) * k_in : in + int64_t{i} * k_in;
    }
    float acc[kTileRows][kWeightRows] = {};
    for (int64_t v = begin + lane; v < end; v += 32) {
      Packet<W, kVec> w[kWeightRows];
#pragma unroll
      for (int c = 0; c < kWeightRows; ++c) w[c] = load_packet<W, kVec>(cols[c] + v * kVec);
#pragma unroll
      for (int r = 0; r < kTileRows; ++r) {
        if (r >= num_rows) break;
        float xs[kVec];
        load_x<kVec>(rows[r] + v * kVec, xs);
#pragma unroll
        for (int i = 0; i < kVec; ++i) xs[i] = to_float(from_float<W>(xs[i]));
#pragma unroll
        for (int c = 0; c < kWeightRows; ++c) {
#pragma unroll
          for (int i = 0; i < kVec; ++i) acc[r][c] = fmaf(xs[i], to_float(w[c].v[i]), acc[r][c]);
        }
      }
    }
    if (first > 0) __syncthreads();  // the previous rows' partials are read
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) {
#pragma unroll
      for (int c = 0; c < kWeightRows; ++c) {
        const float total = warp_sum(acc[r][c]);
        if (lane == 0) partial[warp][r][c] = total;
      }
    }
    __syncthreads();
    const int r = static_cast<int>(threadIdx.x) / kOut;
    const int c = static_cast<int>(threadIdx.x) % kOut;
    const int64_t col = col0 + c;
    if (r >= num_rows || col >= n_out) continue;
    float* dst = out + int64_t{tile.row_begin + first + r} * n_out + col;
    float sum = sum_over_warps(partial, r, c);
    if constexpr (kGateUp) {
      float up = sum_over_warps(partial, r, c + kOut);
      if (p->gate_bias != nullptr) sum += load_as_f32(p->gate_bias, experts.bias_dtype, col);
      if (p->up_bias != nullptr) up += load_as_f32(p->up_bias, experts.bias_dtype, col);
      *dst = expert_activation(sum, up, experts.activation, experts.swiglu_alpha, experts.swiglu_limit);
    } else {
      *dst = sum + (p->down_bias != nullptr ? load_as_f32(p->down_bias, experts.bias_dtype, col) : 0.0f);
    }
  }
}

template <typename W, bool kGateUp>
void launch_rowwise(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                    float* out, cudaStream_t stream) {
  constexpr int kVec = static_cast<int>(16 / sizeof(W));
  const int64_t n_out = kGateUp ? experts.intermediate : experts.hidden;
  const int64_t k_in = kGateUp ? experts.hidden : experts.intermediate;
  const bool vector = experts.aligned && k_in % kVec == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0;
  const auto tiles = static_cast<unsigned>(moe_max_tiles(MoeKernel::kRowwise, num_rows, experts.num_experts));
  // A token routes to distinct experts, so a tile holds at most one row per token.
  const int64_t num_tokens = num_rows / experts.top_k;
  const auto run = [&](auto kernel, int tile_rows) {
    const int out_columns = kGateUp ? weight_rows(true, tile_rows) / 2 : weight_rows(false, tile_rows);
    const dim3 grid(tiles, static_cast<unsigned>((n_out + out_columns - 1) / out_columns));
    launch_dependent(kernel, grid, dim3(kWarps * 32), 0, stream, in, experts, grouping, n_out, k_in, out);
  };
  if (!vector) {
    run(rowwise_kernel<W, 1, kGateUp, kRows>, kRows);
  } else if (num_tokens == 1) {
    run(rowwise_kernel<W, kVec, kGateUp, 1>, 1);
  } else if (num_tokens == 2) {
    run(rowwise_kernel<W, kVec, kGateUp, 2>, 2);
  } else {
    run(rowwise_kernel<W, kVec, kGateUp, kRows>, kRows);
  }
}

template <bool kGateUp>
void rowwise(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
             float* out, cudaStream_t stream) {
  switch (experts.weight_dtype) {
    case DType::kBF16: launch_rowwise<__nv_bfloat16, kGateUp>(in, experts, grouping, num_rows, out, stream); break;
    case DType::kF16: launch_rowwise<__half, kGateUp>(in, experts, grouping, num_rows, out, stream); break;
    default: launch_rowwise<float, kGateUp>(in, experts, grouping, num_rows, out, stream); break;
  }
}

}  // namespace

int32_t moe_rows_per_tile(MoeKernel kernel) {
  if (kernel == MoeKernel::kRowwise) return kRows;
  return kernel == MoeKernel::kTensorCoreStream ? moe_stream_rows_per_tile() : kTensorRows;
}

int64_t moe_max_tiles(MoeKernel kernel, int64_t num_rows, int32_t num_experts) {
  // Each expert with rows adds at most one partial tile.
  return num_rows / moe_rows_per_tile(kernel) + std::min<int64_t>(num_experts, num_rows);
}

void grouped_gate_up(const float* x, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                     MoeKernel kernel, float* h, cudaStream_t stream) {
  if (num_rows == 0) return;
  if (kernel == MoeKernel::kTensorCore) {
    mma_grouped(x, experts, grouping, num_rows, true, h, stream);
  } else if (kernel == MoeKernel::kTensorCoreStream) {
    stream_mma_grouped(x, experts, grouping, num_rows, true, h, stream);
  } else {
    rowwise<true>(x, experts, grouping, num_rows, h, stream);
  }
}

void grouped_down(const float* h, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                  MoeKernel kernel, float* y, cudaStream_t stream) {
  if (num_rows == 0) return;
  if (kernel == MoeKernel::kTensorCore) {
    mma_grouped(h, experts, grouping, num_rows, false, y, stream);
  } else if (kernel == MoeKernel::kTensorCoreStream) {
    stream_mma_grouped(h, experts, grouping, num_rows, false, y, stream);
  } else {
    rowwise<false>(h, experts, grouping, num_rows, y, stream);
  }
}

}  // namespace deepinfer::kernels::cuda
