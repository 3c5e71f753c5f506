// Reference dequantisation of a weight row of any WeightView dtype to float32: the values every
// kernel that reads block-quantised weights must reproduce. Plain scalar code (the oracle).
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::ref {

// dst[k] = w[row, k] as float32 for k < w.cols: F32/BF16/F16 exactly; F8_E4M3 the e4m3 value times
// its block's scale and MXFP4 the e2m1 value times 2^(scale - 127), each one float32 product
// (ops.h's WeightView has the layouts). dst: [w.cols].
void dequantize_weight_row(const WeightView& w, int64_t row, float* dst);

}  // namespace deepinfer::kernels::ref
