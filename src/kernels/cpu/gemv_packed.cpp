// GEMV tiles for block-quantised weights: FP8 e4m3 with block scales (DeepSeek-V3's 128 x 128)
// and MXFP4 (e2m1 codes two to a byte, an e8m0 scale per kMxfp4Block values; GPT-OSS's experts),
// dequantised in registers as each tile streams through, so only the packed bytes cross the memory
// bus. Every weight becomes the float32 value ref::dequantize_weight_row gives and is used in the
// lane and reduction order of the F32 tiles (gemv.cpp): y's bits are those of gemv over the weight
// dequantised to float32 (the NaN codes aside, which no checkpoint's weights hold).
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/gemv_tile.h"

namespace deepinfer::kernels::cpu {
namespace {

// ---------------------------------------------------------------- decoding
// MXFP4 codes decode to twice their e2m1 value (integers, one byte shuffle), so the scale is halved:
// 2^(scale - 128), NaN for the e8m0 NaN code 255. Both factors are exact, and so is their product.
const float* half_e8m0_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int bits = 0; bits < 256; ++bits) {
      t[static_cast<size_t>(bits)] =
          bits == 255 ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, bits - 128);
    }
    return t;
  }();
  return table.data();
}

// One MXFP4 block's 16 bytes (value 2j the low nibble of byte j, 2j + 1 the high one) as twice the
// values, int8 in value order: values 0-15 in `first`, 16-31 in `second`.
DI_TARGET_AVX2 inline void e2m1_block_doubled(const char* bytes, __m128i& first, __m128i& second) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes));
  const __m128i nibble = _mm_set1_epi8(0x0f);
  const __m128i low = _mm_and_si128(packed, nibble);
  const __m128i high = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);
  const __m128i doubled = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  first = _mm_shuffle_epi8(doubled, _mm_unpacklo_epi8(low, high));
  second = _mm_shuffle_epi8(doubled, _mm_unpackhi_epi8(low, high));
}

// e4m3 codes (zero-extended to 16 bits) as f16 bits of their value / 2^8: the sign to bit 15, the
// exponent and mantissa shifted into f16's fields (f16's bias 15 against e4m3's 7 is the 2^8, and
// e4m3 subnormals land on f16 subnormals). The NaN code reads as 480.
DI_TARGET_AVX512 inline __m256i e4m3_as_f16_over_256(__m256i codes) {
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(codes, _mm256_set1_epi16(0x80)), 8);
  const __m256i magnitude = _mm256_slli_epi16(_mm256_and_si256(codes, _mm256_set1_epi16(0x7f)), 7);
  return _mm256_or_si256(sign, magnitude);
}

DI_TARGET_AVX2 inline __m128i e4m3_as_f16_over_256(__m128i codes) {
  const __m128i sign = _mm_slli_epi16(_mm_and_si128(codes, _mm_set1_epi16(0x80)), 8);
  const __m128i magnitude = _mm_slli_epi16(_mm_and_si128(codes, _mm_set1_epi16(0x7f)), 7);
  return _mm_or_si128(sign, magnitude);
}

// Weight row c's row of FP8 scales: one float per block_cols columns.
inline const float* fp8_scale_row(const TileArgs& a, int c) {
  return static_cast<const float*>(a.scales) + (a.first_row + c) / a.block_rows * a.scale_cols;
}

// ---------------------------------------------------------------- FP8, AVX-512: 16 lanes
// 16 weights times scale_x256 (the block's scale times 2^8, exact): e4m3 * scale in one rounding.
DI_TARGET_AVX512 inline __m512 fp8_w16(__m128i codes, __m512 scale_x256) {
  return _mm512_mul_ps(_mm512_cvtph_ps(e4m3_as_f16_over_256(_mm256_cvtepu8_epi16(codes))), scale_x256);
}

