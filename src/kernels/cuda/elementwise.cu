// Element-wise CUDA kernels: activations, add/scale/softcap, embedding gather, KV-cache writes
// (float32, bf16 or fp8 caches), bias add and float32 -> bf16/f16 casts for the matmul inputs; the
// benchmarks' random fill and read-only stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kv_cache.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void gelu_tanh_mul_kernel(const float* gate, const float* up, int64_t count, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
  }
}

__global__ void gelu_mul_kernel(const float* gate, const float* up, int64_t count, float* out) {
  constexpr float kSqrtHalf = 0.7071067811865476f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + erff(g * kSqrtHalf)) * up[i];
  }
}

__global__ void add_kernel(const float* a, const float* b, int64_t count, float* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

__global__ void scale_kernel(const float* x, int64_t count, float factor, float* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = x[i] * factor;
  }
}

__global__ void softcap_kernel(const float* x, int64_t count, float cap, float* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = tanhf(x[i] / cap) * cap;
  }
}

// One block per token.
__global__ void embedding_kernel(const void* table, DType dtype, int64_t cols, const int32_t* token_ids, float* out) {
  wait_for_previous_grid();
  allow_next_grid();
  const int64_t row = token_ids[blockIdx.x];
  float* dst = out + blockIdx.x * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = load_as_f32(table, dtype, row * cols + c);
}

// One block per token; 16-byte reads when kv_dim is a multiple of 4. Each value is stored as the
// cache's element (kv_cache.cuh): rounded to bf16, or an fp8 code of value / its column's scale.
template <typename T>
__global__ void write_kv_kernel(const float* k, const float* v, const int32_t* slot_mapping, int64_t kv_dim,
                                KvScales scales, T* k_cache, T* v_cache) {
  const int64_t slot = slot_mapping[blockIdx.x];
  if (slot < 0) return;
  const int64_t src = blockIdx.x * kv_dim;
  const int64_t dst = slot * kv_dim;
  if (kv_dim % 4 == 0) {
    for (int64_t c = threadIdx.x; c < kv_dim / 4; c += blockDim.x) {
      store_kv4(k_cache, dst + 4 * c, reinterpret_cast<const float4*>(k + src)[c], scales.k, 4 * c);
      store_kv4(v_cache, dst + 4 * c, reinterpret_cast<const float4*>(v + src)[c], scales.v, 4 * c);
    }
  } else {
    for (int64_t c = threadIdx.x; c < kv_dim; c += blockDim.x) {
      store_kv(k_cache, dst + c, k[src + c], scales.k, c);
      store_kv(v_cache, dst + c, v[src + c], scales.v, c);
    }
  }
}

template <typename T>
void launch_write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens, int64_t kv_dim,
                     KvScales scales, void* k_cache, void* v_cache, cudaStream_t stream) {
  write_kv_kernel<T><<<static_cast<unsigned>(num_tokens), 128, 0, stream>>>(
      k, v, slot_mapping, kv_dim, scales, static_cast<T*>(k_cache), static_cast<T*>(v_cache));
}

__global__ void add_bias_kernel(float* y, const void* bias, DType dtype, int64_t cols, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += load_as_f32(bias, dtype, i % cols);
  }
}

// The first 4 * quads values four at a time (16-byte loads, 8-byte stores: one value per thread ran
// at a third of the copy rate), the rest one by one.
__global__ void cast_bf16_kernel(const float* x, int64_t count, int64_t quads, __nv_bfloat16* out) {
  wait_for_previous_grid();
  allow_next_grid();
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = first; i < quads; i += stride) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
    reinterpret_cast<uint2*>(out)[i] =
        make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
  }
  for (int64_t i = 4 * quads + first; i < count; i += stride) out[i] = __float2bfloat16_rn(x[i]);
}

__global__ void cast_f16_kernel(const float* x, int64_t count, __half* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __float2half_rn(x[i]);
  }
}

__global__ void fill_random_kernel(void* out, int64_t count, DType dtype, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float value = static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
    if (dtype == DType::kBF16) {
      static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(value);
    } else if (dtype == DType::kF16) {
      static_cast<__half*>(out)[i] = __float2half_rn(value);
    } else {
      static_cast<float*>(out)[i] = value;
    }
  }
}

constexpr int kReadThreads = 512;
constexpr int kReadUnroll = 4;

__global__ void __launch_bounds__(kReadThreads) read_stream_kernel(const float4* __restrict__ src, int64_t count,
                                                                   float* sums) {
  float acc = 0.0f;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (; i + (kReadUnroll - 1) * stride < count; i += kReadUnroll * stride) {
    float4 v[kReadUnroll];
#pragma unroll
    for (int u = 0; u < kReadUnroll; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kReadUnroll; ++u) acc += (v[u].x + v[u].y) + (v[u].z + v[u].w);
  }
  for (; i < count; i += stride) acc += (src[i].x + src[i].y) + (src[i].z + src[i].w);
  __shared__ float warp_sums[kReadThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kReadThreads / 32; ++w) total += warp_sums[w];
    sums[blockIdx.x] = total;
  }
}

}  // namespace

