// AVX-512 key-block step: the 16 scores of a query head in one vector (16 dot products reduced
// together), one 16-lane exp, and the value accumulation register-tiled over up to 8 query heads
// so each V row loads once.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_block.h"
#include "kernels/cpu/simd.h"

namespace deepinfer::kernels::cpu {
namespace {

constexpr int kMaxHeadTile = 8;

// The range reduction and polynomial of fast_exp (simd.h), with the 2^n step done by scalef.
DI_TARGET_AVX512 inline __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

DI_TARGET_AVX512 inline __mmask16 first_lanes(int32_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1);
}

// Lane b: q . rows[b]. The 16 dot products accumulate side by side, then a 16 x 16 transpose
// folded into additions (46 shuffles and adds) replaces 16 separate horizontal sums.
DI_TARGET_AVX512 inline __m512 block_scores(const float* q, const float* const* rows, int32_t head_dim) {
  __m512 acc[kKeyBlock];
#pragma GCC unroll 16
  for (int b = 0; b < kKeyBlock; ++b) acc[b] = _mm512_setzero_ps();
  int32_t d = 0;
  for (; d + 16 <= head_dim; d += 16) {
    const __m512 qv = _mm512_loadu_ps(q + d);
#pragma GCC unroll 16
    for (int b = 0; b < kKeyBlock; ++b) acc[b] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(rows[b] + d), acc[b]);
  }
  if (d < head_dim) {
    const __mmask16 mask = first_lanes(head_dim - d);
    const __m512 qv = _mm512_maskz_loadu_ps(mask, q + d);
#pragma GCC unroll 16
    for (int b = 0; b < kKeyBlock; ++b) {
      acc[b] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(mask, rows[b] + d), acc[b]);
    }
  }
  __m512 pairs[8];  // 128-bit chunks: (2i, 2i, 2i+1, 2i+1), four partial sums each
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    pairs[i] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], 0xee));
  }
  __m512 quads[4];  // chunk j holds four partial sums of row 4i + j
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    quads[i] = _mm512_add_ps(_mm512_shuffle_f32x4(pairs[2 * i], pairs[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(pairs[2 * i], pairs[2 * i + 1], 0xdd));
  }
  __m512 halves[2];  // chunk j: rows (8i + j, 8i + 4 + j), two partial sums each, interleaved
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    halves[i] = _mm512_add_ps(_mm512_unpacklo_ps(quads[2 * i], quads[2 * i + 1]),
                              _mm512_unpackhi_ps(quads[2 * i], quads[2 * i + 1]));
  }
  // Lane 4j + m now holds row 4m + j; the permutation puts row b in lane b.
  const __m512 sums =
      _mm512_add_ps(_mm512_shuffle_ps(halves[0], halves[1], 0x44), _mm512_shuffle_ps(halves[0], halves[1], 0xee));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, sums);
}

// acc[g, :] = acc[g, :] * rescale[g] + sum_{b=lo..hi} probs[g, b] * v(b) for kHeads query heads.
template <int kHeads>
DI_TARGET_AVX512 void accumulate_values(const KeyBlockStep& step, int32_t g0) {
  const int32_t head_dim = step.head_dim;
  float* acc = step.acc + static_cast<int64_t>(g0) * head_dim;
  const float* probs = step.probs + g0 * kKeyBlock;
  for (int32_t d = 0; d < head_dim; d += 16) {
    const __mmask16 mask = first_lanes(head_dim - d);
    __m512 a[kHeads];
    for (int g = 0; g < kHeads; ++g) {
      a[g] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, acc + g * head_dim + d), _mm512_set1_ps(step.rescale[g0 + g]));
    }
    for (int32_t b = step.lo; b <= step.hi; ++b) {
      const __m512 v = _mm512_maskz_loadu_ps(mask, step.v_rows[b] + d);
      for (int g = 0; g < kHeads; ++g) a[g] = _mm512_fmadd_ps(_mm512_set1_ps(probs[g * kKeyBlock + b]), v, a[g]);
    }
    for (int g = 0; g < kHeads; ++g) _mm512_mask_storeu_ps(acc + g * head_dim + d, mask, a[g]);
  }
}

using AccumulateFn = void (*)(const KeyBlockStep&, int32_t);
constexpr AccumulateFn kAccumulate[kMaxHeadTile] = {
    &accumulate_values<1>, &accumulate_values<2>, &accumulate_values<3>, &accumulate_values<4>,
    &accumulate_values<5>, &accumulate_values<6>, &accumulate_values<7>, &accumulate_values<8>,
};

}  // namespace

DI_TARGET_AVX512 void key_block_step_avx512(const KeyBlockStep& step) {
  const __mmask16 visible = static_cast<__mmask16>(first_lanes(step.hi - step.lo + 1) << step.lo);
  const __m512 scale = _mm512_set1_ps(step.scale);
  for (int32_t g = 0; g < step.group; ++g) {
    const __m512 scores = _mm512_mul_ps(
        block_scores(step.q + static_cast<int64_t>(g) * step.head_dim, step.k_rows, step.head_dim), scale);
    const float new_max = std::max(step.running_max[g], _mm512_mask_reduce_max_ps(visible, scores));
    step.rescale[g] = fast_exp(step.running_max[g] - new_max);  // ~0 on the first step (max -inf)
    const __m512 p = _mm512_maskz_mov_ps(visible, exp512(_mm512_sub_ps(scores, _mm512_set1_ps(new_max))));
    step.running_sum[g] = step.running_sum[g] * step.rescale[g] + _mm512_reduce_add_ps(p);
    step.running_max[g] = new_max;
    _mm512_storeu_ps(step.probs + g * kKeyBlock, p);
  }
  for (int32_t g0 = 0; g0 < step.group; g0 += kMaxHeadTile) {
    kAccumulate[std::min(kMaxHeadTile, step.group - g0) - 1](step, g0);
  }
}

}  // namespace deepinfer::kernels::cpu
