// KV cache elements on the device, by the cache's element type T (Backend::kv_cache_dtype): float;
// __nv_bfloat16, the value rounded to nearest even; KvFp8, the e4m3 code of value / scale[column]
// (nearest even, saturated at 448: core/dtype's f32_to_f8e4m3), read back as the code's value times
// scale[column] (kernels::KvScales; null scales are all 1). Every kernel that writes or widens a
// cache goes through these, so a cached value and its widened float32 are the host backend's bits:
// IEEE division and products, never contracted into a neighbouring add.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"

namespace deepinfer::kernels::cuda {

using KvFp8 = __nv_fp8_e4m3;

// One value into the cache at element at, of the row's column column.
__device__ __forceinline__ void store_kv(float* cache, int64_t at, float x, const float* /*scales*/,
                                         int64_t /*column*/) {
  cache[at] = x;
}
__device__ __forceinline__ void store_kv(__nv_bfloat16* cache, int64_t at, float x, const float* /*scales*/,
                                         int64_t /*column*/) {
  cache[at] = __float2bfloat16_rn(x);
}
__device__ __forceinline__ void store_kv(KvFp8* cache, int64_t at, float x, const float* scales, int64_t column) {
  cache[at].__x =
      __nv_cvt_float_to_fp8(scales == nullptr ? x : __fdiv_rn(x, scales[column]), __NV_SATFINITE, __NV_E4M3);
}

// Four values at a multiple of four elements (and columns).
__device__ __forceinline__ void store_kv4(float* cache, int64_t at, float4 x, const float* /*scales*/,
                                          int64_t /*column*/) {
  *reinterpret_cast<float4*>(cache + at) = x;
}
__device__ __forceinline__ void store_kv4(__nv_bfloat16* cache, int64_t at, float4 x, const float* /*scales*/,
                                          int64_t /*column*/) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(x.x, x.y);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(x.z, x.w);
  *reinterpret_cast<uint2*>(cache + at) =
      make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
}
__device__ __forceinline__ void store_kv4(KvFp8* cache, int64_t at, float4 x, const float* scales, int64_t column) {
  if (scales != nullptr) {
    x = make_float4(__fdiv_rn(x.x, scales[column]), __fdiv_rn(x.y, scales[column + 1]),
                    __fdiv_rn(x.z, scales[column + 2]), __fdiv_rn(x.w, scales[column + 3]));
  }
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(x.x, x.y), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(x.z, x.w), __NV_SATFINITE, __NV_E4M3);
  *reinterpret_cast<uint32_t*>(cache + at) = lo | (hi << 16);
}

// Which dim of a 16-dim chunk column k (0-15) of an m16n8k16 A fragment holds when ldmatrix reads a
// key's e4m3 codes as 16-bit pairs: lane (g, t) then gets dims 4t..4t + 3 of key g, which the MMA
// takes as columns 2t, 2t + 1 (dims 4t, 4t + 1) and 2t + 8, 2t + 9 (dims 4t + 2, 4t + 3); q's
// fragments take the same order.
__device__ __forceinline__ int fp8_fragment_dim(int k) {
  return k < 8 ? k / 2 * 4 + k % 2 : (k - 8) / 2 * 4 + 2 + k % 2;
}

// The 16 / sizeof(T) elements of a 16-byte copy of the cache, widened; an fp8 cache's codes without
// their scales (scale_kv takes those, or a kernel folds them into its own products).
__device__ __forceinline__ void unpack16(const float4& raw, const float* /*tag*/, float* out) {
  out[0] = raw.x;
  out[1] = raw.y;
  out[2] = raw.z;
  out[3] = raw.w;
}
__device__ __forceinline__ void unpack16(const float4& raw, const __nv_bfloat16* /*tag*/, float* out) {
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 x = __bfloat1622float2(pairs[j]);
    out[2 * j] = x.x;
    out[2 * j + 1] = x.y;
  }
}
__device__ __forceinline__ void unpack16(const float4& raw, const KvFp8* /*tag*/, float* out) {
  const auto* words = reinterpret_cast<const uint32_t*>(&raw);
#pragma unroll
  for (int j = 0; j < 4; ++j) fp8x4_to_floats(words[j], out + 4 * j);
}

// Widened fp8 codes of columns column .. column + count - 1 times their scales; other caches have none.
template <int kCount>
__device__ __forceinline__ void scale_kv(float* values, const float* scales, int64_t column) {
  if (scales == nullptr) return;
#pragma unroll
  for (int i = 0; i < kCount; ++i) values[i] = __fmul_rn(values[i], scales[column + i]);
}

// One cached value widened to float32, its scale applied.
__device__ __forceinline__ float load_kv(const float* cache, int64_t at, const float* /*scales*/, int64_t /*column*/) {
  return cache[at];
}
__device__ __forceinline__ float load_kv(const __nv_bfloat16* cache, int64_t at, const float* /*scales*/,
                                         int64_t /*column*/) {
  return __bfloat162float(cache[at]);
}
__device__ __forceinline__ float load_kv(const KvFp8* cache, int64_t at, const float* scales, int64_t column) {
  const uint32_t pair = fp8x2_to_f16x2(cache[at].__x);
  const float x = __low2float(*reinterpret_cast<const __half2*>(&pair));
  return scales == nullptr ? x : __fmul_rn(x, scales[column]);
}

// Four cached values from a multiple of four elements, widened, their scales applied.
__device__ __forceinline__ float4 load_kv4(const float* cache, int64_t at, const float* /*scales*/,
                                           int64_t /*column*/) {
  return *reinterpret_cast<const float4*>(cache + at);
}
__device__ __forceinline__ float4 load_kv4(const __nv_bfloat16* cache, int64_t at, const float* /*scales*/,
                                           int64_t /*column*/) {
  const uint2 bits = *reinterpret_cast<const uint2*>(cache + at);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ float4 load_kv4(const KvFp8* cache, int64_t at, const float* scales, int64_t column) {
  float x[4];
  fp8x4_to_floats(*reinterpret_cast<const uint32_t*>(cache + at), x);
  scale_kv<4>(x, scales, column);
  return make_float4(x[0], x[1], x[2], x[3]);
}

}  // namespace deepinfer::kernels::cuda
