// What the paged attention kernels share (attention.cu: the general kernel, the split combine and
// the plan; attention_decode.cu: the single-token decode kernel): the launch argument struct, the
// split workspace layout, and cp.async copies into shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_ops.h"

namespace deepinfer::kernels::cuda::detail {

constexpr int kWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;

struct AttentionArgs {
  const float* q;        // [num_tokens, num_heads, head_dim]
  const float* k_cache;  // [num_blocks, block_size, num_kv_heads, head_dim]
  const float* v_cache;  // may equal k_cache (MLA's latent rows are both keys and values)
  PagedBatch batch;
  AttentionParams params;
  int32_t split_keys;
  int32_t num_splits;
  bool write_partials;
  // The general kernel leaves sequences with exactly one new token to the decode kernel (set when
  // both run on one batch). Which kernel serves a sequence then depends on that sequence alone, so
  // batch-invariant results stay invariant.
  bool skip_single_token;
  float* out;      // [num_tokens, num_heads, head_dim]
  float* partial;  // [num_splits, num_tokens, num_heads, head_dim + 2]: acc, then m and l (log2 units)
};

__device__ __forceinline__ float* partial_row(const AttentionArgs& a, int32_t split, int64_t token, int32_t head) {
  const int64_t stride = a.params.head_dim + 2;
  return a.partial + ((static_cast<int64_t>(split) * a.batch.num_tokens + token) * a.params.num_heads + head) * stride;
}

// 16 bytes global -> shared without passing through registers; valid == false writes zeros and
// reads nothing (global must still be a mapped address).
__device__ __forceinline__ void cp_async16(void* shared, const void* global, bool valid) {
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// The decode kernel takes head_dim 64, 128 or 256 with up to 8 query heads per KV head.
bool decode_kernel_fits(const AttentionParams& params);
// Launches it over every (split, kv head, sequence); blocks of sequences with more than one new
// token return at once.
void launch_decode_attention(const AttentionArgs& args, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda::detail
