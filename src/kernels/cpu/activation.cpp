// CPU element-wise ops: SiLU- and GeLU-gated products, addition, scaling and soft-capping,
// vectorised and split over threads.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {
namespace {

// Elements per OpenMP work chunk: large enough to amortise scheduling, small enough to split.
constexpr int64_t kChunk = 16384;

DI_SIMD_CLONES void silu_mul_span(const float* gate, const float* up, int64_t count, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) out[i] = gate[i] / (1.0f + fast_exp(-gate[i])) * up[i];
}

// tanh in plain arithmetic that vectorises: an odd minimax polynomial near 0 (where
// 1 - 2 / (exp(2y) + 1) would cancel), that formula elsewhere (exact at both ends: fast_exp clamps).
inline float fast_tanh(float y) {
  const float z = y * y;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float near_zero = p * z * y + y;
  const float far = 1.0f - 2.0f / (fast_exp(2.0f * y) + 1.0f);
  return std::fabs(y) < 0.625f ? near_zero : far;
}

// gelu_tanh(g) = g (1 + tanh(y)) / 2 = g / (1 + exp(-2y)): no cancellation for negative g.
DI_SIMD_CLONES void gelu_tanh_mul_span(const float* gate, const float* up, int64_t count, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    const float y = kSqrt2OverPi * (g + 0.044715f * g * g * g);
    out[i] = g / (1.0f + fast_exp(-2.0f * y)) * up[i];
  }
}

// erf has no vectorised form here; the merger that runs it is small next to the products around it.
void gelu_mul_span(const float* gate, const float* up, int64_t count, float* out) {
  constexpr float kSqrtHalf = 0.7071067811865476f;
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * std::erfc(-g * kSqrtHalf) * up[i];
  }
}

DI_SIMD_CLONES void scale_span(const float* x, int64_t count, float factor, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) out[i] = x[i] * factor;
}

DI_SIMD_CLONES void softcap_span(const float* x, int64_t count, float cap, float* out) {
  const float inv_cap = 1.0f / cap;
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) out[i] = fast_tanh(x[i] * inv_cap) * cap;
}

DI_SIMD_CLONES void add_span(const float* a, const float* b, int64_t count, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

// Applies span_op to count elements in kChunk pieces, in parallel when there are several.
template <typename SpanOp>
void for_each_chunk(int64_t count, SpanOp&& span_op) {
  const int64_t num_chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (num_chunks > 1)
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t begin = c * kChunk;
    span_op(begin, std::min(kChunk, count - begin));
  }
}

}  // namespace

void silu_mul(const float* gate, const float* up, int64_t count, float* out) {
  for_each_chunk(count, [&](int64_t begin, int64_t n) { silu_mul_span(gate + begin, up + begin, n, out + begin); });
}

void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* out) {
  for_each_chunk(count,
                 [&](int64_t begin, int64_t n) { gelu_tanh_mul_span(gate + begin, up + begin, n, out + begin); });
}

void gelu_mul(const float* gate, const float* up, int64_t count, float* out) {
  for_each_chunk(count, [&](int64_t begin, int64_t n) { gelu_mul_span(gate + begin, up + begin, n, out + begin); });
}

void add(const float* a, const float* b, int64_t count, float* out) {
  for_each_chunk(count, [&](int64_t begin, int64_t n) { add_span(a + begin, b + begin, n, out + begin); });
}

void scale(const float* x, int64_t count, float factor, float* out) {
  for_each_chunk(count, [&](int64_t begin, int64_t n) { scale_span(x + begin, n, factor, out + begin); });
}

void softcap(const float* x, int64_t count, float cap, float* out) {
  for_each_chunk(count, [&](int64_t begin, int64_t n) { softcap_span(x + begin, n, cap, out + begin); });
}

}  // namespace deepinfer::kernels::cpu
