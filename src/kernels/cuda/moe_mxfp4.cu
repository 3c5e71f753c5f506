// MXFP4 experts (GPT-OSS: e2m1 codes two to a byte, an e8m0 scale per 32) read as published: the
// streamed tensor-core tiles of moe_mma_stream.cu for every step short of the grouped GEMMs, and
// the codes dequantised to bf16 for the grouped GEMMs of prompt-sized steps.
//
// Streamed tiles: a warp takes 16 weight rows as the A operand of mma.sync m16n8k16 (f16) and the
// tile's grouped rows, 8 at a time, as n. A lane loads 16 bytes of each of its two rows per
// 128-element k span, k 32t..32t+31 of the span (one MX block, whose scale it loads beside). A
// 32-bit word of 8 codes becomes e4m3 bytes with a shift and a mask or two per 4 codes (the e2m1
// sign, exponent and mantissa bits placed where e4m3 keeps them: the value / 64), the conversion
// instruction turns pairs of those into f16 pairs, and one f16 multiply applies 2^(scale - the
// row's largest scale), a power of two of at most 1, so nothing overflows whatever the scales; the
// row's sums take 64 * 2^(row's largest - 127) at the end. The values are exact down to 2^-17 of
// the row's largest block scale, rounded below (f16 subnormals) and dropped under 2^-24 of it. A
// word's even codes feed one product and its odd codes the next, x packed alike, so each dot
// product keeps its terms. The byte savings are the point (a step reads 0.27x of the bf16 experts'
// bytes), yet on the H100 the kernel still runs slower than bf16's, probably bound
// by its conversions per byte (docs/benchmarks.md, "MXFP4 experts kept packed").
#include <cuda_fp8.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/moe_grouped.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 4;
// The grouping's rows per tile, as the bf16 streamed tiles'.
constexpr int kTileRows = 32;
constexpr int kSpanK = 4 * static_cast<int>(kMxfp4Block);  // four lanes' MX blocks of one row
constexpr int kUnroll = 4;                                 // spans a lane has in flight, twice over
constexpr int kGateUpColumns = kWarps * 8;
constexpr int kDownColumns = kWarps * 16;

// A lane's codes of kUnroll spans: one MX block of each of its two rows per span (zeros past k_in),
// and the blocks' e8m0 scales, span u's in byte u.
struct SpanCodes {
  uint4 lo[kUnroll];
  uint4 hi[kUnroll];
  uint32_t lo_scales;
  uint32_t hi_scales;
};
static_assert(kUnroll <= 4, "a span's scale per byte of one word");

__device__ __forceinline__ void load_spans(const uint8_t* codes_lo, const uint8_t* codes_hi, const uint8_t* scales_lo,
                                           const uint8_t* scales_hi, int64_t k_in, int64_t first_k, SpanCodes& w) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t k = first_k + int64_t{u} * kSpanK;
    const bool valid = k < k_in;
    if (u == 0) w.lo_scales = w.hi_scales = 0;
    w.lo[u] = valid ? __ldcs(reinterpret_cast<const uint4*>(codes_lo + k / 2)) : uint4{};
    w.hi[u] = valid ? __ldcs(reinterpret_cast<const uint4*>(codes_hi + k / 2)) : uint4{};
    w.lo_scales |= (valid ? uint32_t{__ldcs(scales_lo + k / kMxfp4Block)} : 0u) << (8 * u);
    w.hi_scales |= (valid ? uint32_t{__ldcs(scales_hi + k / kMxfp4Block)} : 0u) << (8 * u);
  }
}

// e4m3 bytes (value / 64) of a word's low nibbles (codes 0, 2, 4, 6) and of its high nibbles
// (codes 1, 3, 5, 7): magnitude bits to e4m3's bits 2-4, the sign to bit 7.
__device__ __forceinline__ uint32_t e4m3_of_low_nibbles(uint32_t w) {
  return ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u);
}
__device__ __forceinline__ uint32_t e4m3_of_high_nibbles(uint32_t w) {
  return ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);
}

