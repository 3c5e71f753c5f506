// Grouped expert products for decode batches of 4 to 20 rows per expert on average, on the tensor
// cores with the weights streamed straight from global memory: each warp takes 16 weight rows as
// the A operand of mma.sync m16n8k16 and the tile's grouped rows (the tokens) as its n, 8 at a time.
// A lane loads 16 bytes of each of its two weight rows per 32-element k span and the same 8 k of
// its token row, so nothing passes through shared memory: the k order inside a span is permuted
// alike for both operands (the lanes with t = lane % 4 hold k 8t..8t+3 for the first product,
// 8t+4..8t+7 for the second), which leaves every dot product's terms unchanged. A warp's rows: gate|up, the
// gate and the up rows of 8 output columns, so the activation runs on the accumulators; down, 16
// output columns. Inputs are rounded to the weight dtype, float32 accumulation (as the other
// tensor-core path). The 64-row WMMA tiles read a tile's weights into shared memory and multiply
// 64 rows where a decode step has 4-16: 1.9-2.1 TB/s of expert weights at 64-256 tokens of
// Qwen3-30B-A3B on the H200.
#include <type_traits>

#include "core/check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/moe_grouped.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kTileRows = 32;  // grouped rows of a tile: four n-tiles of 8
constexpr int kNTiles = kTileRows / 8;
constexpr int kSpanK = 32;                  // k of one span: two m16n8k16 products
constexpr int kUnroll = 4;                  // spans whose weights a lane has in flight, twice over

template <typename W>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<W, __nv_bfloat16>) {
    return pack_bf16(lo, hi);
  } else {
    return pack_f16(lo, hi);
  }
}

// c[16x8] += a[16x16] b[16x8] in float32, a and b of W (PTX ISA m16n8k16 fragments).
template <typename W>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<W, __nv_bfloat16>) {
    mma_bf16(c, a, b0, b1);
  } else {
    mma_f16(c, a, b0, b1);
  }
}

// A lane's weights of kUnroll spans: 8 elements of each of its two rows per span (zeros past k_in).
struct SpanWeights {
  uint4 lo[kUnroll];
  uint4 hi[kUnroll];
};

__device__ __forceinline__ void load_spans(const void* row_lo, const void* row_hi, int64_t k_in, int64_t first_k,
                                           SpanWeights& w) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t k = first_k + int64_t{u} * kSpanK;
    const bool valid = k < k_in;
    // 16-bit elements: byte offset 2k.
    w.lo[u] = valid ? __ldcs(reinterpret_cast<const uint4*>(static_cast<const char*>(row_lo) + 2 * k)) : uint4{};
    w.hi[u] = valid ? __ldcs(reinterpret_cast<const uint4*>(static_cast<const char*>(row_hi) + 2 * k)) : uint4{};
  }
}

