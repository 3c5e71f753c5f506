// Reference element-wise ops: SiLU-gated product and addition, evaluated in float64.
#include <cmath>

#include "kernels/ops.h"

namespace deepinfer::kernels::ref {

void silu_mul(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * static_cast<double>(up[i]));
  }
}

void add(const float* a, const float* b, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

}  // namespace deepinfer::kernels::ref