void read_stream(const void* src, int64_t bytes, float* sums, int num_blocks, cudaStream_t stream) {
  DI_CHECK(bytes % 64 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0, "read_stream: " << bytes << " bytes");
  read_stream_kernel<<<num_blocks, kReadThreads, 0, stream>>>(static_cast<const float4*>(src), bytes / 16, sums);
  DI_CUDA_CHECK_LAUNCH("read_stream_kernel");
}

void fill_random(void* out, int64_t count, DType dtype, uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  fill_random_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(out, count, dtype, seed);
  DI_CUDA_CHECK_LAUNCH("fill_random_kernel");
}

void silu_mul(const float* gate, const float* up, int64_t count, float* out, cudaStream_t stream) {
  if (count == 0) return;
  silu_mul_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(gate, up, count, out);
  DI_CUDA_CHECK_LAUNCH("silu_mul_kernel");
}

void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* out, cudaStream_t stream) {
  if (count == 0) return;
  gelu_tanh_mul_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(gate, up, count, out);
  DI_CUDA_CHECK_LAUNCH("gelu_tanh_mul_kernel");
}

void gelu_mul(const float* gate, const float* up, int64_t count, float* out, cudaStream_t stream) {
  if (count == 0) return;
  gelu_mul_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(gate, up, count, out);
  DI_CUDA_CHECK_LAUNCH("gelu_mul_kernel");
}

void add(const float* a, const float* b, int64_t count, float* out, cudaStream_t stream) {
  if (count == 0) return;
  add_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(a, b, count, out);
  DI_CUDA_CHECK_LAUNCH("add_kernel");
}

void scale(const float* x, int64_t count, float factor, float* out, cudaStream_t stream) {
  if (count == 0) return;
  scale_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(x, count, factor, out);
  DI_CUDA_CHECK_LAUNCH("scale_kernel");
}

void softcap(const float* x, int64_t count, float cap, float* out, cudaStream_t stream) {
  if (count == 0) return;
  softcap_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(x, count, cap, out);
  DI_CUDA_CHECK_LAUNCH("softcap_kernel");
}

void embedding(const WeightView& table, const int32_t* token_ids, int64_t num_tokens, float* out,
               cudaStream_t stream) {
  if (num_tokens == 0) return;
  launch_dependent(embedding_kernel, dim3(static_cast<unsigned>(num_tokens)), dim3(kThreads), 0, stream, table.data,
                   table.dtype, table.cols, token_ids, out);
  DI_CUDA_CHECK_LAUNCH("embedding_kernel");
}

void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens, int64_t kv_dim,
              DType cache_dtype, KvScales scales, void* k_cache, void* v_cache, cudaStream_t stream) {
  if (num_tokens == 0) return;
  switch (cache_dtype) {
    case DType::kBF16:
      launch_write_kv<__nv_bfloat16>(k, v, slot_mapping, num_tokens, kv_dim, scales, k_cache, v_cache, stream);
      break;
    case DType::kF8E4M3:
      launch_write_kv<KvFp8>(k, v, slot_mapping, num_tokens, kv_dim, scales, k_cache, v_cache, stream);
      break;
    default:
      DI_CHECK(cache_dtype == DType::kF32, "write_kv: cache dtype " << dtype_name(cache_dtype));
      launch_write_kv<float>(k, v, slot_mapping, num_tokens, kv_dim, scales, k_cache, v_cache, stream);
  }
  DI_CUDA_CHECK_LAUNCH("write_kv_kernel");
}

void add_bias(float* y, const WeightView& bias, int64_t num_rows, cudaStream_t stream) {
  const int64_t cols = bias.rows * bias.cols;
  const int64_t count = num_rows * cols;
  if (count == 0) return;
  add_bias_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(y, bias.data, bias.dtype, cols, count);
  DI_CUDA_CHECK_LAUNCH("add_bias_kernel");
}

void cast_from_f32(const float* x, int64_t count, DType dtype, void* out, cudaStream_t stream) {
  if (count == 0) return;
  if (dtype == DType::kBF16) {
    const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0;
    const int64_t quads = aligned ? count / 4 : 0;
    launch_dependent(cast_bf16_kernel, dim3(grid_for(quads > 0 ? quads : count, kThreads)), dim3(kThreads), 0, stream,
                     x, count, quads, static_cast<__nv_bfloat16*>(out));
    DI_CUDA_CHECK_LAUNCH("cast_bf16_kernel");
  } else {
    cast_f16_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(x, count, static_cast<__half*>(out));
    DI_CUDA_CHECK_LAUNCH("cast_f16_kernel");
  }
}

}  // namespace deepinfer::kernels::cuda
