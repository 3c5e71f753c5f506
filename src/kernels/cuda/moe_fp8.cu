// FP8 experts (DeepSeek-V3's and Qwen3-FP8's e4m3 codes with one float32 scale per 128 x 128 block,
// kernels/ops.h WeightView) read as published on the streamed tensor-core tiles of moe_mxfp4.cu:
// a warp takes 16 weight rows as the A operand of mma.sync m16n8k16 (f16) and the tile's grouped
// rows, 8 at a time, as n. A lane loads 32 bytes of each of its two rows per 128-element span (one
// scale block), k 32t..32t+31, and the span's scale of each row beside them. Codes k and k + 4 of
// a row become one f16 pair with a byte permute and integer operations alone (an e4m3 code's bits
// placed in an f16 are its value * 2^-8, subnormals included, so every code is exact); x is paired
// alike (moe_packed_stream.cuh stages it). Each span's products accumulate on their own and are
// promoted to the float32 sums with the row's block scale, as DeepSeek's kernels promote each
// 128-column block.
#include "kernels/cuda/moe_packed_stream.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 4;
// The grouping's rows per tile, as the bf16 streamed tiles'.
constexpr int kTileRows = 32;
constexpr int kSpanK = 128;  // a scale block's columns: four lanes' 32 codes of one row
// Spans a lane has in flight, twice over: two where one n-tile's sums leave the registers, one for
// four n-tiles (two spilled under the 128-register cap of four blocks an SM).
template <int kNTiles>
constexpr int kUnroll = kNTiles == 1 ? 2 : 1;
// An e4m3 code in an f16's bits is its value times 2^-8: the promotion undoes it.
constexpr float kCodeFactor = 256.0f;

// A lane's codes of kSpans spans, 32 of each of its two rows per span (zeros past k_in), and the
// spans' block scales of both rows.
template <int kSpans>
struct SpanCodes {
  uint4 lo[kSpans][2];
  uint4 hi[kSpans][2];
  float lo_scale[kSpans];
  float hi_scale[kSpans];
};

template <int kSpans>
__device__ __forceinline__ void load_spans(const PackedRows<float>& rows, int64_t k_in, int64_t span_k, int64_t first_k,
                                           SpanCodes<kSpans>& w) {
#pragma unroll
  for (int u = 0; u < kSpans; ++u) {
    const int64_t span = span_k + int64_t{u} * kSpanK;
    const int64_t k = span + first_k;
    const bool valid = span < k_in;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      w.lo[u][half] = valid ? __ldcs(reinterpret_cast<const uint4*>(rows.codes_lo + k) + half) : uint4{};
      w.hi[u][half] = valid ? __ldcs(reinterpret_cast<const uint4*>(rows.codes_hi + k) + half) : uint4{};
    }
    // A block's scale serves its 128 rows: left in the caches for the other warps.
    w.lo_scale[u] = valid ? __ldg(rows.scales_lo + span / kSpanK) : 0.0f;
    w.hi_scale[u] = valid ? __ldg(rows.scales_hi + span / kSpanK) : 0.0f;
  }
}

// Bytes 0 and 2 of v, e4m3 codes, as an f16 pair (value * 2^-8): sign to bit 15 of each half,
// exponent and mantissa to bits 7-13.
__device__ __forceinline__ uint32_t f16_pair_of_even_bytes(uint32_t v) {
  return ((v & 0x00800080u) << 8) | ((v & 0x007f007fu) << 7);
}
// Bytes 1 and 3 alike.
__device__ __forceinline__ uint32_t f16_pair_of_odd_bytes(uint32_t v) {
  return (v & 0x80008000u) | ((v & 0x7f007f00u) >> 1);
}

// The two products' A pairs of one row's 8 codes (words w0 = codes 0-3, w1 = codes 4-7): first
// holds codes {0, 4 | 1, 5}, second {2, 6 | 3, 7}.
struct RowPairs {
  uint32_t first[2];
  uint32_t second[2];
};
__device__ __forceinline__ RowPairs row_pairs(uint32_t w0, uint32_t w1) {
  const uint32_t low = __byte_perm(w0, w1, 0x5410);   // codes 0, 1, 4, 5
  const uint32_t high = __byte_perm(w0, w1, 0x7632);  // codes 2, 3, 6, 7
  return {{f16_pair_of_even_bytes(low), f16_pair_of_odd_bytes(low)},
          {f16_pair_of_even_bytes(high), f16_pair_of_odd_bytes(high)}};
}

