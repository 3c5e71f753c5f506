// Grouped expert products on CUDA cores for decode-sized batches: a block takes one tile of up to
// kRows grouped rows of one expert and kWarps * kCols output columns; each warp streams its columns'
// weight rows once (16-byte loads, kUnroll steps in flight) and multiplies the tile's rows, read
// from L1, with float32 accumulation. BF16/F16 weights see x rounded to their dtype (as the
// tensor-core path does); F32 weights see x as is. Also the dispatch of grouped_gate_up/down.
#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe_grouped.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kCols = 4;  // output columns per warp
constexpr int kRows = 4;  // grouped rows per tile
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
    *reinterpret_cast<uint4*>(&out) = __ldg(reinterpret_cast<const uint4*>(p));
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) out.v[i] = p[i];
  }
  return out;
}

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

// kGateUp: in = x (token rows), two weight matrices, the activation into out = h. Otherwise in = h
// (grouped rows), the down matrix into out = y. n_out, k_in: the weights' [rows, cols].
template <typename W, int kVec, bool kGateUp>
__global__ void __launch_bounds__(kWarps * 32)
    rowwise_kernel(const float* __restrict__ in, GroupedExperts experts, MoeGrouping grouping, int64_t n_out,
                   int64_t k_in, float* __restrict__ out) {
  constexpr int kMats = kGateUp ? 2 : 1;
  constexpr int kUnroll = kGateUp ? 1 : 2;  // 8 weight loads in flight per lane
  ExpertTile tile;
  if (!find_tile(grouping, experts.num_experts, static_cast<int32_t>(blockIdx.x), kRows, tile)) return;
  const int64_t col0 = (blockIdx.y * int64_t{kWarps} + threadIdx.x / 32) * kCols;
  if (col0 >= n_out) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const ExpertPointers& p = experts.experts[tile.expert];
  const W* weights[kMats];
  weights[0] = static_cast<const W*>(kGateUp ? p.gate : p.down);
  if constexpr (kGateUp) weights[kMats - 1] = static_cast<const W*>(p.up);
  const W* cols[kMats][kCols];
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) cols[m][c] = weights[m] + min(col0 + c, n_out - 1) * k_in;  // past n_out: not stored
  }
  const float* rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int32_t i = tile.row_begin + min(r, tile.num_rows - 1);
    rows[r] = kGateUp ? in + (grouping.rows[i] / experts.top_k) * k_in : in + int64_t{i} * k_in;
  }
  float acc[kMats][kRows][kCols] = {};
  for (int64_t base = int64_t{lane} * kVec; base < k_in; base += int64_t{32} * kVec * kUnroll) {
    Packet<W, kVec> w[kUnroll][kMats][kCols];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = base + int64_t{u} * 32 * kVec;
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
          if (k < k_in) w[u][m][c] = load_packet<W, kVec>(cols[m][c] + k);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = base + int64_t{u} * 32 * kVec;
      if (k >= k_in) break;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= tile.num_rows) break;
        float xs[kVec];
        load_x<kVec>(rows[r] + k, xs);
#pragma unroll
        for (int i = 0; i < kVec; ++i) xs[i] = to_float(from_float<W>(xs[i]));
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
#pragma unroll
          for (int c = 0; c < kCols; ++c) {
#pragma unroll
            for (int i = 0; i < kVec; ++i) acc[m][r][c] = fmaf(xs[i], to_float(w[u][m][c].v[i]), acc[m][r][c]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      float total[kMats];
#pragma unroll
      for (int m = 0; m < kMats; ++m) total[m] = warp_sum(acc[m][r][c]);
      const int64_t col = col0 + c;
      if (lane != 0 || r >= tile.num_rows || col >= n_out) continue;
      float* dst = out + int64_t{tile.row_begin + r} * n_out + col;
      if constexpr (kGateUp) {
        float g = total[0];
        float u = total[kMats - 1];
        if (p.gate_bias != nullptr) g += load_as_f32(p.gate_bias, experts.bias_dtype, col);
        if (p.up_bias != nullptr) u += load_as_f32(p.up_bias, experts.bias_dtype, col);
        *dst = expert_activation(g, u, experts.activation, experts.swiglu_alpha, experts.swiglu_limit);
      } else {
        *dst = total[0] + (p.down_bias != nullptr ? load_as_f32(p.down_bias, experts.bias_dtype, col) : 0.0f);
      }
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
  const dim3 grid(static_cast<unsigned>(moe_max_tiles(MoeKernel::kRowwise, num_rows, experts.num_experts)),
                  static_cast<unsigned>((n_out + kWarps * kCols - 1) / (kWarps * kCols)));
  if (vector) {
    rowwise_kernel<W, kVec, kGateUp><<<grid, kWarps * 32, 0, stream>>>(in, experts, grouping, n_out, k_in, out);
  } else {
    rowwise_kernel<W, 1, kGateUp><<<grid, kWarps * 32, 0, stream>>>(in, experts, grouping, n_out, k_in, out);
  }
  DI_CUDA_CHECK_LAUNCH("rowwise_kernel");
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

int32_t moe_rows_per_tile(MoeKernel kernel) { return kernel == MoeKernel::kRowwise ? kRows : kTensorRows; }

int64_t moe_max_tiles(MoeKernel kernel, int64_t num_rows, int32_t num_experts) {
  // Each expert with rows adds at most one partial tile.
  return num_rows / moe_rows_per_tile(kernel) + std::min<int64_t>(num_experts, num_rows);
}

void grouped_gate_up(const float* x, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                     MoeKernel kernel, float* h, cudaStream_t stream) {
  if (num_rows == 0) return;
  if (kernel == MoeKernel::kTensorCore) {
    mma_grouped(x, experts, grouping, num_rows, true, h, stream);
  } else {
    rowwise<true>(x, experts, grouping, num_rows, h, stream);
  }
}

void grouped_down(const float* h, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                  MoeKernel kernel, float* y, cudaStream_t stream) {
  if (num_rows == 0) return;
  if (kernel == MoeKernel::kTensorCore) {
    mma_grouped(h, experts, grouping, num_rows, false, y, stream);
  } else {
    rowwise<false>(h, experts, grouping, num_rows, y, stream);
  }
}

}  // namespace deepinfer::kernels::cuda
