// CPU embedding lookup and RMSNorm (plain and fused with the residual add), parallel over rows.
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {
namespace {

// Below this many floats a call runs on the calling thread alone (fork/join would cost more).
constexpr int64_t kParallelMinFloats = 32768;

// The norm weight (+ offset) as f32: [dim]; per calling thread, so concurrent calls are safe.
const float* norm_scale(const WeightView& weight, float weight_offset, int64_t dim) {
  DI_CHECK(weight.rows * weight.cols == dim, "norm weight has " << weight.rows * weight.cols << " values, dim " << dim);
  thread_local std::vector<float> scale;
  scale.resize(static_cast<size_t>(dim));
  convert_row_to_f32(weight.data, weight.dtype, dim, scale.data());
  if (weight_offset != 0.0f) {
    for (float& s : scale) s += weight_offset;
  }
  return scale.data();
}

DI_SIMD_CLONES float sum_squares(const float* x, int64_t dim) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < dim; ++i) sum += x[i] * x[i];
  return sum;
}

DI_SIMD_CLONES void scale_row(const float* x, const float* scale, float inv_rms, int64_t dim, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < dim; ++i) out[i] = x[i] * inv_rms * scale[i];
}

DI_SIMD_CLONES void add_in_place(float* residual, const float* x, int64_t dim) {
#pragma omp simd
  for (int64_t i = 0; i < dim; ++i) residual[i] += x[i];
}

void norm_row(const float* x, const float* scale, int64_t dim, float eps, float* out) {
  const double mean_square = static_cast<double>(sum_squares(x, dim)) / static_cast<double>(dim);
  const auto inv_rms = static_cast<float>(1.0 / std::sqrt(mean_square + static_cast<double>(eps)));
  scale_row(x, scale, inv_rms, dim, out);
}

}  // namespace

void embedding(const WeightView& table, const int32_t* token_ids, int64_t num_tokens, float* out) {
  const int64_t dim = table.cols;
  const int64_t row_bytes = dim * static_cast<int64_t>(dtype_size_bytes(table.dtype));
  for (int64_t t = 0; t < num_tokens; ++t) {
    DI_CHECK(token_ids[t] >= 0 && token_ids[t] < table.rows,
             "token id " << token_ids[t] << " outside the embedding table of " << table.rows << " rows");
  }
#pragma omp parallel for schedule(static) if (num_tokens * dim >= kParallelMinFloats)
  for (int64_t t = 0; t < num_tokens; ++t) {
    convert_row_to_f32(static_cast<const char*>(table.data) + token_ids[t] * row_bytes, table.dtype, dim,
                       out + t * dim);
  }
}

void rms_norm(const float* x, const WeightView& weight, float weight_offset, int64_t num_rows, int64_t dim, float eps,
              float* out) {
  const float* scale = norm_scale(weight, weight_offset, dim);
#pragma omp parallel for schedule(static) if (num_rows * dim >= kParallelMinFloats)
  for (int64_t r = 0; r < num_rows; ++r) norm_row(x + r * dim, scale, dim, eps, out + r * dim);
}

// LayerNorm runs in vision towers, once per image: the reference's float64 rows, rows in parallel
// (the weights converted and the shapes checked once, outside the parallel loop).
void layer_norm(const float* x, const WeightView& weight, const WeightView& bias, int64_t num_rows, int64_t dim,
                float eps, float* out) {
  DI_CHECK(weight.rows * weight.cols == dim && bias.rows * bias.cols == dim,
           "layer norm weight and bias have " << weight.rows * weight.cols << " and " << bias.rows * bias.cols
                                              << " values, dim " << dim);
  std::vector<float> w(static_cast<size_t>(dim)), b(static_cast<size_t>(dim));
  convert_row_to_f32(weight.data, weight.dtype, dim, w.data());
  convert_row_to_f32(bias.data, bias.dtype, dim, b.data());
  const WeightView w32{w.data(), DType::kF32, 1, dim}, b32{b.data(), DType::kF32, 1, dim};
#pragma omp parallel for schedule(static) if (num_rows * dim >= kParallelMinFloats)
  for (int64_t r = 0; r < num_rows; ++r) ref::layer_norm(x + r * dim, w32, b32, 1, dim, eps, out + r * dim);
}

void add_rms_norm(float* residual, const float* x, const WeightView& weight, float weight_offset, int64_t num_rows,
                  int64_t dim, float eps, float* out) {
  const float* scale = norm_scale(weight, weight_offset, dim);
#pragma omp parallel for schedule(static) if (num_rows * dim >= kParallelMinFloats)
  for (int64_t r = 0; r < num_rows; ++r) {
    add_in_place(residual + r * dim, x + r * dim, dim);
    norm_row(residual + r * dim, scale, dim, eps, out + r * dim);
  }
}

}  // namespace deepinfer::kernels::cpu