template <int kRows, int kCols>
DI_TARGET_AVX512 void fp8_tile_avx512(const TileArgs& a) {
  __m512 acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) acc[r][c] = _mm512_setzero_ps();
  const float* scale_rows[kCols];
  for (int c = 0; c < kCols; ++c) scale_rows[c] = fp8_scale_row(a, c);
  // Blocks start at multiples of 16 (kFp8BlockColsQuantum), so the 16-lane steps fall where the F32
  // tile's do.
  for (int64_t k0 = 0, block = 0; k0 < a.k_in; k0 += a.block_cols, ++block) {
    const int64_t k_end = std::min(a.k_in, k0 + a.block_cols);
    __m512 scale[kCols];
    for (int c = 0; c < kCols; ++c) scale[c] = _mm512_set1_ps(scale_rows[c][block] * 256.0f);
    int64_t k = k0;
    for (; k + 16 <= k_end; k += 16) {
      if (k % 64 == 0) prefetch_next_tile<kCols>(a, k);
      __m512 wv[kCols];
      for (int c = 0; c < kCols; ++c) {
        wv[c] = fp8_w16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.w + c * a.row_bytes + k)), scale[c]);
      }
      for (int r = 0; r < kRows; ++r) {
        const __m512 xv = _mm512_loadu_ps(a.x + r * a.k_in + k);
        for (int c = 0; c < kCols; ++c) acc[r][c] = _mm512_fmadd_ps(wv[c], xv, acc[r][c]);
      }
    }
    if (k < k_end) {
      const __mmask16 mask = static_cast<__mmask16>((1u << (k_end - k)) - 1);
      __m512 wv[kCols];
      for (int c = 0; c < kCols; ++c) wv[c] = fp8_w16(_mm_maskz_loadu_epi8(mask, a.w + c * a.row_bytes + k), scale[c]);
      for (int r = 0; r < kRows; ++r) {
        const __m512 xv = _mm512_maskz_loadu_ps(mask, a.x + r * a.k_in + k);
        for (int c = 0; c < kCols; ++c) acc[r][c] = _mm512_fmadd_ps(wv[c], xv, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) a.y[r * a.n_out + c] = _mm512_reduce_add_ps(acc[r][c]);
}

// ---------------------------------------------------------------- FP8, AVX2: 8 lanes
DI_TARGET_AVX2 inline __m256 fp8_w8(__m128i codes, __m256 scale_x256) {
  return _mm256_mul_ps(_mm256_cvtph_ps(e4m3_as_f16_over_256(_mm_cvtepu8_epi16(codes))), scale_x256);
}

template <int kRows, int kCols>
DI_TARGET_AVX2 void fp8_tile_avx2(const TileArgs& a) {
  __m256 acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) acc[r][c] = _mm256_setzero_ps();
  const float* scale_rows[kCols];
  for (int c = 0; c < kCols; ++c) scale_rows[c] = fp8_scale_row(a, c);
  for (int64_t k0 = 0, block = 0; k0 < a.k_in; k0 += a.block_cols, ++block) {
    const int64_t k_end = std::min(a.k_in, k0 + a.block_cols);
    __m256 scale[kCols];
    for (int c = 0; c < kCols; ++c) scale[c] = _mm256_set1_ps(scale_rows[c][block] * 256.0f);
    int64_t k = k0;
    for (; k + 8 <= k_end; k += 8) {
      if (k % 64 == 0) prefetch_next_tile<kCols>(a, k);
      __m256 wv[kCols];
      for (int c = 0; c < kCols; ++c) {
        wv[c] = fp8_w8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a.w + c * a.row_bytes + k)), scale[c]);
      }
      for (int r = 0; r < kRows; ++r) {
        const __m256 xv = _mm256_loadu_ps(a.x + r * a.k_in + k);
        for (int c = 0; c < kCols; ++c) acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
      }
    }
    if (k < k_end) {  // the last k_in % 8 columns, zero-padded to 8 lanes
      const auto count = static_cast<size_t>(k_end - k);
      __m256 wv[kCols];
      for (int c = 0; c < kCols; ++c) {
        alignas(16) char padded[16] = {};
        std::memcpy(padded, a.w + c * a.row_bytes + k, count);
        wv[c] = fp8_w8(_mm_load_si128(reinterpret_cast<const __m128i*>(padded)), scale[c]);
      }
      for (int r = 0; r < kRows; ++r) {
        alignas(32) float padded[8] = {};
        std::memcpy(padded, a.x + r * a.k_in + k, count * sizeof(float));
        const __m256 xv = _mm256_load_ps(padded);
        for (int c = 0; c < kCols; ++c) acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) a.y[r * a.n_out + c] = reduce_add_avx2(acc[r][c]);
}

