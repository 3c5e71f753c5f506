// ISA detection and the vectorised conversions: AVX-512 and AVX2/F16C versions picked at run
// time, scalar otherwise.
#include "kernels/cpu/simd.h"

#include <cstring>

#include "core/check.h"

namespace deepinfer::kernels::cpu {
namespace {

Isa detect_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return Isa::kAvx2;
  }
  return Isa::kPortable;
}

DI_TARGET_AVX512 void bf16_to_f32_avx512(const uint16_t* src, int64_t count, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
  }
  if (i < count) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (count - i)) - 1);
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, src + i));
    _mm512_mask_storeu_ps(dst + i, mask, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
  }
}

DI_TARGET_AVX512 void f16_to_f32_avx512(const uint16_t* src, int64_t count, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  if (i < count) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (count - i)) - 1);
    _mm512_mask_storeu_ps(dst + i, mask, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, src + i)));
  }
}

DI_TARGET_AVX2 void f16_to_f32_f16c(const uint16_t* src, int64_t count, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < count; ++i) dst[i] = f16_to_f32(src[i]);
}

// Round-to-nearest-even by integer arithmetic; vcvtneps2bf16 would flush subnormal inputs to zero.
DI_TARGET_AVX512 void f32_to_bf16_avx512(const float* src, int64_t count, uint16_t* dst) {
  const __m512i rounding_base = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf_bits = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet_bit = _mm512_set1_epi32(0x00400000);
  for (int64_t i = 0; i < count; i += 16) {
    const int64_t n = count - i < 16 ? count - i : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
    const __m512i bits = _mm512_castps_si512(_mm512_maskz_loadu_ps(mask, src + i));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
    __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(rounding_base, lsb));
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, abs_mask), inf_bits);
    rounded = _mm512_mask_mov_epi32(rounded, is_nan, _mm512_or_si512(bits, quiet_bit));
    _mm256_mask_storeu_epi16(dst + i, mask, _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16)));
  }
}

}  // namespace

Isa best_isa() {
  static const Isa isa = detect_isa();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kPortable: return "portable";
  }
  return "unknown";
}

void convert_row_to_f32(const void* src, DType dtype, int64_t count, float* dst) {
  const Isa isa = best_isa();
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float)); return;
    case DType::kBF16:
      if (isa == Isa::kAvx512) return bf16_to_f32_avx512(static_cast<const uint16_t*>(src), count, dst);
      break;
    case DType::kF16:
      if (isa == Isa::kAvx512) return f16_to_f32_avx512(static_cast<const uint16_t*>(src), count, dst);
      if (isa == Isa::kAvx2) return f16_to_f32_f16c(static_cast<const uint16_t*>(src), count, dst);
      break;
    default: DI_CHECK(false, "cannot convert " << dtype_name(dtype) << " to f32");
  }
  // The bf16 shift loop vectorises as it stands; f16 without F16C takes core's scalar path.
  convert_to_f32(src, dtype, static_cast<size_t>(count), dst);
}

void round_row_to_bf16(const float* src, int64_t count, uint16_t* dst) {
  if (best_isa() == Isa::kAvx512) return f32_to_bf16_avx512(src, count, dst);
  for (int64_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(src[i]);
}

}  // namespace deepinfer::kernels::cpu
