// Batch-invariant matmul: the GEMV kernel over cache-sized blocks of rows, then the bias.
#include "kernels/cpu/matmul_invariant.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/simd.h"

namespace deepinfer::kernels::cpu {
namespace {

// Activation bytes per GEMV call: a block of rows stays in L2 while every weight tile streams
// past it once, so the weights are read from memory once per block rather than once per row.
constexpr int64_t kBlockActivationBytes = 256 * 1024;
constexpr int64_t kMaxBlockRows = 64;
// Rows per GEMV register tile (gemv.cpp); blocks are whole tiles.
constexpr int64_t kTileRows = 4;

int64_t block_rows(int64_t k_in) {
  const int64_t fit = kBlockActivationBytes / (k_in * static_cast<int64_t>(sizeof(float)));
  return std::clamp(fit / kTileRows * kTileRows, kTileRows, kMaxBlockRows);
}

}  // namespace

void matmul_invariant(const float* x, const WeightView& w, const WeightView& bias, int64_t num_rows, float* y) {
  DI_CHECK(is_matmul_dtype(w.dtype),
           "matmul weights must be F32, BF16, F16, F8_E4M3 or MXFP4, not " << dtype_name(w.dtype));
  const Isa isa = best_isa();
  const int64_t rows_per_block = block_rows(w.cols);
  // gemv computes each y[m, n] as one reduction over K whatever the block's size or where the
  // row sits in it (gemv.h), so cutting the rows into blocks cannot change a bit.
  for (int64_t m = 0; m < num_rows; m += rows_per_block) {
    gemv(x + m * w.cols, w, std::min(rows_per_block, num_rows - m), y + m * w.rows, isa);
  }
  if (bias.data == nullptr) return;
  DI_CHECK(bias.rows * bias.cols == w.rows, "bias has " << bias.rows * bias.cols << " values, expected " << w.rows);
  thread_local std::vector<float> bias_f32;
  bias_f32.resize(static_cast<size_t>(w.rows));
  convert_row_to_f32(bias.data, bias.dtype, w.rows, bias_f32.data());
  const float* b = bias_f32.data();
  const int64_t n_out = w.rows;
#pragma omp parallel for schedule(static) if (num_rows * n_out >= 65536)
  for (int64_t m = 0; m < num_rows; ++m) {
    float* row = y + m * n_out;
    for (int64_t n = 0; n < n_out; ++n) row[n] += b[n];
  }
}

}  // namespace deepinfer::kernels::cpu
