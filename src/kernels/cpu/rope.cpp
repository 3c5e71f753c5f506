// CPU rotary position embedding: cos/sin once per token (float64 libm, as the reference), then
// vectorised rotation of every head; tokens split over threads.
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {
namespace {

constexpr int64_t kParallelMinFloats = 32768;

// Pairs (i, i + half) of each head.
DI_SIMD_CLONES void rotate_half_heads(float* x, int32_t num_heads, int32_t head_dim, int32_t half, const float* cos,
                                      const float* sin) {
  for (int32_t h = 0; h < num_heads; ++h) {
    float* first = x + static_cast<int64_t>(h) * head_dim;
    float* second = first + half;
#pragma omp simd
    for (int32_t i = 0; i < half; ++i) {
      const float x0 = first[i];
      const float x1 = second[i];
      first[i] = x0 * cos[i] - x1 * sin[i];
      second[i] = x1 * cos[i] + x0 * sin[i];
    }
  }
}

// Pairs (2i, 2i + 1) of each head.
DI_SIMD_CLONES void rotate_interleaved_heads(float* x, int32_t num_heads, int32_t head_dim, int32_t half,
                                             const float* cos, const float* sin) {
  for (int32_t h = 0; h < num_heads; ++h) {
    float* head = x + static_cast<int64_t>(h) * head_dim;
#pragma omp simd
    for (int32_t i = 0; i < half; ++i) {
      const float x0 = head[2 * i];
      const float x1 = head[2 * i + 1];
      head[2 * i] = x0 * cos[i] - x1 * sin[i];
      head[2 * i + 1] = x1 * cos[i] + x0 * sin[i];
    }
  }
}

}  // namespace

void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,
          int32_t rotary_dim, const float* inv_freq, float attention_scaling, RopeLayout layout) {
  DI_CHECK(rotary_dim % 2 == 0 && rotary_dim <= head_dim, "rotary_dim " << rotary_dim << ", head_dim " << head_dim);
  const int32_t half = rotary_dim / 2;
  const int64_t token_floats = static_cast<int64_t>(num_heads) * head_dim;
#pragma omp parallel if (num_tokens * token_floats >= kParallelMinFloats)
  {
    std::vector<float> cos(static_cast<size_t>(half));
    std::vector<float> sin(static_cast<size_t>(half));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int32_t i = 0; i < half; ++i) {
        // Same values as the reference: float32 angle, float64 cos/sin rounded once.
        const float angle = static_cast<float>(positions[t]) * inv_freq[i];
        cos[static_cast<size_t>(i)] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_scaling;
        sin[static_cast<size_t>(i)] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_scaling;
      }
      float* token = x + t * token_floats;
      if (layout == RopeLayout::kRotateHalf) {
        rotate_half_heads(token, num_heads, head_dim, half, cos.data(), sin.data());
      } else {
        rotate_interleaved_heads(token, num_heads, head_dim, half, cos.data(), sin.data());
      }
    }
  }
}

}  // namespace deepinfer::kernels::cpu