// in: x (gate|up: token rows, via the grouping) or h (down: grouped rows); out: h or y. kNTiles:
// the n-tiles of 8 rows a tile may fill (1 for steps of up to 8 tokens, whose input rows are staged
// in shared memory; 4 otherwise, read from L1). kSplit: the block's warps share their columns, each
// taking a kSplit-th of k (split_k_range).
template <bool kGateUp, int kNTiles, int kSplit = 1>
__global__ void __launch_bounds__(kWarps * 32, 4)
    stream_fp8_kernel(const float* __restrict__ in, GroupedExperts experts, MoeGrouping grouping, int64_t n_out,
                      int64_t k_in, float* __restrict__ out) {
  const auto [lane, k_range, tile, has_tile] =
      start_packed_tile<kGateUp, kSplit, kWarps>(experts, grouping, k_in, kSpanK, kTileRows);
  const auto [g, t, col_lo, col_hi] = lane;
  const int64_t row_lo = min(col_lo, n_out - 1);
  const int64_t row_hi = min(col_hi, n_out - 1);
  const int64_t scale_cols = k_in / kSpanK;
  PackedRows<float> rows;
  const ExpertPointers* p = nullptr;
  constexpr int kSpans = kUnroll<kNTiles>;
  SpanCodes<kSpans> current;
  const int64_t first_k = int64_t{32} * t;
  if (has_tile) {
    p = &experts.experts[tile.expert];
    rows = packed_rows<kGateUp, float>(*p, row_lo, row_hi, k_in, row_lo / experts.scale_block_rows * scale_cols,
                                       row_hi / experts.scale_block_rows * scale_cols);
    load_spans(rows, k_range.end, k_range.begin, first_k, current);
  }
  if constexpr (!kGateUp) wait_for_previous_grid();
  allow_next_grid();
  if (!has_tile) return;

  constexpr bool kStaged = kNTiles == 1;
  const float* x_rows[kNTiles];
  const uint4* staged_row = packed_stream_inputs<kNTiles, kGateUp>(in, experts, grouping, tile, g, k_in, x_rows);
  const int n_tiles = (tile.num_rows + 7) / 8;
  float acc[kNTiles][4] = {};
  constexpr int64_t kGroupK = int64_t{kSpans} * kSpanK;
  for (int64_t k0 = k_range.begin; k0 < k_range.end; k0 += kGroupK) {
    SpanCodes<kSpans> next{};
    if (k0 + kGroupK < k_range.end) {
      load_spans(rows, k_range.end, k0 + kGroupK, first_k, next);
    }
#pragma unroll
    for (int u = 0; u < kSpans; ++u) {
      const int64_t k = k0 + int64_t{u} * kSpanK + first_k;
      if (k >= k_range.end) break;
      float span[kNTiles][4] = {};
      const uint32_t lo_words[8] = {current.lo[u][0].x, current.lo[u][0].y, current.lo[u][0].z, current.lo[u][0].w,
                                    current.lo[u][1].x, current.lo[u][1].y, current.lo[u][1].z, current.lo[u][1].w};
      const uint32_t hi_words[8] = {current.hi[u][0].x, current.hi[u][0].y, current.hi[u][0].z, current.hi[u][0].w,
                                    current.hi[u][1].x, current.hi[u][1].y, current.hi[u][1].z, current.hi[u][1].w};
#pragma unroll
      for (int chunk = 0; chunk < 4; ++chunk) {
        const RowPairs lo = row_pairs(lo_words[2 * chunk], lo_words[2 * chunk + 1]);
        const RowPairs hi = row_pairs(hi_words[2 * chunk], hi_words[2 * chunk + 1]);
        const uint32_t first[4] = {lo.first[0], hi.first[0], lo.first[1], hi.first[1]};
        const uint32_t second[4] = {lo.second[0], hi.second[0], lo.second[1], hi.second[1]};
        if constexpr (kStaged) {
          const uint4 x = staged_row[staged_chunk(static_cast<int>(k / 8) + chunk)];
          mma_f16(span[0], first, x.x, x.y);
          mma_f16(span[0], second, x.z, x.w);
        } else {
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
            if (j >= n_tiles) break;
            const float4 x0 = __ldg(reinterpret_cast<const float4*>(x_rows[j] + k + 8 * chunk));
            const float4 x1 = __ldg(reinterpret_cast<const float4*>(x_rows[j] + k + 8 * chunk + 4));
            mma_f16(span[j], first, pack_f16(x0.x, x1.x), pack_f16(x0.y, x1.y));
            mma_f16(span[j], second, pack_f16(x0.z, x1.z), pack_f16(x0.w, x1.w));
          }
        }
      }
      const float lo_scale = current.lo_scale[u] * kCodeFactor;
      const float hi_scale = current.hi_scale[u] * kCodeFactor;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        acc[j][0] = fmaf(span[j][0], lo_scale, acc[j][0]);
        acc[j][1] = fmaf(span[j][1], lo_scale, acc[j][1]);
        acc[j][2] = fmaf(span[j][2], hi_scale, acc[j][2]);
        acc[j][3] = fmaf(span[j][3], hi_scale, acc[j][3]);
      }
    }
    current = next;
  }
  if (!gather_split_sums<kSplit, kWarps>(acc)) return;
  store_streamed_tile<kNTiles, kGateUp>(acc, tile, *p, experts, n_out, col_lo, col_hi, t, 1.0f, 1.0f, out);
}

// Steps of one token split each warp's k in two (moe_mxfp4.cu says why): on an H100 a Qwen3-30B-A3B
// layer's experts took 21.8 us instead of 23.9 (four ways: 25.7).
constexpr int kOneTokenSplit = 2;

template <bool kGateUp>
void launch(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows, float* out,
            cudaStream_t stream) {
  launch_packed_stream<stream_fp8_kernel<kGateUp, 1>, stream_fp8_kernel<kGateUp, 1, kOneTokenSplit>, kOneTokenSplit,
                       stream_fp8_kernel<kGateUp, kTileRows / 8>, kGateUp, kWarps>(in, experts, grouping, num_rows, out,
                                                                                   stream);
}

}  // namespace

void stream_fp8_grouped(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                        bool gate_up, float* out, cudaStream_t stream) {
  DI_CHECK(moe_stream_rows_per_tile() == kTileRows, "the grouping's tiles are not the FP8 kernel's");
  DI_CHECK(experts.scale_block_rows > 0 && experts.hidden % kSpanK == 0 && experts.intermediate % kSpanK == 0,
           "FP8 experts need 128-column scale blocks over rows of a multiple of 128");
  gate_up ? launch<true>(in, experts, grouping, num_rows, out, stream)
          : launch<false>(in, experts, grouping, num_rows, out, stream);
}

}  // namespace deepinfer::kernels::cuda
