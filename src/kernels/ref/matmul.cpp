// Reference matmul y = x @ w^T (+ bias) for F32/BF16/F16 weights and block-quantised FP8/MXFP4 ones
// (dequantised row by row), float64 accumulation.
#include <vector>

#include "core/check.h"
#include "kernels/ops.h"
#include "kernels/ref/dequantize.h"

namespace deepinfer::kernels::ref {

void matmul(const float* x, const WeightView& w, const WeightView& bias, int64_t num_rows, float* y) {
  const int64_t n_out = w.rows;
  const int64_t k_in = w.cols;
  DI_CHECK(bias.data == nullptr || bias.rows * bias.cols == n_out,
           "bias has " << bias.rows * bias.cols << " values, expected " << n_out);
  std::vector<float> bias_f32(static_cast<size_t>(n_out), 0.0f);
  if (bias.data != nullptr) convert_to_f32(bias.data, bias.dtype, bias_f32.size(), bias_f32.data());
  std::vector<float> w_row(static_cast<size_t>(k_in));
  for (int64_t n = 0; n < n_out; ++n) {
    dequantize_weight_row(w, n, w_row.data());
    for (int64_t m = 0; m < num_rows; ++m) {
      double sum = 0.0;
      for (int64_t k = 0; k < k_in; ++k) sum += static_cast<double>(x[m * k_in + k]) * w_row[static_cast<size_t>(k)];
      y[m * n_out + n] = static_cast<float>(sum + bias_f32[static_cast<size_t>(n)]);
    }
  }
}

}  // namespace deepinfer::kernels::ref
