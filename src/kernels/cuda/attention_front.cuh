// The attention front end's per-head steps (kernels::AttentionFrontEnd) as device functions: the
// front-end kernel (attention_front.cu) and the decode attention kernel that folds the front end in
// (attention_decode_mma.cu) run the same arithmetic, so both leave the same bits.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/ops.h"

namespace deepinfer::kernels::cuda::front_detail {

// The token's rotation table (rotary_dim / 2 cos and sin entries) by num_threads threads, as
// rope_kernel computes it per token.
__device__ inline void fill_rope_table(const AttentionFrontEnd& f, int64_t t, float* cos_table, float* sin_table,
                                       int thread, int num_threads) {
  const float position = static_cast<float>(f.positions[t]);
  for (int32_t i = thread; i < f.rotary_dim / 2; i += num_threads) {
    const float angle = position * f.inv_freq[i];
    double s_wide = 0.0;
    double c_wide = 0.0;
    sincos(static_cast<double>(angle), &s_wide, &c_wide);
    cos_table[i] = static_cast<float>(c_wide) * f.attention_scaling;
    sin_table[i] = static_cast<float>(s_wide) * f.attention_scaling;
  }
}

// One warp: q head h (is_q) or k head h of token t, normalised (qk-norm) and rotated, into row
// ([head_dim] floats in shared memory).
__device__ inline void front_end_head(const AttentionFrontEnd& f, int64_t t, bool is_q, int32_t h,
                                      const float* cos_table, const float* sin_table, float* row, int lane) {
  const int32_t head_dim = f.head_dim;
  const float* src = is_q ? f.q + t * f.q_stride + int64_t{h} * head_dim : f.k + t * f.k_stride + int64_t{h} * head_dim;
  float sum_squares = 0.0f;
  for (int32_t d = lane; d < head_dim; d += 32) {
    const float x = src[d];
    row[d] = x;
    sum_squares += x * x;
  }
  const WeightView& norm = is_q ? f.q_norm : f.k_norm;
  if (norm.data != nullptr) {
    const float inv_rms = rsqrtf(warp_sum(sum_squares) / static_cast<float>(head_dim) + f.norm_eps);
    for (int32_t d = lane; d < head_dim; d += 32) {
      row[d] = row[d] * inv_rms * (load_as_f32(norm.data, norm.dtype, d) + f.norm_weight_offset);
    }
  }
  __syncwarp();
  const int32_t half = f.rotary_dim / 2;
  const bool interleaved = f.layout == RopeLayout::kInterleaved;
  for (int32_t i = lane; i < half; i += 32) {
    const int32_t first = interleaved ? 2 * i : i;
    const int32_t second = interleaved ? 2 * i + 1 : i + half;
    const float x0 = row[first];
    const float x1 = row[second];
    row[first] = x0 * cos_table[i] - x1 * sin_table[i];
    row[second] = x1 * cos_table[i] + x0 * sin_table[i];
  }
  __syncwarp();
}

// One warp: the rotated k row of head h (front_end_head's row) and token t's v row into the caches
// at the token's slot (as write_kv stores them, kv_cache.cuh); nothing for a slot < 0.
template <typename T>
__device__ inline void write_kv_row(const AttentionFrontEnd& f, int64_t t, int32_t h, const float* row, int lane) {
  const int64_t slot = f.slot_mapping[t];
  if (slot < 0) return;
  const int32_t head_dim = f.head_dim;
  const int64_t at = slot * f.num_kv_heads * head_dim + int64_t{h} * head_dim;
  const float* v = f.v + t * f.v_stride + int64_t{h} * head_dim;
  T* k_cache = static_cast<T*>(f.k_cache) + at;
  T* v_cache = static_cast<T*>(f.v_cache) + at;
  const int64_t column = int64_t{h} * head_dim;
  for (int32_t d = lane; d < head_dim; d += 32) {
    store_kv(k_cache, d, row[d], f.cache_scales.k, column + d);
    store_kv(v_cache, d, v[d], f.cache_scales.v, column + d);
  }
}

}  // namespace deepinfer::kernels::cuda::front_detail
