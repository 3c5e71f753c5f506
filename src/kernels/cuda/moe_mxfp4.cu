// MXFP4 experts (GPT-OSS: e2m1 codes two to a byte, an e8m0 scale per 32) read as published: the
// streamed tensor-core tiles of moe_mma_stream.cu for every step short of the grouped GEMMs, and
// the codes dequantised to bf16 for the grouped GEMMs of prompt-sized steps.
//
// Streamed tiles: a warp takes 16 weight rows as the A operand of mma.sync m16n8k16 (f16) and the
// tile's grouped rows, 8 at a time, as n. A lane loads 16 bytes of each of its two rows per
// 128-element k span, k 32t..32t+31 of the span (one MX block, whose scale it loads beside). Codes
// i and i + 4 of a 32-bit word become an f16 pair with integer operations alone (the e2m1 sign to
// bit 15, exponent and mantissa to bits 9-11: the value * 2^-14), and one f16 multiply applies
// 2^(14 + scale - the row's largest scale), at most 2^14, so nothing overflows whatever the scales;
// the row's sums take 2^(row's largest - 127) at the end. Blocks whose scale is at least 2^-23 of
// the row's largest are exact; smaller ones round (f16 subnormals), to zero under about 2^-28. A
// word's codes 0, 4 | 1, 5 feed one product and 2, 6 | 3, 7 the next, x paired alike, so each dot
// product keeps its terms. A batch-1 step's warps are few (four experts' rows) and each issues
// its ~7000 instructions one after another (Nsight Compute on an H100: 2.6 warps a scheduler, one
// issue every 5.6 cycles, 40 % of DRAM bandwidth), so one-token steps split each warp's k four ways
// (docs/benchmarks.md, "MXFP4 experts kept packed").
#include <algorithm>

#include "kernels/cuda/moe_packed_stream.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 4;
// The grouping's rows per tile, as the bf16 streamed tiles'.
constexpr int kTileRows = 32;
constexpr int kSpanK = 4 * static_cast<int>(kMxfp4Block);  // four lanes' MX blocks of one row

// A lane's codes of kUnroll spans: one MX block of each of its two rows per span (zeros past k_in),
// and the blocks' e8m0 scales, span u's in byte u.
template <int kUnroll>
struct SpanCodes {
  uint4 lo[kUnroll];
  uint4 hi[kUnroll];
  uint32_t lo_scales;
  uint32_t hi_scales;
  static_assert(kUnroll <= 4, "a span's scale per byte of one word");
  __device__ __forceinline__ uint32_t lo_scale(int u) const { return (lo_scales >> (8 * u)) & 0xFFu; }
  __device__ __forceinline__ uint32_t hi_scale(int u) const { return (hi_scales >> (8 * u)) & 0xFFu; }
};

template <int kUnroll>
__device__ __forceinline__ void load_spans(const PackedRows<uint8_t>& rows, int64_t k_in, int64_t first_k,
                                           SpanCodes<kUnroll>& w) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t k = first_k + int64_t{u} * kSpanK;
    const bool valid = k < k_in;
    if (u == 0) w.lo_scales = w.hi_scales = 0;
    w.lo[u] = valid ? __ldcs(reinterpret_cast<const uint4*>(rows.codes_lo + k / 2)) : uint4{};
    w.hi[u] = valid ? __ldcs(reinterpret_cast<const uint4*>(rows.codes_hi + k / 2)) : uint4{};
    w.lo_scales |= (valid ? uint32_t{__ldcs(rows.scales_lo + k / kMxfp4Block)} : 0u) << (8 * u);
    w.hi_scales |= (valid ? uint32_t{__ldcs(rows.scales_hi + k / kMxfp4Block)} : 0u) << (8 * u);
  }
}

// The f16 pairs (value * 2^-14) of a word's eight codes, pairs[i] holding codes i and i + 4: each
// byte's high and low codes rebuilt as f16 high bytes (sign to bit 7, exponent and mantissa to bits
// 1-3) in odd and even, then bytes 0 and 2, or 1 and 3, moved to the halves' high bytes. Four pairs
// cost seven logic operations and four byte permutes (three operations a pair before).
__device__ __forceinline__ void f16_pairs_of_codes(uint32_t word, uint32_t (&pairs)[4]) {
  const uint32_t odd = (word & 0x80808080u) | ((word >> 3) & 0x0E0E0E0Eu);
  const uint32_t even = ((word << 4) & 0x80808080u) | ((word << 1) & 0x0E0E0E0Eu);
  pairs[0] = __byte_perm(even, 0, 0x2404);
  pairs[1] = __byte_perm(odd, 0, 0x2404);
  pairs[2] = __byte_perm(even, 0, 0x3414);
  pairs[3] = __byte_perm(odd, 0, 0x3414);
}

// pair times factor, both f16 pairs.
__device__ __forceinline__ uint32_t scaled(uint32_t pair, uint32_t factor) {
  const __half2 product = __hmul2(*reinterpret_cast<const __half2*>(&pair), *reinterpret_cast<const __half2*>(&factor));
  return *reinterpret_cast<const uint32_t*>(&product);
}