// in: x (gate|up: token rows, via the grouping) or h (down: grouped rows); out: h or y.
template <typename W, bool kGateUp>
__global__ void __launch_bounds__(kWarps * 32, 4)
    stream_mma_kernel(const float* __restrict__ in, GroupedExperts experts, MoeGrouping grouping, int64_t n_out,
                      int64_t k_in, float* __restrict__ out) {
  const auto [g, t, col_lo, col_hi] = streamed_lane<kGateUp, kWarps>();  // t: the lane's k quad
  // Down follows gate|up, which followed the grouping: its tile and first weights are known before
  // the wait. Gate|up directly follows the grouping.
  ExpertTile tile;
  if constexpr (kGateUp) wait_for_previous_grid();
  const bool has_tile = find_tile(grouping, experts.num_experts, static_cast<int32_t>(blockIdx.x), kTileRows, tile);
  const void* row_lo = nullptr;
  const void* row_hi = nullptr;
  const ExpertPointers* p = nullptr;
  SpanWeights current;
  const int64_t first_k = 8 * t;
  if (has_tile) {
    p = &experts.experts[tile.expert];
    const auto* lo_matrix = static_cast<const W*>(kGateUp ? p->gate : p->down);
    const auto* hi_matrix = static_cast<const W*>(kGateUp ? p->up : p->down);
    row_lo = lo_matrix + min(col_lo, n_out - 1) * k_in;
    row_hi = hi_matrix + min(col_hi, n_out - 1) * k_in;
    load_spans(row_lo, row_hi, k_in, first_k, current);
  }
  if constexpr (!kGateUp) wait_for_previous_grid();
  allow_next_grid();
  if (!has_tile) return;

  const float* x_rows[kNTiles];
  streamed_input_rows<kNTiles, kGateUp>(in, experts, grouping, tile, g, k_in, x_rows);
  const int n_tiles = (tile.num_rows + 7) / 8;
  float acc[kNTiles][4] = {};
  constexpr int64_t kGroupK = int64_t{kUnroll} * kSpanK;
  for (int64_t k0 = 0; k0 < k_in; k0 += kGroupK) {
    SpanWeights next{};
    if (k0 + kGroupK < k_in) load_spans(row_lo, row_hi, k_in, k0 + kGroupK + first_k, next);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k0 + int64_t{u} * kSpanK + first_k;
      const bool valid = k < k_in;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        if (j >= n_tiles) break;
        float4 x0 = {};
        float4 x1 = {};
        if (valid) {
          x0 = __ldg(reinterpret_cast<const float4*>(x_rows[j] + k));
          x1 = __ldg(reinterpret_cast<const float4*>(x_rows[j] + k + 4));
        }
        const uint4& lo = current.lo[u];
        const uint4& hi = current.hi[u];
        const uint32_t first[4] = {lo.x, hi.x, lo.y, hi.y};
        const uint32_t second[4] = {lo.z, hi.z, lo.w, hi.w};
        mma_16816<W>(acc[j], first, pack_pair<W>(x0.x, x0.y), pack_pair<W>(x0.z, x0.w));
        mma_16816<W>(acc[j], second, pack_pair<W>(x1.x, x1.y), pack_pair<W>(x1.z, x1.w));
      }
    }
    current = next;
  }

  store_streamed_tile<kNTiles, kGateUp>(acc, tile, *p, experts, n_out, col_lo, col_hi, t, 1.0f, 1.0f, out);
}

template <typename W, bool kGateUp>
void launch(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows, float* out,
            cudaStream_t stream) {
  const int64_t n_out = kGateUp ? experts.intermediate : experts.hidden;
  const int64_t k_in = kGateUp ? experts.hidden : experts.intermediate;
  const int64_t columns = kWarps * streamed_warp_columns<kGateUp>();
  const dim3 grid(static_cast<unsigned>(moe_max_tiles(MoeKernel::kTensorCoreStream, num_rows, experts.num_experts)),
                  static_cast<unsigned>((n_out + columns - 1) / columns));
  launch_dependent(stream_mma_kernel<W, kGateUp>, grid, dim3(kWarps * 32), 0, stream, in, experts, grouping, n_out,
                   k_in, out);
}

}  // namespace

int32_t moe_stream_rows_per_tile() { return kTileRows; }

bool moe_stream_fits(const GroupedExperts& experts) {
  if (experts.weight_dtype == DType::kMxfp4) {
    return experts.aligned && experts.hidden % kMxfp4Block == 0 && experts.intermediate % kMxfp4Block == 0;
  }
  if (experts.weight_dtype == DType::kF8E4M3) {
    return experts.aligned && experts.scale_block_rows > 0 && experts.hidden % 128 == 0 &&
           experts.intermediate % 128 == 0;
  }
  return (experts.weight_dtype == DType::kBF16 || experts.weight_dtype == DType::kF16) && experts.aligned &&
         experts.hidden % 8 == 0 && experts.intermediate % 8 == 0;
}

void stream_mma_grouped(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                        bool gate_up, float* out, cudaStream_t stream) {
  DI_CHECK(moe_stream_fits(experts),
           "the streamed tensor-core expert kernel takes aligned bf16, f16, MXFP4 or FP8 weights, rows a multiple "
           "of 8 long (MXFP4: of 32, FP8: of 128)");
  DI_CHECK(reinterpret_cast<uintptr_t>(in) % 16 == 0, "the streamed tensor-core expert kernel's input is unaligned");
  if (experts.weight_dtype == DType::kMxfp4) {
    stream_mxfp4_grouped(in, experts, grouping, num_rows, gate_up, out, stream);
    return;
  }
  if (experts.weight_dtype == DType::kF8E4M3) {
    stream_fp8_grouped(in, experts, grouping, num_rows, gate_up, out, stream);
    return;
  }
  with_16bit_weights(experts.weight_dtype, gate_up, [&]<typename W, bool kGateUp>() {
    launch<W, kGateUp>(in, experts, grouping, num_rows, out, stream);
  });
}

}  // namespace deepinfer::kernels::cuda
