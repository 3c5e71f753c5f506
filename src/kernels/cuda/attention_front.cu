// The fused attention front end: a block takes one token and up to kWarps heads of it (q heads,
// then k heads); a warp normalises its head in shared memory, rotates it with the token's cos/sin
// (computed once per block, as rope_kernel does per token), and writes q back or k into the cache,
// with the matching v row. The arithmetic is that of rms_norm_kernel and rope_kernel per element;
// only the norm's sum of squares is reduced in another order.
#include <cuda_bf16.h>

#include <atomic>

#include "core/check.h"
#include "kernels/cuda/attention_front.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/shared_carveout.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int32_t kMaxHeadDim = 1024;

__device__ __forceinline__ void store(float* cache, int64_t at, float x) { cache[at] = x; }
__device__ __forceinline__ void store(__nv_bfloat16* cache, int64_t at, float x) {
  cache[at] = __float2bfloat16_rn(x);
}

// kLeanCarveout only names the twin that asks for the least shared-memory carveout.
template <typename T, bool kLeanCarveout>
__global__ void __launch_bounds__(kWarps * 32) attention_front_end_kernel(AttentionFrontEnd f) {
  wait_for_previous_grid();
  allow_next_grid();
  extern __shared__ float shared[];
  const int32_t half = f.rotary_dim / 2;
  const int32_t head_dim = f.head_dim;
  float* cos_table = shared;                                   // [half]
  float* sin_table = cos_table + half;                         // [half]
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  float* row = sin_table + half + warp * head_dim;             // this warp's head, [head_dim]
  const int64_t t = blockIdx.x;
  const float position = static_cast<float>(f.positions[t]);
  for (int32_t i = static_cast<int32_t>(threadIdx.x); i < half; i += kWarps * 32) {
    const float angle = position * f.inv_freq[i];
    double s_wide = 0.0;
    double c_wide = 0.0;
    sincos(static_cast<double>(angle), &s_wide, &c_wide);
    cos_table[i] = static_cast<float>(c_wide) * f.attention_scaling;
    sin_table[i] = static_cast<float>(s_wide) * f.attention_scaling;
  }
  __syncthreads();

  const int32_t head = static_cast<int32_t>(blockIdx.y) * kWarps + warp;
  if (head >= f.num_heads + f.num_kv_heads) return;
  const bool is_q = head < f.num_heads;
  const int32_t h = is_q ? head : head - f.num_heads;
  float* src = is_q ? f.q + t * f.q_stride + int64_t{h} * head_dim : f.k + t * f.k_stride + int64_t{h} * head_dim;
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
  if (is_q) {
    float* dst = f.q_out != nullptr ? f.q_out + (t * f.num_heads + h) * head_dim : src;
    for (int32_t d = lane; d < head_dim; d += 32) dst[d] = row[d];
    return;
  }
  const int64_t slot = f.slot_mapping[t];
  if (slot < 0) return;
  const int64_t at = slot * f.num_kv_heads * head_dim + int64_t{h} * head_dim;
  const float* v = f.v + t * f.v_stride + int64_t{h} * head_dim;
  T* k_cache = static_cast<T*>(f.k_cache) + at;
  T* v_cache = static_cast<T*>(f.v_cache) + at;
  for (int32_t d = lane; d < head_dim; d += 32) {
    store(k_cache, d, row[d]);
    store(v_cache, d, v[d]);
  }
}

template <typename T, bool kLeanCarveout>
void launch_front_end(const AttentionFrontEnd& front, dim3 grid, size_t shared_bytes, cudaStream_t stream) {
  if constexpr (kLeanCarveout) {
    // Shared memory grows with head_dim: the preference follows the largest launch so far.
    static std::atomic<size_t> preferred_for{0};
    size_t before = preferred_for.load();
    while (shared_bytes > before && !preferred_for.compare_exchange_weak(before, shared_bytes)) {
    }
    if (shared_bytes > before) {
      prefer_least_shared_carveout(reinterpret_cast<const void*>(attention_front_end_kernel<T, true>), shared_bytes, 1);
    }
  }
  launch_dependent(attention_front_end_kernel<T, kLeanCarveout>, grid, dim3(kWarps * 32), shared_bytes, stream, front);
}

}  // namespace

void attention_front_end(const AttentionFrontEnd& front, cudaStream_t stream) {
  if (front.num_tokens == 0) return;
  DI_CHECK(front.head_dim > 0 && front.head_dim <= kMaxHeadDim && front.rotary_dim <= front.head_dim,
           "attention_front_end: head_dim " << front.head_dim << ", rotary_dim " << front.rotary_dim);
  const auto head_tiles = static_cast<unsigned>((front.num_heads + front.num_kv_heads + kWarps - 1) / kWarps);
  const dim3 grid(static_cast<unsigned>(front.num_tokens), head_tiles);
  const size_t shared_bytes =
      (static_cast<size_t>(front.rotary_dim / 2) * 2 + size_t{kWarps} * static_cast<size_t>(front.head_dim)) *
      sizeof(float);
  DI_CHECK(front.cache_dtype == DType::kBF16 || front.cache_dtype == DType::kF32,
           "attention_front_end: cache dtype " << dtype_name(front.cache_dtype));
  // A decode step's few blocks (one per SM at most) run between GEMVs: they take the lean twin.
  if (int64_t{grid.x} * grid.y <= multiprocessor_count()) {
    if (front.cache_dtype == DType::kBF16) {
      launch_front_end<__nv_bfloat16, true>(front, grid, shared_bytes, stream);
    } else {
      launch_front_end<float, true>(front, grid, shared_bytes, stream);
    }
  } else if (front.cache_dtype == DType::kBF16) {
    launch_front_end<__nv_bfloat16, false>(front, grid, shared_bytes, stream);
  } else {
    launch_front_end<float, false>(front, grid, shared_bytes, stream);
  }
  DI_CUDA_CHECK_LAUNCH("attention_front_end_kernel");
}

}  // namespace deepinfer::kernels::cuda
