// Vector-ISA plumbing for the CPU kernels: which ISA this machine runs, the attributes that
// compile one function for it (the build itself stays baseline x86-64), the vectorised element
// conversions, and an exp that compilers vectorise. Private to src/kernels/cpu.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstdint>

#include "core/dtype.h"

// GCC 12 reports the _mm*_undefined_* values inside its own intrinsics (masked loads,
// reductions) as uninitialised (GCC bug 105593, fixed in 12.3), so both uninitialised-value
// warnings are off in the files that include this header.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// AVX-512 as on Zen 4 / Sapphire Rapids (F, BW, VL, DQ) plus FMA and F16C.
#define DI_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,bmi2")))
// Haswell-class AVX2 with FMA and F16C.
#define DI_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi2")))
// Portable loops compiled three times (x86-64-v4, -v3, baseline) and picked at load time by ifunc.
// The clone is a whole function: keep OpenMP regions outside it (outlined bodies are not cloned).
#define DI_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

namespace deepinfer::kernels::cpu {

enum class Isa { kPortable, kAvx2, kAvx512 };

// The widest ISA the CPU supports among those we have kernels for; detected once, thread-safe.
Isa best_isa();
const char* isa_name(Isa isa);

// dst[i] = src[i] as float32 for F32/BF16/F16 src; exact (every bf16/f16 value is an f32 value).
void convert_row_to_f32(const void* src, DType dtype, int64_t count, float* dst);

// dst[i] = src[i] rounded to bfloat16, nearest-even, NaN kept (same bits as core's f32_to_bf16).
void round_row_to_bf16(const float* src, int64_t count, uint16_t* dst);

// exp(x) for float32 in plain arithmetic that compilers vectorise (no libm call in the loop);
// relative error about 2 ulp over the clamped range. Used by SiLU and the attention softmax.
inline float fast_exp(float x) {
  // Clamped so 2^n stays a normal float: below -87.3 the result is ~1e-38 instead of smaller.
  x = std::min(std::max(x, -87.3f), 88.3f);
  // n = round(x / ln 2) with the 1.5 * 2^23 trick (exact for |x / ln 2| < 2^22), then
  // r = x - n ln 2 in two steps (Cody-Waite) so r keeps full precision.
  constexpr float kRoundMagic = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRoundMagic) - kRoundMagic;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  // exp(r) on |r| <= ln(2)/2 by a degree-6 minimax polynomial (Cephes expf coefficients).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t biased_exponent = static_cast<int32_t>(n) + 127;
  return p * std::bit_cast<float>(biased_exponent << 23);
}

}  // namespace deepinfer::kernels::cpu
