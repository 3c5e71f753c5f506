// Reference embedding lookup and RMSNorm: scalar, float64 sums; the oracle for other backends.
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::ref {
namespace {

std::vector<float> weight_row(const WeightView& w, int64_t row) {
  std::vector<float> values(static_cast<size_t>(w.cols));
  const auto* base = static_cast<const char*>(w.data) + row * w.cols * static_cast<int64_t>(dtype_size_bytes(w.dtype));
  convert_to_f32(base, w.dtype, values.size(), values.data());
  return values;
}

void rms_norm_row(const float* x, const std::vector<float>& weight, float weight_offset, int64_t dim, float eps,
                  float* out) {
  double sum_squares = 0.0;
  for (int64_t i = 0; i < dim; ++i) sum_squares += static_cast<double>(x[i]) * x[i];
  const double inv_rms = 1.0 / std::sqrt(sum_squares / static_cast<double>(dim) + static_cast<double>(eps));
  for (int64_t i = 0; i < dim; ++i) {
    const double scale = static_cast<double>(weight[i]) + static_cast<double>(weight_offset);
    out[i] = static_cast<float>(static_cast<double>(x[i]) * inv_rms * scale);
  }
}

}  // namespace

void embedding(const WeightView& table, const int32_t* token_ids, int64_t num_tokens, float* out) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    DI_CHECK(token_ids[t] >= 0 && token_ids[t] < table.rows,
             "token id " << token_ids[t] << " outside the embedding table of " << table.rows << " rows");
    const std::vector<float> row = weight_row(table, token_ids[t]);
    for (int64_t i = 0; i < table.cols; ++i) out[t * table.cols + i] = row[static_cast<size_t>(i)];
  }
}

void rms_norm(const float* x, const WeightView& weight, float weight_offset, int64_t num_rows, int64_t dim, float eps,
              float* out) {
  DI_CHECK(weight.rows * weight.cols == dim, "norm weight has " << weight.rows * weight.cols << " values, dim " << dim);
  const std::vector<float> w = weight_row(WeightView{weight.data, weight.dtype, 1, dim}, 0);
  for (int64_t r = 0; r < num_rows; ++r) rms_norm_row(x + r * dim, w, weight_offset, dim, eps, out + r * dim);
}

void layer_norm(const float* x, const WeightView& weight, const WeightView& bias, int64_t num_rows, int64_t dim,
                float eps, float* out) {
  DI_CHECK(weight.rows * weight.cols == dim && bias.rows * bias.cols == dim,
           "layer norm weight and bias have " << weight.rows * weight.cols << " and " << bias.rows * bias.cols
                                              << " values, dim " << dim);
  const std::vector<float> w = weight_row(WeightView{weight.data, weight.dtype, 1, dim}, 0);
  const std::vector<float> b = weight_row(WeightView{bias.data, bias.dtype, 1, dim}, 0);
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* row = x + r * dim;
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += row[i];
    const double mean = sum / static_cast<double>(dim);
    double squares = 0.0;
    for (int64_t i = 0; i < dim; ++i) squares += (row[i] - mean) * (row[i] - mean);
    const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(dim) + static_cast<double>(eps));
    for (int64_t i = 0; i < dim; ++i) {
      out[r * dim + i] =
          static_cast<float>((row[i] - mean) * inv_std * w[static_cast<size_t>(i)] + b[static_cast<size_t>(i)]);
    }
  }
}

void add_rms_norm(float* residual, const float* x, const WeightView& weight, float weight_offset, int64_t num_rows,
                  int64_t dim, float eps, float* out) {
  DI_CHECK(weight.rows * weight.cols == dim, "norm weight has " << weight.rows * weight.cols << " values, dim " << dim);
  const std::vector<float> w = weight_row(WeightView{weight.data, weight.dtype, 1, dim}, 0);
  for (int64_t r = 0; r < num_rows; ++r) {
    float* res = residual + r * dim;
    for (int64_t i = 0; i < dim; ++i) res[i] += x[r * dim + i];
    rms_norm_row(res, w, weight_offset, dim, eps, out + r * dim);
  }
}

}  // namespace deepinfer::kernels::ref
