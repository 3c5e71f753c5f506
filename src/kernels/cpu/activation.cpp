// CPU element-wise ops: SiLU-gated product and addition, vectorised and split over threads.
#include <algorithm>

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

void add(const float* a, const float* b, int64_t count, float* out) {
  for_each_chunk(count, [&](int64_t begin, int64_t n) { add_span(a + begin, b + begin, n, out + begin); });
}

}  // namespace deepinfer::kernels::cpu
