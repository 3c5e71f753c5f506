// Mixture-of-experts helper kernels: gathering a routed batch's rows in expert order, the experts'
// gated activations, the weighted scatter-add of expert outputs, routed-token counts, strided
// row copies.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe_ops.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int64_t width, float* out) {
  const float* src = x + rows[blockIdx.x] * width;
  float* dst = out + blockIdx.x * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}

__global__ void expert_activation_kernel(float* gate, const float* up, int64_t count, ExpertActivation activation,
                                         float alpha, float limit) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    float g = gate[i];
    float u = up[i];
    if (activation == ExpertActivation::kSiluGated) {
      gate[i] = g / (1.0f + expf(-g)) * u;
    } else {
      g = fminf(g, limit);
      u = fminf(fmaxf(u, -limit), limit);
      gate[i] = (u + 1.0f) * g / (1.0f + expf(-alpha * g));
    }
  }
}

// Row i of y belongs to token rows[i]; adds expert_weights[rows[i], slot] * y[i] to it.
__global__ void scatter_add_kernel(const float* y, const int32_t* rows, const float* expert_weights, int32_t top_k,
                                   int32_t slot, int64_t width, float* out) {
  const int64_t token = rows[blockIdx.x];
  const float w = expert_weights[token * top_k + slot];
  const float* src = y + blockIdx.x * width;
  float* dst = out + token * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] += w * src[i];
}

__global__ void add_counts_kernel(int64_t* counts, const int64_t* delta, int32_t num) {
  const int32_t i = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < num) counts[i] += delta[i];
}

}  // namespace

void gather_rows(const float* x, const int32_t* rows, int64_t num_rows, int64_t width, float* out,
                 cudaStream_t stream) {
  if (num_rows == 0) return;
  gather_rows_kernel<<<static_cast<unsigned>(num_rows), kThreads, 0, stream>>>(x, rows, width, out);
  DI_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

void expert_activation(float* gate, const float* up, int64_t count, ExpertActivation activation, float alpha,
                       float limit, cudaStream_t stream) {
  if (count == 0) return;
  expert_activation_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(gate, up, count, activation, alpha,
                                                                                 limit);
  DI_CUDA_CHECK_LAUNCH("expert_activation_kernel");
}

void scatter_add_weighted(const float* y, const int32_t* rows, int64_t num_rows, const float* expert_weights,
                          int32_t top_k, int32_t slot, int64_t width, float* out, cudaStream_t stream) {
  if (num_rows == 0) return;
  scatter_add_kernel<<<static_cast<unsigned>(num_rows), kThreads, 0, stream>>>(y, rows, expert_weights, top_k, slot,
                                                                                width, out);
  DI_CUDA_CHECK_LAUNCH("scatter_add_kernel");
}

void add_counts(int64_t* counts, const int64_t* delta, int32_t num, cudaStream_t stream) {
  if (num == 0) return;
  add_counts_kernel<<<static_cast<unsigned>((num + kThreads - 1) / kThreads), kThreads, 0, stream>>>(counts, delta,
                                                                                                      num);
  DI_CUDA_CHECK_LAUNCH("add_counts_kernel");
}

void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst, int64_t dst_stride,
               cudaStream_t stream) {
  if (num_rows == 0 || width == 0) return;
  DI_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_stride) * sizeof(float), src,
                                  static_cast<size_t>(src_stride) * sizeof(float),
                                  static_cast<size_t>(width) * sizeof(float), static_cast<size_t>(num_rows),
                                  cudaMemcpyDeviceToDevice, stream));
}

}  // namespace deepinfer::kernels::cuda
