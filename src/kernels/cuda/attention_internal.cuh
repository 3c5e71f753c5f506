// What the paged attention kernels share (attention.cu: the general kernel, the split combine and
// the plan; attention_decode.cu: the single-token decode kernel): the launch argument struct, the
// split workspace layout and cp.async copies into shared memory (cache elements: kv_cache.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/kv_cache.cuh"

namespace deepinfer::kernels::cuda::detail {

constexpr int kWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;

struct AttentionArgs {
  const float* q;       // [num_tokens, num_heads, head_dim]
  const void* k_cache;  // [num_blocks, block_size, num_kv_heads, head_dim] of params.cache_dtype
  const void* v_cache;  // may equal k_cache (MLA's latent rows are both keys and values)
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
  // The decode kernel runs as clusters of num_splits blocks (one per split) that combine among
  // themselves (AttentionPlan::combine_in_cluster); write_partials is then false.
  bool cluster_combine;
  // The decode kernel splits each sequence's own visible keys evenly (AttentionPlan::balanced_splits)
  // instead of the key axis in runs of split_keys.
  bool balanced_splits;
};

__device__ __forceinline__ float* partial_row(const AttentionArgs& a, int32_t split, int64_t token, int32_t head) {
  const int64_t stride = a.params.head_dim + 2;
  return a.partial + ((static_cast<int64_t>(split) * a.batch.num_tokens + token) * a.params.num_heads + head) * stride;
}

// Which decode work a block of the decode kernels has: grid (split, kv head, sequence). Every key
// in [key_begin, key_end) is visible: key_end <= seq_len, and the window start is folded into
// key_begin (or, with balanced splits, is where split 0 starts). decode is false when the sequence has more than one new token (not a decode row).
struct DecodeBlock {
  bool decode;
  int32_t seq;
  int32_t token;
  int32_t split;
  int32_t kv_head;
  int32_t group;
  int32_t key_begin;
  int32_t key_end;
};

__device__ __forceinline__ DecodeBlock decode_block(const AttentionArgs& a) {
  DecodeBlock b;
  b.seq = static_cast<int32_t>(blockIdx.z);
  b.token = a.batch.query_start[b.seq];
  b.decode = a.batch.query_start[b.seq + 1] - b.token == 1;
  b.split = static_cast<int32_t>(blockIdx.x);
  b.kv_head = static_cast<int32_t>(blockIdx.y);
  b.group = a.params.num_heads / a.params.num_kv_heads;
  const int32_t seq_len = a.batch.seq_len[b.seq];
  if (a.balanced_splits) {
    // The sequence's visible keys in num_splits equal runs of whole 16-key steps.
    const int32_t first = a.params.sliding_window > 0 ? max(0, seq_len - a.params.sliding_window) : 0;
    const int32_t run = ((seq_len - first + a.num_splits - 1) / a.num_splits + 15) / 16 * 16;
    b.key_begin = first + b.split * run;
    b.key_end = min(b.key_begin + run, seq_len);
    return b;
  }
  b.key_begin = b.split * a.split_keys;
  b.key_end = min(b.key_begin + a.split_keys, seq_len);
  if (a.params.sliding_window > 0) b.key_begin = max(b.key_begin, seq_len - a.params.sliding_window);
  return b;
}

// A sequence's pages as the decode kernels read them: where a cache position's row starts.
struct PageTable {
  const int32_t* blocks;  // the sequence's row of the block table
  int32_t block_size;
  int32_t block_shift;  // log2(block_size) for power-of-two pages (the usual 16), else -1: no division
  int64_t row_elems;    // elements per cache position: num_kv_heads * head_dim

