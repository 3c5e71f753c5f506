// RMSNorm, fused residual-add + RMSNorm, and rotary position embedding on the GPU.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_util.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kNormThreads = 256;

// One block per row. With a residual, residual += x first and the norm reads the sum. Each thread
// touches the same columns in both passes, so out may alias x.
template <bool kAddResidual>
__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(float* residual, const float* x, const void* weight,
                                                                DType weight_dtype, float weight_offset, int64_t dim,
                                                                float eps, float* out) {
  const int64_t base = blockIdx.x * dim;
  float sum_squares = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += kNormThreads) {
    float value = x[base + c];
    if constexpr (kAddResidual) {
      value += residual[base + c];
      residual[base + c] = value;
    }
    sum_squares += value * value;
  }
  const float total = block_sum<kNormThreads>(sum_squares);
  const float inv_rms = rsqrtf(total / static_cast<float>(dim) + eps);
  const float* src = kAddResidual ? residual : x;
  for (int64_t c = threadIdx.x; c < dim; c += kNormThreads) {
    out[base + c] = src[base + c] * inv_rms * (load_as_f32(weight, weight_dtype, c) + weight_offset);
  }
}

// One thread per (token, rotary pair): the angle's cos/sin once, applied to every head. cos/sin in
// float64 rounded once, like the reference.
__global__ void rope_kernel(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads,
                            int32_t head_dim, int32_t half, const float* inv_freq, float attention_scaling,
                            bool interleaved) {
  const int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (index >= num_tokens * half) return;
  const int64_t t = index / half;
  const int32_t i = static_cast<int32_t>(index % half);
  const float angle = static_cast<float>(positions[t]) * inv_freq[i];
  double s_wide = 0.0;
  double c_wide = 0.0;
  sincos(static_cast<double>(angle), &s_wide, &c_wide);
  const float c = static_cast<float>(c_wide) * attention_scaling;
  const float s = static_cast<float>(s_wide) * attention_scaling;
  const int32_t first = interleaved ? 2 * i : i;
  const int32_t second = interleaved ? 2 * i + 1 : i + half;
  for (int32_t h = 0; h < num_heads; ++h) {
    float* head = x + (t * num_heads + h) * head_dim;
    const float x0 = head[first];
    const float x1 = head[second];
    head[first] = x0 * c - x1 * s;
    head[second] = x1 * c + x0 * s;
  }
}

}  // namespace

void rms_norm(const float* x, const WeightView& weight, float weight_offset, int64_t num_rows, int64_t dim, float eps,
              float* out, cudaStream_t stream) {
  if (num_rows == 0) return;
  rms_norm_kernel<false><<<static_cast<unsigned>(num_rows), kNormThreads, 0, stream>>>(
      nullptr, x, weight.data, weight.dtype, weight_offset, dim, eps, out);
  DI_CUDA_CHECK_LAUNCH("rms_norm_kernel");
}

void add_rms_norm(float* residual, const float* x, const WeightView& weight, float weight_offset, int64_t num_rows,
                  int64_t dim, float eps, float* out, cudaStream_t stream) {
  if (num_rows == 0) return;
  rms_norm_kernel<true><<<static_cast<unsigned>(num_rows), kNormThreads, 0, stream>>>(
      residual, x, weight.data, weight.dtype, weight_offset, dim, eps, out);
  DI_CUDA_CHECK_LAUNCH("add_rms_norm_kernel");
}

void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,
          int32_t rotary_dim, const float* inv_freq, float attention_scaling, RopeLayout layout, cudaStream_t stream) {
  const int32_t half = rotary_dim / 2;
  const int64_t count = num_tokens * half;
  if (count == 0) return;
  constexpr int kThreads = 128;
  rope_kernel<<<static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      x, positions, num_tokens, num_heads, head_dim, half, inv_freq, attention_scaling,
      layout == RopeLayout::kInterleaved);
  DI_CUDA_CHECK_LAUNCH("rope_kernel");
}

}  // namespace deepinfer::kernels::cuda
