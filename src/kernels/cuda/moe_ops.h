// CUDA pieces of the mixture-of-experts layer and strided row copies (the backend composes them
// with cuBLASLt products). Device pointers; enqueued on stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

// out[i, :] = x[rows[i], :]. rows: [num_rows] device; out: [num_rows, width].
void gather_rows(const float* x, const int32_t* rows, int64_t num_rows, int64_t width, float* out,
                 cudaStream_t stream);
// gate[i] = act(gate[i], up[i]) as ref::moe_experts defines it.
void expert_activation(float* gate, const float* up, int64_t count, ExpertActivation activation, float alpha,
                       float limit, cudaStream_t stream);
// out[rows[i], :] += expert_weights[rows[i], slot] * y[i, :]. rows must be distinct.
void scatter_add_weighted(const float* y, const int32_t* rows, int64_t num_rows, const float* expert_weights,
                          int32_t top_k, int32_t slot, int64_t width, float* out, cudaStream_t stream);
// counts[i] += delta[i] for i < num.
void add_counts(int64_t* counts, const int64_t* delta, int32_t num, cudaStream_t stream);
// dst[r * dst_stride + i] = src[r * src_stride + i] for r < num_rows, i < width.
void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst, int64_t dst_stride,
               cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