  // Element offset of position pos, head 0, in a [num_blocks, block_size, num_kv_heads, head_dim] cache.
  __device__ __forceinline__ int64_t row_offset(int32_t pos) const {
    const int32_t page = block_shift >= 0 ? pos >> block_shift : pos / block_size;
    return (static_cast<int64_t>(blocks[page]) * block_size + (pos - page * block_size)) * row_elems;
  }
};

__device__ __forceinline__ PageTable page_table(const AttentionArgs& a, int32_t seq, int32_t head_dim) {
  const int32_t block_size = a.batch.block_size;
  return PageTable{a.batch.block_table + static_cast<int64_t>(seq) * a.batch.max_blocks_per_seq, block_size,
                   (block_size & (block_size - 1)) == 0 ? __ffs(block_size) - 1 : -1,
                   static_cast<int64_t>(a.params.num_kv_heads) * head_dim};
}

// One element d of a decode block's result for a head: its split's partial (sum, max, denominator)
// when the sequence is split, else the normalised output with the head's attention sink folded in.
__device__ __forceinline__ void write_decode_result(const AttentionArgs& a, int32_t split, int64_t token,
                                                    int32_t head, int d, float sum, float m_all, float denom) {
  const int32_t dims = a.params.head_dim;
  if (a.write_partials) {
    float* dst = partial_row(a, split, token, head);
    dst[d] = sum;
    if (d == 0) {
      dst[dims] = m_all;
      dst[dims + 1] = denom;
    }
    return;
  }
  float rescale = 1.0f;
  if (a.params.sinks != nullptr) {
    const float sink = a.params.sinks[head] * kLog2e;
    const float m_sink = fmaxf(m_all, sink);
    rescale = exp2f(m_all - m_sink);
    denom = denom * rescale + exp2f(sink - m_sink);
  }
  a.out[(token * a.params.num_heads + head) * dims + d] = sum * rescale / denom;
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

// The decode kernel takes head_dim 64, 128 or 256 with up to 8 query heads per KV head, and MLA's
// bf16 latent head (mla_decode_fits).
bool decode_kernel_fits(const AttentionParams& params);
// Blocks of the decode kernel for these params that one SM holds at once (the plan's wave size).
int32_t decode_resident_blocks(const AttentionParams& params);
// Launches it over every (split, kv head, sequence); blocks of sequences with more than one new
// token return at once. front, when given, is folded into the tensor-core kernel (bf16 caches of
// decode-only batches; mma_decode_fits): it replaces the attention_front_end launch before this one.
void launch_decode_attention(const AttentionArgs& args, const AttentionFrontEnd* front, cudaStream_t stream);

// The tensor-core decode kernel for bf16 and fp8 caches (attention_decode_mma.cu): the same grid and
// outputs, up to 8 query heads per KV head; launch_decode_attention takes it for those caches.
bool mma_decode_fits(const AttentionParams& params);
// The most splits that combine in one cluster: 16 where such clusters of the kernel fit the GPU
// (non-portable size), else 8.
int32_t mma_decode_max_cluster(const AttentionParams& params);
int32_t mma_decode_resident_blocks(const AttentionParams& params);
void launch_mma_decode_attention(const AttentionArgs& args, const AttentionFrontEnd* front, cudaStream_t stream);

// The tensor-core decode kernels for MLA: one bf16 or fp8 latent head of 576 dims, keys = values
// (grid: split, head block, sequence); no sliding window, no sinks, no cluster combine. bf16 heads go
// in blocks of 64 on the wgmma kernel (attention_decode_mla_wide.cu) when their count allows, else
// (and fp8 always) in blocks of 16 on the mma.sync one (attention_decode_mla.cu);
// launch_mla_decode_attention picks.
bool mla_decode_fits(const AttentionParams& params);
int32_t mla_decode_head_blocks(const AttentionParams& params);
int32_t mla_decode_resident_blocks(const AttentionParams& params);
void launch_mla_decode_attention(const AttentionArgs& args, cudaStream_t stream);
bool mla_wide_decode_fits(const AttentionParams& params);
int32_t mla_wide_decode_resident_blocks();
void launch_mla_wide_decode_attention(const AttentionArgs& args, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda::detail
