// Reference element-wise ops: SiLU- and GeLU-gated products, addition, scaling and soft-capping,
// evaluated in float64.
#include <cmath>
#include <numbers>

#include "kernels/ops.h"

namespace deepinfer::kernels::ref {

void silu_mul(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * static_cast<double>(up[i]));
  }
}

void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* out) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t i = 0; i < count; ++i) {
    const double g = gate[i];
    // g (1 + tanh(y)) / 2 written as g / (1 + exp(-2y)): the same function, without the
    // cancellation of 1 + tanh(y) for negative g.
    const double gelu = g / (1.0 + std::exp(-2.0 * k * (g + 0.044715 * g * g * g)));
    out[i] = static_cast<float>(gelu * static_cast<double>(up[i]));
  }
}

void gelu_mul(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(0.5 * g * std::erfc(-g / std::numbers::sqrt2) * static_cast<double>(up[i]));
  }
}

void add(const float* a, const float* b, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

void scale(const float* x, int64_t count, float factor, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = x[i] * factor;
}

void softcap(const float* x, int64_t count, float cap, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    out[i] = static_cast<float>(std::tanh(static_cast<double>(x[i]) / cap) * cap);
  }
}

}  // namespace deepinfer::kernels::ref
