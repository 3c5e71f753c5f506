// RMSNorm, fused residual-add + RMSNorm, LayerNorm (vision towers) and rotary position embedding on
// the GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"

namespace deepinfer::kernels::cuda {
namespace {

// Rows of at least kWideRow columns take blocks of 1024 threads, shorter ones 256: a decode-size
// norm is a single block on the step's critical path, so its latency is a few loads per thread.
constexpr int64_t kWideRow = 2048;
// Each thread keeps its first columns in registers between the two passes.
constexpr int kCachedPerThread = 4;

// One block per row. With a residual, residual += x first and the norm reads the sum. Each thread
// touches the same columns in both passes, so out may alias x. out_half, when set, also gets out
// rounded to half_dtype: the next products' input, so they need no cast kernel.
template <bool kAddResidual, int kThreads>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(float* residual, const float* x, const void* weight,
                                                            DType weight_dtype, float weight_offset, int64_t dim,
                                                            float eps, float* out, void* out_half, DType half_dtype) {
  // Dependent launch: the products after a norm may launch now and stream their weights while it
  // runs; x and residual are read only once the kernel before is done. The norm's own weights are
  // the model's, never a kernel's output: their loads (misses, after the GEMVs' streams) go first.
  allow_next_grid();
  float scale[kCachedPerThread];
#pragma unroll
  for (int i = 0; i < kCachedPerThread; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * kThreads;
    scale[i] = c < dim ? load_as_f32(weight, weight_dtype, c) + weight_offset : 0.0f;
  }
  wait_for_previous_grid();
  const int64_t base = blockIdx.x * dim;
  const auto load = [&](int64_t c) {
    float value = x[base + c];
    if constexpr (kAddResidual) {
      value += residual[base + c];
      residual[base + c] = value;
    }
    return value;
  };
  float cached[kCachedPerThread];
  float sum_squares = 0.0f;
#pragma unroll
  for (int i = 0; i < kCachedPerThread; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * kThreads;
    cached[i] = c < dim ? load(c) : 0.0f;
    sum_squares += cached[i] * cached[i];
  }
  for (int64_t c = threadIdx.x + int64_t{kCachedPerThread} * kThreads; c < dim; c += kThreads) {
    const float value = load(c);
    sum_squares += value * value;
  }
  const float total = block_sum<kThreads>(sum_squares);
  const float inv_rms = rsqrtf(total / static_cast<float>(dim) + eps);
  const auto store = [&](int64_t c, float value, float weight_scale) {
    const float normed = value * inv_rms * weight_scale;
    out[base + c] = normed;
    if (out_half != nullptr) {
      if (half_dtype == DType::kBF16) {
        static_cast<__nv_bfloat16*>(out_half)[base + c] = __float2bfloat16_rn(normed);
      } else {
        static_cast<__half*>(out_half)[base + c] = __float2half_rn(normed);
      }
    }
  };
#pragma unroll
  for (int i = 0; i < kCachedPerThread; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * kThreads;
    if (c < dim) store(c, cached[i], scale[i]);
  }
  const float* src = kAddResidual ? residual : x;
  for (int64_t c = threadIdx.x + int64_t{kCachedPerThread} * kThreads; c < dim; c += kThreads) {
    store(c, src[base + c], load_as_f32(weight, weight_dtype, c) + weight_offset);
  }
}

template <bool kAddResidual>
void launch_norm(float* residual, const float* x, const WeightView& weight, float weight_offset, int64_t num_rows,
                 int64_t dim, float eps, float* out, void* out_half, DType half_dtype, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(num_rows));
  if (dim >= kWideRow) {
    launch_dependent(rms_norm_kernel<kAddResidual, 1024>, grid, dim3(1024), 0, stream, residual, x,
                     weight.data, weight.dtype, weight_offset, dim, eps, out, out_half, half_dtype);
  } else {
    launch_dependent(rms_norm_kernel<kAddResidual, 256>, grid, dim3(256), 0, stream, residual, x,
                     weight.data, weight.dtype, weight_offset, dim, eps, out, out_half, half_dtype);
  }
}

// LayerNorm, one block of 256 threads per row: the mean, then the variance around it, in float32
// (vision towers run it once an image; kernels::ref's float64 is the oracle within tolerance).
__global__ void __launch_bounds__(256)
    layer_norm_kernel(const float* x, const void* weight, const void* bias, DType dtype_w, DType dtype_b, int64_t dim,
                      float eps, float* out) {
  wait_for_previous_grid();
  allow_next_grid();
  const float* row = x + blockIdx.x * dim;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += 256) sum += row[c];
  const float mean = block_sum<256>(sum) / static_cast<float>(dim);
  float squares = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += 256) squares += (row[c] - mean) * (row[c] - mean);
  const float inv_std = rsqrtf(block_sum<256>(squares) / static_cast<float>(dim) + eps);
  for (int64_t c = threadIdx.x; c < dim; c += 256) {
    out[blockIdx.x * dim + c] =
        (row[c] - mean) * inv_std * load_as_f32(weight, dtype_w, c) + load_as_f32(bias, dtype_b, c);
  }
}

