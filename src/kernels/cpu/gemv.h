// Decode-shaped matmul (few activation rows, memory-bound): hand-vectorised GEMV kernels.
// Private to the CPU kernels; exposed for the tests and the kernel benchmark.
#pragma once

#include <cstdint>

#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {

// y[m, n] = sum_k x[m, k] * w[n, k] for every m < num_rows, n < w.rows; no bias.
// x: [num_rows, w.cols] f32; w: [N, K] F32/BF16/F16; y: [num_rows, N] f32.
// The output rows are split across the OpenMP threads and every weight byte is read from memory
// once for all activation rows. Each y[m, n] is one fp32 reduction whose order depends only on K
// and the ISA: never on num_rows or the thread count. `isa` must be supported by the CPU.
void gemv(const float* x, const WeightView& w, int64_t num_rows, float* y, Isa isa);

// The largest num_rows for which kernels::cpu::matmul takes gemv rather than oneDNN (matmul.cpp).
int64_t gemv_max_rows(DType dtype);

}  // namespace deepinfer::kernels::cpu
