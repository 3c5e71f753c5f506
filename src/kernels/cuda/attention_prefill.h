// Tensor-core paged attention for prefill (kernels/cuda/attention_prefill.cu): q, k and v rounded to
// bf16, scores and softmax in fp32. For models whose weights are 16-bit (AttentionParams::allow_bf16)
// and batches with long prompts; the float32 kernel of attention.cu stays the exact path.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

class HeadGemm;

// Whether prefill_attention takes this head size (64, 128 or 256).
bool prefill_attention_supported(const AttentionParams& params);

// Device workspace prefill_attention needs: the bf16 copy of the keys and values the step reads,
// [2, num_seqs, num_kv_heads, max_keys, head_dim] with max_keys = max_blocks_per_seq * block_size
// rounded up to the key tile. Needs batch's host-side sizes.
size_t prefill_attention_workspace_bytes(const PagedBatch& batch, const AttentionParams& params);

// The contract of kernels::paged_attention (ops.h) on device pointers, enqueued on stream:
// q [num_tokens, num_heads, head_dim] f32, k_cache/v_cache [num_blocks, block_size, num_kv_heads,
// head_dim] of params.cache_dtype (kF32, kBF16 or kF8E4M3), out [num_tokens, num_heads, head_dim] f32.
// workspace holds prefill_attention_workspace_bytes(batch, params) bytes. Needs
// prefill_attention_supported(params).
void prefill_attention(const float* q, const void* k_cache, const void* v_cache, const PagedBatch& batch,
                       const AttentionParams& params, void* workspace, float* out, cudaStream_t stream);

// MLA prefill in the expanded form (kernels::MlaExpandedAttention), on DeepSeek-V2/V3's head
// sizes (nope 128, rope 64, v 128) with bf16 kv_b: the visible latent rows are gathered to bf16,
// expanded per head by one cuBLAS product (gemm), and attended by the kernel above with 192-dim
// q.k (the rope key read from the latent rows, shared by the heads) and 128-dim values.
bool mla_prefill_supported(const MlaExpandedAttention& a);
// [num_seqs * max_keys] latent rows and their expansion, bf16. Needs batch's host-side sizes.
size_t mla_prefill_workspace_bytes(const PagedBatch& batch, const MlaExpandedAttention& a);
void mla_prefill_attention(const PagedBatch& batch, const MlaExpandedAttention& a, HeadGemm& gemm, void* workspace,
                           cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