// 2^(14 + scale - the row's largest) as an f16 pair, bias = 141 - the row's largest: the float32
// power rounded to f16 (subnormal from 2^-15, zero past 2^-24).
__device__ __forceinline__ uint32_t f16_pair_of_scale(int bias, uint32_t scale) {
  const float power = __int_as_float(max(bias + static_cast<int>(scale), 0) << 23);
  const __half2 pair = __floats2half2_rn(power, power);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// in: x (gate|up: token rows, via the grouping) or h (down: grouped rows); out: h or y. kNTiles:
// the n-tiles of 8 rows a tile may fill (1 for steps of up to 8 tokens, whose input rows are staged
// in shared memory: staged_row_chunks(k_in) chunks a token; 4 otherwise, read from L1).
// kSplit: the block's warps share their columns, each taking a kSplit-th of k (split_k_range);
// kUnroll: spans a lane has in flight, twice over; kMinBlocks: blocks an SM holds (the register cap).
template <bool kGateUp, int kNTiles, int kSplit = 1, int kUnroll = 4, int kMinBlocks = 4>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    stream_mxfp4_kernel(const float* __restrict__ in, GroupedExperts experts, MoeGrouping grouping, int64_t n_out,
                        int64_t k_in, float* __restrict__ out) {
  const auto [lane, k_range, tile, has_tile] =
      start_packed_tile<kGateUp, kSplit, kWarps>(experts, grouping, k_in, kSpanK, kTileRows);
  const auto [g, t, col_lo, col_hi] = lane;  // t: the lane's MX block of a span
  const int64_t row_lo = min(col_lo, n_out - 1);
  const int64_t row_hi = min(col_hi, n_out - 1);
  const int64_t scale_cols = k_in / kMxfp4Block;
  PackedRows<uint8_t> rows;
  const ExpertPointers* p = nullptr;
  SpanCodes<kUnroll> current;
  const int64_t first_k = int64_t{kMxfp4Block} * t;
  if (has_tile) {
    p = &experts.experts[tile.expert];
    rows = packed_rows<kGateUp, uint8_t>(*p, row_lo, row_hi, k_in / 2, row_lo * scale_cols, row_hi * scale_cols);
    load_spans(rows, k_range.end, k_range.begin + first_k, current);
  }
  if constexpr (!kGateUp) wait_for_previous_grid();
  allow_next_grid();
  if (!has_tile) return;

  const int64_t row_max_offset = mxfp4_row_max_offset(n_out, k_in);
  const int max_lo = static_cast<const uint8_t*>(kGateUp ? p->gate_scales : p->down_scales)[row_max_offset + row_lo];
  const int max_hi = static_cast<const uint8_t*>(kGateUp ? p->up_scales : p->down_scales)[row_max_offset + row_hi];
  constexpr bool kStaged = kNTiles == 1;
  const float* x_rows[kNTiles];
  const uint4* staged_row = packed_stream_inputs<kNTiles, kGateUp>(in, experts, grouping, tile, g, k_in, x_rows);
  const int n_tiles = (tile.num_rows + 7) / 8;
  float acc[kNTiles][4] = {};
  constexpr int64_t kGroupK = int64_t{kUnroll} * kSpanK;
  for (int64_t k0 = k_range.begin; k0 < k_range.end; k0 += kGroupK) {
    SpanCodes<kUnroll> next{};
    if (k0 + kGroupK < k_range.end) {
      load_spans(rows, k_range.end, k0 + kGroupK + first_k, next);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (k0 + int64_t{u} * kSpanK >= k_range.end) break;  // the warp's spans past its part of k
      const int64_t k = k0 + int64_t{u} * kSpanK + first_k;
      const uint32_t lo_factor = f16_pair_of_scale(141 - max_lo, current.lo_scale(u));
      const uint32_t hi_factor = f16_pair_of_scale(141 - max_hi, current.hi_scale(u));
      const uint32_t lo_words[4] = {current.lo[u].x, current.lo[u].y, current.lo[u].z, current.lo[u].w};
      const uint32_t hi_words[4] = {current.hi[u].x, current.hi[u].y, current.hi[u].z, current.hi[u].w};
      const int staged_span = 16 * (static_cast<int>(k0 / kSpanK) + u);
#pragma unroll
      for (int word = 0; word < 4; ++word) {
        // Codes 8 word + {0, 4 | 1, 5} of both rows, then 8 word + {2, 6 | 3, 7}.
        uint32_t lo[4];
        uint32_t hi[4];
        f16_pairs_of_codes(lo_words[word], lo);
        f16_pairs_of_codes(hi_words[word], hi);
        const uint32_t first[4] = {scaled(lo[0], lo_factor), scaled(hi[0], hi_factor), scaled(lo[1], lo_factor),
                                   scaled(hi[1], hi_factor)};
        const uint32_t second[4] = {scaled(lo[2], lo_factor), scaled(hi[2], hi_factor), scaled(lo[3], lo_factor),
                                    scaled(hi[3], hi_factor)};
        if constexpr (kStaged) {
          // Lane t's word w of a span is staged chunk 16 span + 4 t + w, at staged_chunk() of it: the
          // swap there is lane t's (t & 2). Staged rows are zero to whole spans: no bound needed.
          const uint4 x = staged_row[staged_span + 4 * t + (word ^ (t & 2))];
          mma_f16(acc[0], first, x.x, x.y);
          mma_f16(acc[0], second, x.z, x.w);
        } else {
          const bool valid = k < k_range.end;
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
            if (j >= n_tiles) break;
            float4 x0 = {};
            float4 x1 = {};
            if (valid) {
              x0 = __ldg(reinterpret_cast<const float4*>(x_rows[j] + k + 8 * word));
              x1 = __ldg(reinterpret_cast<const float4*>(x_rows[j] + k + 8 * word + 4));
            }
            mma_f16(acc[j], first, pack_f16(x0.x, x1.x), pack_f16(x0.y, x1.y));
            mma_f16(acc[j], second, pack_f16(x0.z, x1.z), pack_f16(x0.w, x1.w));
          }
        }
      }
    }
    current = next;
  }
  if (!gather_split_sums<kSplit, kWarps>(acc)) return;
  store_streamed_tile<kNTiles, kGateUp>(acc, tile, *p, experts, n_out, col_lo, col_hi, t, ldexpf(1.0f, max_lo - 127),
                                        ldexpf(1.0f, max_hi - 127), out);
}

