// Decode-shaped matmul (few activation rows, memory-bound): hand-vectorised GEMV kernels.
// Private to the CPU kernels; exposed for the tests and the kernel benchmark.
#pragma once

#include <cstdint>

#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {

// y[m, n] = sum_k x[m, k] * w[n, k] for every m < num_rows, n < w.rows; no bias.
// x: [num_rows, w.cols] f32; w: [N, K] F32/BF16/F16, or F8_E4M3/MXFP4 with block scales (ops.h's
// WeightView), dequantised in registers as each tile streams through; y: [num_rows, N] f32.
// The output rows are handed to the OpenMP threads in chunks, first come first served, and every
// weight byte is read from memory once for all activation rows. Each y[m, n] is one fp32
// reduction whose order depends only on K and the ISA: never on num_rows, the thread count or
// which thread ran it. `isa` must be supported by the CPU.
void gemv(const float* x, const WeightView& w, int64_t num_rows, float* y, Isa isa);

// One product of gemv_group: y [num_rows, w.rows] = x w^T.
struct GemvOutput {
  WeightView w;
  float* y;
};
constexpr int kMaxGroupOutputs = 4;
// FP8 weights' scale blocks are a multiple of this many columns wide (DeepSeek-V3: 128), so the
// dequantising tiles step through whole blocks in the F32 tiles' lane order (gemv_packed.cpp).
constexpr int64_t kFp8BlockColsQuantum = 16;

// gemv for 1 to kMaxGroupOutputs weights of the same width that read the same x (a layer's
// q/k/v or gate/up) in one parallel region; each y bit for bit as gemv alone would give.
void gemv_group(const float* x, const GemvOutput* outputs, int num_outputs, int64_t num_rows, Isa isa);

// The largest num_rows for which kernels::cpu::matmul takes gemv rather than oneDNN (matmul.cpp).
int64_t gemv_max_rows(DType dtype);
// Whether kernels::cpu::matmul takes weights of dtype: F32, BF16, F16, F8_E4M3, MXFP4 (matmul.cpp).
bool is_matmul_dtype(DType dtype);

// One product of matmul_group: y [num_rows, w.rows] = x w^T (+ bias; bias.data may be null).
struct MatmulTarget {
  WeightView w;
  WeightView bias;
  float* y;
};

// Whether matmul_group takes these products: at most kMaxGroupOutputs weights of one width, and
// num_rows within every weight's gemv_max_rows (so kernels::cpu::matmul would take the GEMV too).
bool can_matmul_group(const MatmulTarget* targets, int num_targets, int64_t num_rows);
// The products in one parallel region (gemv_group), then the biases: every y bit for bit as
// kernels::cpu::matmul (and matmul_invariant) gives it alone. Needs can_matmul_group.
void matmul_group(const float* x, int64_t num_rows, const MatmulTarget* targets, int num_targets);

}  // namespace deepinfer::kernels::cpu
