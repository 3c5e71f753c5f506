// CPU matmul: the hand-written GEMV for decode-sized batches, oneDNN for prefill-sized ones,
// then the bias.
#include <vector>

#include "core/check.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {

// Largest row count that still takes the GEMV. Measured with bench_kernels' rows/ sweep (N = K =
// 4096, cold weights, 2 threads) on Zen 4: the GEMV is memory-bound up to ~4 rows, then FMA-bound
// near the fp32 peak (150-200 GFLOP/s); oneDNN's bf16 GEMM (vdpbf16ps: two products per lane)
// ties it at 16 rows (2.96 vs 2.93 ms) and wins beyond; its f32 GEMM ties at 32 rows and wins
// from 48; F16 weights (no f16 GEMM on this CPU: slab conversion, then f32 GEMM) tie only at 512
// rows (108 vs 106 ms; GEMV 48 vs 92 ms at 256). Ties go to the GEMV: it keeps activations in
// fp32 (oneDNN's bf16 path rounds them) and its rows are independent of the batch (gemv.h).
// Block-quantised weights take the limit of the dtype they would otherwise be dequantised to at load
// (FP8: F32, MXFP4: BF16), so both loadings run the same kernel at every row count.
int64_t gemv_max_rows(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
    case DType::kMxfp4: return 16;
    case DType::kF32:
    case DType::kF8E4M3: return 32;
    default: return 256;
  }
}

bool is_matmul_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF8E4M3 ||
         dtype == DType::kMxfp4;
}

namespace {

void add_bias(const WeightView& bias, int64_t num_rows, int64_t n_out, float* y) {
  DI_CHECK(bias.rows * bias.cols == n_out, "bias has " << bias.rows * bias.cols << " values, expected " << n_out);
  thread_local std::vector<float> bias_f32;
  bias_f32.resize(static_cast<size_t>(n_out));
  convert_row_to_f32(bias.data, bias.dtype, n_out, bias_f32.data());
  const float* b = bias_f32.data();
#pragma omp parallel for schedule(static) if (num_rows * n_out >= 65536)
  for (int64_t m = 0; m < num_rows; ++m) {
    float* row = y + m * n_out;
    for (int64_t n = 0; n < n_out; ++n) row[n] += b[n];
  }
}

}  // namespace

void matmul(const float* x, const WeightView& w, const WeightView& bias, int64_t num_rows, float* y) {
  DI_CHECK(is_matmul_dtype(w.dtype),
           "matmul weights must be F32, BF16, F16, F8_E4M3 or MXFP4, not " << dtype_name(w.dtype));
  if (num_rows <= gemv_max_rows(w.dtype)) {
    gemv(x, w, num_rows, y, best_isa());
  } else {
    onednn_matmul(x, w, num_rows, y);
  }
  if (bias.data != nullptr) add_bias(bias, num_rows, w.rows, y);
}

bool can_matmul_group(const MatmulTarget* targets, int num_targets, int64_t num_rows) {
  if (num_targets < 1 || num_targets > kMaxGroupOutputs) return false;
  for (int i = 0; i < num_targets; ++i) {
    const WeightView& w = targets[i].w;
    if (w.cols != targets[0].w.cols || num_rows > gemv_max_rows(w.dtype)) return false;
    if (!is_matmul_dtype(w.dtype)) return false;
  }
  return true;
}

void matmul_group(const float* x, int64_t num_rows, const MatmulTarget* targets, int num_targets) {
  DI_CHECK(can_matmul_group(targets, num_targets, num_rows), "matmul_group needs GEMV-sized products of one width");
  GemvOutput outputs[kMaxGroupOutputs];
  for (int i = 0; i < num_targets; ++i) outputs[i] = GemvOutput{targets[i].w, targets[i].y};
  gemv_group(x, outputs, num_targets, num_rows, best_isa());
  for (int i = 0; i < num_targets; ++i) {
    if (targets[i].bias.data != nullptr) add_bias(targets[i].bias, num_rows, targets[i].w.rows, targets[i].y);
  }
}

}  // namespace deepinfer::kernels::cpu
