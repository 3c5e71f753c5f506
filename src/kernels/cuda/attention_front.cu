// The fused attention front end: a block takes one token and up to kWarps heads of it (q heads,
// then k heads); a warp normalises its head in shared memory, rotates it with the token's cos/sin
// (computed once per block, as rope_kernel does per token), and writes q back or k into the cache,
// with the matching v row. The arithmetic is that of rms_norm_kernel and rope_kernel per element;
// only the norm's sum of squares is reduced in another order. The per-head steps live in
// attention_front.cuh, which the tensor-core decode kernel shares when it folds the front end in.
#include <atomic>

#include "core/check.h"
#include "kernels/cuda/attention_front.h"
#include "kernels/cuda/attention_front.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/shared_carveout.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int32_t kMaxHeadDim = 1024;

// kLeanCarveout only names the twin that asks for the least shared-memory carveout.
template <typename T, bool kLeanCarveout>
__global__ void __launch_bounds__(kWarps * 32) attention_front_end_kernel(AttentionFrontEnd f) {
  wait_for_previous_grid();
  allow_next_grid();
  extern __shared__ float shared[];
  const int32_t half = f.rotary_dim / 2;
  float* cos_table = shared;                                 // [half]
  float* sin_table = cos_table + half;                       // [half]
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  float* row = sin_table + half + warp * f.head_dim;         // this warp's head, [head_dim]
  const int64_t t = blockIdx.x;
  front_detail::fill_rope_table(f, t, cos_table, sin_table, static_cast<int>(threadIdx.x), kWarps * 32);
  __syncthreads();

  const int32_t head = static_cast<int32_t>(blockIdx.y) * kWarps + warp;
  if (head >= f.num_heads + f.num_kv_heads) return;
  const bool is_q = head < f.num_heads;
  const int32_t h = is_q ? head : head - f.num_heads;
  front_detail::front_end_head(f, t, is_q, h, cos_table, sin_table, row, lane);
  if (is_q) {
    float* dst = f.q_out != nullptr ? f.q_out + (t * f.num_heads + h) * f.head_dim
                                    : f.q + t * f.q_stride + int64_t{h} * f.head_dim;
    for (int32_t d = lane; d < f.head_dim; d += 32) dst[d] = row[d];
    return;
  }
  front_detail::write_kv_row<T>(f, t, h, row, lane);
}

template <typename T, bool kLeanCarveout>
void launch_variant(const AttentionFrontEnd& front, dim3 grid, size_t shared_bytes, cudaStream_t stream) {
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

template <typename T>
void launch_front_end(const AttentionFrontEnd& front, dim3 grid, size_t shared_bytes, bool lean, cudaStream_t stream) {
  if (lean) {
    launch_variant<T, true>(front, grid, shared_bytes, stream);
  } else {
    launch_variant<T, false>(front, grid, shared_bytes, stream);
  }
  DI_CUDA_CHECK_LAUNCH("attention_front_end_kernel");
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
  // A decode step's few blocks (one per SM at most) run between GEMVs: they take the lean twin.
  const bool lean = int64_t{grid.x} * grid.y <= multiprocessor_count();
  switch (front.cache_dtype) {
    case DType::kBF16:
      return launch_front_end<__nv_bfloat16>(front, grid, shared_bytes, lean, stream);
    case DType::kF8E4M3:
      return launch_front_end<KvFp8>(front, grid, shared_bytes, lean, stream);
    default:
      DI_CHECK(front.cache_dtype == DType::kF32, "attention_front_end: cache dtype " << dtype_name(front.cache_dtype));
      return launch_front_end<float>(front, grid, shared_bytes, lean, stream);
  }
}

}  // namespace deepinfer::kernels::cuda