// One thread per (token, head, rotary pair), so a decode step's few tokens still spread over many
// threads (a thread per pair walking the heads took 4.4 us for DeepSeek-V2-Lite's 16 query heads
// at batch 1, the heads' loads and stores one after another). cos/sin in float64 rounded once, like
// the reference; each head's thread computes its own, the same bits. A dependent launch.
__global__ void rope_kernel(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads,
                            int32_t head_dim, int32_t half, const float* inv_freq, float attention_scaling,
                            bool interleaved) {
  wait_for_previous_grid();
  allow_next_grid();
  const int64_t count = num_tokens * num_heads * half;
  for (int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; index < count;
       index += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = index / half;  // token * num_heads + head
    const int32_t i = static_cast<int32_t>(index - row * half);
    const float angle = static_cast<float>(positions[row / num_heads]) * inv_freq[i];
    double s_wide = 0.0;
    double c_wide = 0.0;
    sincos(static_cast<double>(angle), &s_wide, &c_wide);
    const float c = static_cast<float>(c_wide) * attention_scaling;
    const float s = static_cast<float>(s_wide) * attention_scaling;
    float* head = x + row * head_dim;
    const int32_t first = interleaved ? 2 * i : i;
    const int32_t second = interleaved ? 2 * i + 1 : i + half;
    const float x0 = head[first];
    const float x1 = head[second];
    head[first] = x0 * c - x1 * s;
    head[second] = x1 * c + x0 * s;
  }
}

}  // namespace

void rms_norm(const float* x, const WeightView& weight, float weight_offset, int64_t num_rows, int64_t dim, float eps,
              float* out, cudaStream_t stream, void* out_half, DType half_dtype) {
  if (num_rows == 0) return;
  launch_norm<false>(nullptr, x, weight, weight_offset, num_rows, dim, eps, out, out_half, half_dtype, stream);
}

void add_rms_norm(float* residual, const float* x, const WeightView& weight, float weight_offset, int64_t num_rows,
                  int64_t dim, float eps, float* out, cudaStream_t stream, void* out_half, DType half_dtype) {
  if (num_rows == 0) return;
  launch_norm<true>(residual, x, weight, weight_offset, num_rows, dim, eps, out, out_half, half_dtype, stream);
}

void layer_norm(const float* x, const WeightView& weight, const WeightView& bias, int64_t num_rows, int64_t dim,
                float eps, float* out, cudaStream_t stream) {
  DI_CHECK(weight.rows * weight.cols == dim && bias.rows * bias.cols == dim,
           "layer norm weight and bias have " << weight.rows * weight.cols << " and " << bias.rows * bias.cols
                                              << " values, dim " << dim);
  if (num_rows == 0) return;
  launch_dependent(layer_norm_kernel, dim3(static_cast<unsigned>(num_rows)), dim3(256), 0, stream, x, weight.data,
                   bias.data, weight.dtype, bias.dtype, dim, eps, out);
}

void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,
          int32_t rotary_dim, const float* inv_freq, float attention_scaling, RopeLayout layout, cudaStream_t stream) {
  const int32_t half = rotary_dim / 2;
  const int64_t count = num_tokens * num_heads * half;
  if (count == 0) return;
  constexpr int kThreads = 128;
  launch_dependent(rope_kernel, dim3(grid_for(count, kThreads)), dim3(kThreads), 0, stream, x, positions, num_tokens,
                   num_heads, head_dim, half, inv_freq, attention_scaling, layout == RopeLayout::kInterleaved);
  DI_CUDA_CHECK_LAUNCH("rope_kernel");
}

}  // namespace deepinfer::kernels::cuda