// Steps of one token split each warp's k in kOneTokenSplit: their four routed experts' tiles leave
// most warp slots empty, and each warp's 23 spans ran one after another (on an H100, a GPT-OSS-20B
// layer's experts took 38.8 us instead of 52.2; at 8 tokens splitting cost 9-35 %).
constexpr int kOneTokenSplit = 4;

template <bool kGateUp>
void launch(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows, float* out,
            cudaStream_t stream) {
  launch_packed_stream<stream_mxfp4_kernel<kGateUp, 1>, stream_mxfp4_kernel<kGateUp, 1, kOneTokenSplit, 2, 6>,
                       kOneTokenSplit, stream_mxfp4_kernel<kGateUp, kTileRows / 8>, kGateUp, kWarps>(
      in, experts, grouping, num_rows, out, stream);
}

// An e2m1 code's value: its bits placed in an f16 (sign to bit 15, exponent and mantissa to bits
// 9-11) hold value * 2^-14.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const auto bits = static_cast<unsigned short>(((code & 7u) << 9) | ((code & 8u) << 12));
  return __half2float(__ushort_as_half(bits)) * 16384.0f;
}

// A thread per MX block: its 16 bytes of codes to 32 bf16 values.
__global__ void dequantize_kernel(const uint4* __restrict__ codes, const uint8_t* __restrict__ scales,
                                  int64_t num_blocks, uint4* __restrict__ out) {
  const int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (b >= num_blocks) return;
  const uint4 block = codes[b];
  const float scale = ldexpf(1.0f, static_cast<int>(scales[b]) - 127);
  const uint32_t words[4] = {block.x, block.y, block.z, block.w};
#pragma unroll
  for (int word = 0; word < 4; ++word) {
    uint32_t packed[4];
#pragma unroll
    for (int pair = 0; pair < 4; ++pair) {
      const uint32_t byte = (words[word] >> (8 * pair)) & 0xFFu;
      packed[pair] = pack_bf16(e2m1_value(byte & 0xFu) * scale, e2m1_value(byte >> 4) * scale);
    }
    out[4 * b + word] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

}  // namespace

void stream_mxfp4_grouped(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                          bool gate_up, float* out, cudaStream_t stream) {
  DI_CHECK(moe_stream_rows_per_tile() == kTileRows, "the grouping's tiles are not the MXFP4 kernel's");
  gate_up ? launch<true>(in, experts, grouping, num_rows, out, stream)
          : launch<false>(in, experts, grouping, num_rows, out, stream);
}

void fill_mxfp4_row_max(uint8_t* scales, int64_t rows, int64_t cols) {
  const int64_t scale_cols = cols / kMxfp4Block;
  uint8_t* row_max = scales + mxfp4_row_max_offset(rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    row_max[r] = scale_cols == 0 ? 0 : *std::max_element(scales + r * scale_cols, scales + (r + 1) * scale_cols);
  }
}

void dequantize_mxfp4_bf16(const void* codes, const uint8_t* scales, int64_t rows, int64_t cols, void* out,
                           cudaStream_t stream) {
  DI_CHECK(cols % kMxfp4Block == 0, "MXFP4 rows are whole blocks of " << kMxfp4Block << ", got " << cols);
  const int64_t num_blocks = rows * (cols / kMxfp4Block);
  if (num_blocks == 0) return;
  constexpr int kThreads = 256;
  dequantize_kernel<<<static_cast<unsigned>((num_blocks + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      static_cast<const uint4*>(codes), scales, num_blocks, static_cast<uint4*>(out));
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::kernels::cuda
