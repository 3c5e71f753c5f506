// Reference rotary position embedding (rotate-half and interleaved layouts, partial rotary).
#include <cmath>

#include "core/check.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::ref {

void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,
          int32_t rotary_dim, const float* inv_freq, float attention_scaling, RopeLayout layout) {
  DI_CHECK(rotary_dim % 2 == 0 && rotary_dim <= head_dim, "rotary_dim " << rotary_dim << ", head_dim " << head_dim);
  const int32_t half = rotary_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int32_t i = 0; i < half; ++i) {
      // transformers computes the angle in float32 and its cos/sin in float32 too; float64 cos/sin
      // rounded once is the correctly rounded value the float32 library call approximates.
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      const float c = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_scaling;
      const float s = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_scaling;
      const int32_t first = layout == RopeLayout::kRotateHalf ? i : 2 * i;
      const int32_t second = layout == RopeLayout::kRotateHalf ? i + half : 2 * i + 1;
      for (int32_t h = 0; h < num_heads; ++h) {
        float* head = x + (t * num_heads + h) * head_dim;
        const float x0 = head[first];
        const float x1 = head[second];
        head[first] = x0 * c - x1 * s;
        head[second] = x1 * c + x0 * s;
      }
    }
  }
}

}  // namespace deepinfer::kernels::ref