// The f16 pair of two e4m3 bytes (the low one in the low half) times factor (an f16 pair).
__device__ __forceinline__ uint32_t scaled_f16_pair(uint32_t two_bytes, uint32_t factor) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xFFFFu), __NV_E4M3);
  __half2 pair;
  *reinterpret_cast<__half2_raw*>(&pair) = raw;
  const __half2 product = __hmul2(pair, *reinterpret_cast<const __half2*>(&factor));
  return *reinterpret_cast<const uint32_t*>(&product);
}

// 2^-r as an f16 pair (subnormal from r = 15, zero past 24).
__device__ __forceinline__ uint32_t f16_pair_of_power(int r) {
  const uint32_t bits = r <= 14 ? static_cast<uint32_t>(15 - r) << 10 : r <= 24 ? 1u << (24 - r) : 0u;
  return bits | (bits << 16);
}

// in: x (gate|up: token rows, via the grouping) or h (down: grouped rows); out: h or y. kNTiles:
// the n-tiles of 8 rows a tile may fill (1 for steps of up to 8 tokens, 4 otherwise).
template <bool kGateUp, int kNTiles>
__global__ void __launch_bounds__(kWarps * 32, 4)
    stream_mxfp4_kernel(const float* __restrict__ in, GroupedExperts experts, MoeGrouping grouping, int64_t n_out,
                        int64_t k_in, float* __restrict__ out) {
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4;  // the lane's weight row (and row + 8) and its token in each n-tile
  const int t = lane % 4;  // its MX block of each span and its accumulators' tokens 2t, 2t + 1
  ExpertTile tile;
  if constexpr (kGateUp) wait_for_previous_grid();
  const bool has_tile = find_tile(grouping, experts.num_experts, static_cast<int32_t>(blockIdx.x), kTileRows, tile);
  const int64_t col_lo = kGateUp ? blockIdx.y * int64_t{kGateUpColumns} + warp * 8 + g
                                 : blockIdx.y * int64_t{kDownColumns} + warp * 16 + g;
  const int64_t col_hi = kGateUp ? col_lo : col_lo + 8;
  const int64_t row_lo = min(col_lo, n_out - 1);
  const int64_t row_hi = min(col_hi, n_out - 1);
  const int64_t scale_cols = k_in / kMxfp4Block;
  const uint8_t* codes_lo = nullptr;
  const uint8_t* codes_hi = nullptr;
  const uint8_t* scales_lo = nullptr;
  const uint8_t* scales_hi = nullptr;
  const ExpertPointers* p = nullptr;
  SpanCodes current;
  const int64_t first_k = int64_t{kMxfp4Block} * t;
  if (has_tile) {
    p = &experts.experts[tile.expert];
    codes_lo = static_cast<const uint8_t*>(kGateUp ? p->gate : p->down) + row_lo * (k_in / 2);
    codes_hi = static_cast<const uint8_t*>(kGateUp ? p->up : p->down) + row_hi * (k_in / 2);
    scales_lo = (kGateUp ? p->gate_scales : p->down_scales) + row_lo * scale_cols;
    scales_hi = (kGateUp ? p->up_scales : p->down_scales) + row_hi * scale_cols;
    load_spans(codes_lo, codes_hi, scales_lo, scales_hi, k_in, first_k, current);
  }
  if constexpr (!kGateUp) wait_for_previous_grid();
  allow_next_grid();
  if (!has_tile) return;

  const int64_t row_max_offset = mxfp4_row_max_offset(n_out, k_in);
  const int max_lo = (kGateUp ? p->gate_scales : p->down_scales)[row_max_offset + row_lo];
  const int max_hi = (kGateUp ? p->up_scales : p->down_scales)[row_max_offset + row_hi];
  const float* x_rows[kNTiles];
  streamed_input_rows<kNTiles, kGateUp>(in, experts, grouping, tile, g, k_in, x_rows);
  const int n_tiles = (tile.num_rows + 7) / 8;
  float acc[kNTiles][4] = {};
  constexpr int64_t kGroupK = int64_t{kUnroll} * kSpanK;
  for (int64_t k0 = 0; k0 < k_in; k0 += kGroupK) {
    SpanCodes next{};
    if (k0 + kGroupK < k_in) load_spans(codes_lo, codes_hi, scales_lo, scales_hi, k_in, k0 + kGroupK + first_k, next);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k0 + int64_t{u} * kSpanK + first_k;
      const bool valid = k < k_in;
      const uint32_t lo_factor = f16_pair_of_power(max_lo - static_cast<int>((current.lo_scales >> (8 * u)) & 0xFFu));
      const uint32_t hi_factor = f16_pair_of_power(max_hi - static_cast<int>((current.hi_scales >> (8 * u)) & 0xFFu));
      const uint32_t lo_words[4] = {current.lo[u].x, current.lo[u].y, current.lo[u].z, current.lo[u].w};
      const uint32_t hi_words[4] = {current.hi[u].x, current.hi[u].y, current.hi[u].z, current.hi[u].w};
#pragma unroll
      for (int word = 0; word < 4; ++word) {
        const uint32_t even_lo = e4m3_of_low_nibbles(lo_words[word]);
        const uint32_t even_hi = e4m3_of_low_nibbles(hi_words[word]);
        const uint32_t odd_lo = e4m3_of_high_nibbles(lo_words[word]);
        const uint32_t odd_hi = e4m3_of_high_nibbles(hi_words[word]);
        // Codes 8 word + {0, 2 | 4, 6} of both rows, then 8 word + {1, 3 | 5, 7}.
        const uint32_t even[4] = {scaled_f16_pair(even_lo, lo_factor), scaled_f16_pair(even_hi, hi_factor),
                                  scaled_f16_pair(even_lo >> 16, lo_factor), scaled_f16_pair(even_hi >> 16, hi_factor)};
        const uint32_t odd[4] = {scaled_f16_pair(odd_lo, lo_factor), scaled_f16_pair(odd_hi, hi_factor),
                                 scaled_f16_pair(odd_lo >> 16, lo_factor), scaled_f16_pair(odd_hi >> 16, hi_factor)};
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          if (j >= n_tiles) break;
          float4 x0 = {};
          float4 x1 = {};
          if (valid) {
            x0 = __ldg(reinterpret_cast<const float4*>(x_rows[j] + k + 8 * word));
            x1 = __ldg(reinterpret_cast<const float4*>(x_rows[j] + k + 8 * word + 4));
          }
          mma_f16(acc[j], even, pack_f16(x0.x, x0.z), pack_f16(x1.x, x1.z));
          mma_f16(acc[j], odd, pack_f16(x0.y, x0.w), pack_f16(x1.y, x1.w));
        }
      }
    }
    current = next;
  }
  // The e4m3 bytes held value / 64.
  store_streamed_tile<kNTiles, kGateUp>(acc, tile, *p, experts, n_out, col_lo, col_hi, t, ldexpf(64.0f, max_lo - 127),
                                        ldexpf(64.0f, max_hi - 127), out);
}

template <bool kGateUp>
void launch(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows, float* out,
            cudaStream_t stream) {
  const int64_t n_out = kGateUp ? experts.intermediate : experts.hidden;
  const int64_t k_in = kGateUp ? experts.hidden : experts.intermediate;
  const int64_t columns = kGateUp ? kGateUpColumns : kDownColumns;
  const dim3 grid(static_cast<unsigned>(moe_max_tiles(MoeKernel::kTensorCoreStream, num_rows, experts.num_experts)),
                  static_cast<unsigned>((n_out + columns - 1) / columns));
  // A token routes to distinct experts, so a tile holds at most one row per token.
  const auto kernel =
      num_rows / experts.top_k <= 8 ? stream_mxfp4_kernel<kGateUp, 1> : stream_mxfp4_kernel<kGateUp, kTileRows / 8>;
  launch_dependent(kernel, grid, dim3(kWarps * 32), 0, stream, in, experts, grouping, n_out, k_in, out);
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
