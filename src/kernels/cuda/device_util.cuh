// Device helpers shared by the CUDA kernels: weight element loads by dtype, launch sizing, and
// warp/block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "core/dtype.h"

namespace deepinfer::kernels::cuda {

// Element conversions for kernels templated on their element type.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename W>
__device__ __forceinline__ W from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// Two e4m3 codes (the low 16 bits of codes, the lower byte first) as an f16 pair: exact, as f16 holds
// every e4m3 value. The tensor-core decode kernels feed these pairs to their MMAs; FP8 weights and KV caches widen
// through them.
__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint32_t codes) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes), __NV_E4M3);
  return *reinterpret_cast<const uint32_t*>(&raw);
}

// Four e4m3 codes (one word, the lowest byte first) as float32, without their scales.
__device__ __forceinline__ void fp8x4_to_floats(uint32_t codes, float* out) {
  const uint32_t lo = fp8x2_to_f16x2(codes & 0xffffu);
  const uint32_t hi = fp8x2_to_f16x2(codes >> 16);
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
  out[0] = a.x;
  out[1] = a.y;
  out[2] = b.x;
  out[3] = b.y;
}

__device__ __forceinline__ float load_as_f32(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[index]);
    case DType::kF16: return __half2float(static_cast<const __half*>(data)[index]);
    default: return static_cast<const float*>(data)[index];
  }
}

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// A block's per-warp sums of (row, col), added in warp order (deterministic): the split-K GEMVs'
// last step (gemv.cu, moe_rowwise.cu).
template <int kWarps, int kRows, int kCols>
__device__ __forceinline__ float sum_over_warps(const float (&partial)[kWarps][kRows][kCols], int row, int col) {
  float total = partial[0][row][col];
#pragma unroll
  for (int i = 1; i < kWarps; ++i) total += partial[i][row][col];
  return total;
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset >>= 1) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Sum over a block of kThreads threads (a multiple of 32); every thread gets the total. The
// reduction tree is fixed, so the result depends only on the inputs.
template <int kThreads>
__device__ __forceinline__ float block_sum(float value) {
  __shared__ float partial[kThreads / 32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  value = warp_sum(value);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  return total;
}

// Maximum over a block of kThreads threads (a multiple of 32); every thread gets it. Safe to call
// again right after (the leading barrier), like block_sum.
template <int kThreads>
__device__ __forceinline__ float block_max(float value) {
  __shared__ float partial[kThreads / 32];
  value = warp_max(value);
  __syncthreads();
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = value;
  __syncthreads();
  float result = partial[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) result = fmaxf(result, partial[w]);
  return result;
}

// Barrier id (1-15: 0 is __syncthreads') over the first kThreads threads of the block: one part of
// a warp-specialised block waits for itself only.
template <int kThreads>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

// Blocks for a grid-stride loop over count elements.
inline unsigned grid_for(int64_t count, int threads) {
  const int64_t blocks = (count + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks));
}

}  // namespace deepinfer::kernels::cuda