// ---------------------------------------------------------------- MXFP4, AVX-512: 16 lanes
// A block's 16 codes in value order (code l in lane l) as 32-bit lanes whose low 4 bits are the
// code: the bytes and the bytes shifted right by 4, interleaved and widened. vpermps reads only
// those 4 bits, so neither nibble needs masking.
DI_TARGET_AVX512 inline void e2m1_block_indices(const char* bytes, __m512i& first, __m512i& second) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes));
  const __m128i high = _mm_srli_epi16(packed, 4);
  first = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(packed, high));
  second = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(packed, high));
}

template <int kRows, int kCols>
DI_TARGET_AVX512 void mxfp4_tile_avx512(const TileArgs& a) {
  __m512 acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) acc[r][c] = _mm512_setzero_ps();
  const float* half_scale = half_e8m0_table();
  const auto* scales = static_cast<const uint8_t*>(a.scales) + a.first_row * a.scale_cols;
  // Twice each code's value, as e2m1_block_doubled's table (code 8, -0, reads +0).
  const __m512 doubled = _mm512_setr_ps(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  for (int64_t block = 0; block < a.scale_cols; ++block) {
    const int64_t k = block * kMxfp4Block;
    if (block % 4 == 0) prefetch_next_tile<kCols>(a, k / 2);
    __m512 w_first[kCols], w_second[kCols];
    for (int c = 0; c < kCols; ++c) {
      // The block's 16 scaled values, then one permute per 16 weights: the same exact products as
      // the AVX2 tile's widen, convert and multiply.
      const __m512 scaled = _mm512_mul_ps(doubled, _mm512_set1_ps(half_scale[scales[c * a.scale_cols + block]]));
      __m512i first, second;
      e2m1_block_indices(a.w + c * a.row_bytes + k / 2, first, second);
      w_first[c] = _mm512_permutexvar_ps(first, scaled);
      w_second[c] = _mm512_permutexvar_ps(second, scaled);
    }
    for (int r = 0; r < kRows; ++r) {
      const __m512 x_first = _mm512_loadu_ps(a.x + r * a.k_in + k);
      const __m512 x_second = _mm512_loadu_ps(a.x + r * a.k_in + k + 16);
      for (int c = 0; c < kCols; ++c) {
        acc[r][c] = _mm512_fmadd_ps(w_first[c], x_first, acc[r][c]);
        acc[r][c] = _mm512_fmadd_ps(w_second[c], x_second, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) a.y[r * a.n_out + c] = _mm512_reduce_add_ps(acc[r][c]);
}

// ---------------------------------------------------------------- MXFP4, AVX2: 8 lanes
template <int kRows, int kCols>
DI_TARGET_AVX2 void mxfp4_tile_avx2(const TileArgs& a) {
  __m256 acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) acc[r][c] = _mm256_setzero_ps();
  const float* half_scale = half_e8m0_table();
  const auto* scales = static_cast<const uint8_t*>(a.scales) + a.first_row * a.scale_cols;
  constexpr int kSteps = kMxfp4Block / 8;
  for (int64_t block = 0; block < a.scale_cols; ++block) {
    const int64_t k = block * kMxfp4Block;
    if (block % 4 == 0) prefetch_next_tile<kCols>(a, k / 2);
    __m256 wv[kCols][kSteps];
    for (int c = 0; c < kCols; ++c) {
      __m128i first, second;
      e2m1_block_doubled(a.w + c * a.row_bytes + k / 2, first, second);
      const __m256 scale = _mm256_set1_ps(half_scale[scales[c * a.scale_cols + block]]);
      const __m128i codes[kSteps] = {first, _mm_srli_si128(first, 8), second, _mm_srli_si128(second, 8)};
      for (int s = 0; s < kSteps; ++s)
        wv[c][s] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes[s])), scale);
    }
    for (int r = 0; r < kRows; ++r) {
      for (int s = 0; s < kSteps; ++s) {
        const __m256 xv = _mm256_loadu_ps(a.x + r * a.k_in + k + 8 * s);
        for (int c = 0; c < kCols; ++c) acc[r][c] = _mm256_fmadd_ps(wv[c][s], xv, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) a.y[r * a.n_out + c] = reduce_add_avx2(acc[r][c]);
}

// ---------------------------------------------------------------- portable
template <DType kDType, int kRows, int kCols>
void packed_tile_portable(const TileArgs& a) {
  if constexpr (kDType == DType::kF8E4M3) {
    tile_portable_with<kRows, kCols>(a, [&a](int c, int64_t k) {
      const auto code = static_cast<uint8_t>(a.w[c * a.row_bytes + k]);
      return f8e4m3_to_f32(code) * fp8_scale_row(a, c)[k / a.block_cols];
    });
  } else {
    const auto* scales = static_cast<const uint8_t*>(a.scales) + a.first_row * a.scale_cols;
    tile_portable_with<kRows, kCols>(a, [&a, scales](int c, int64_t k) {
      const auto byte = static_cast<uint8_t>(a.w[c * a.row_bytes + k / 2]);
      const uint8_t code = k % 2 == 0 ? byte & 0xfu : byte >> 4;
      return e2m1_to_f32(code) * e8m0_to_f32(scales[c * a.scale_cols + k / kMxfp4Block]);
    });
  }
}

// ---------------------------------------------------------------- dispatch
template <DType kDType, int kRows, int kCols>
struct Avx512PackedTile {
  static void run(const TileArgs& a) {
    if constexpr (kDType == DType::kF8E4M3) {
      fp8_tile_avx512<kRows, kCols>(a);
    } else {
      mxfp4_tile_avx512<kRows, kCols>(a);
    }
  }
};
template <DType kDType, int kRows, int kCols>
struct Avx2PackedTile {
  static void run(const TileArgs& a) {
    if constexpr (kDType == DType::kF8E4M3) {
      fp8_tile_avx2<kRows, kCols>(a);
    } else {
      mxfp4_tile_avx2<kRows, kCols>(a);
    }
  }
};
template <DType kDType, int kRows, int kCols>
struct PortablePackedTile {
  static void run(const TileArgs& a) { packed_tile_portable<kDType, kRows, kCols>(a); }
};

template <template <DType, int, int> class Kernel>
TileSet packed_tiles_for(DType dtype) {
  if (dtype == DType::kF8E4M3) return TileTable<DType::kF8E4M3, Kernel>::kTiles;
  DI_CHECK(dtype == DType::kMxfp4, "packed GEMV tiles take F8_E4M3 or MXFP4, not " << dtype_name(dtype));
  return TileTable<DType::kMxfp4, Kernel>::kTiles;
}

}  // namespace

TileSet packed_tiles(Isa isa, DType dtype) {
  switch (isa) {
    case Isa::kAvx512:
      return packed_tiles_for<Avx512PackedTile>(dtype);
    case Isa::kAvx2:
      return packed_tiles_for<Avx2PackedTile>(dtype);
    case Isa::kPortable:
      return packed_tiles_for<PortablePackedTile>(dtype);
  }
  DI_CHECK(false, "unknown ISA");
}

}  // namespace deepinfer::kernels::cpu
