// The ops of kernels/ops.h on an NVIDIA GPU: the same contracts, on device pointers, enqueued on a
// stream (every function returns before the work is done). Weights may be F32, BF16 or F16;
// activations are float32. Launch errors throw CudaError (kernels/cuda/cuda_check.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

void embedding(const WeightView& table, const int32_t* token_ids, int64_t num_tokens, float* out, cudaStream_t stream);
// The norms also write out rounded to half_dtype (kBF16 or kF16) into out_half when it is set.
void rms_norm(const float* x, const WeightView& weight, float weight_offset, int64_t num_rows, int64_t dim, float eps,
              float* out, cudaStream_t stream, void* out_half = nullptr, DType half_dtype = DType::kBF16);
void add_rms_norm(float* residual, const float* x, const WeightView& weight, float weight_offset, int64_t num_rows,
                  int64_t dim, float eps, float* out, cudaStream_t stream, void* out_half = nullptr,
                  DType half_dtype = DType::kBF16);
// out may alias x (each block reads its row before writing it, and only its own row).
void layer_norm(const float* x, const WeightView& weight, const WeightView& bias, int64_t num_rows, int64_t dim,
                float eps, float* out, cudaStream_t stream);
void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,
          int32_t rotary_dim, const float* inv_freq, float attention_scaling, RopeLayout layout, cudaStream_t stream);
void silu_mul(const float* gate, const float* up, int64_t count, float* out, cudaStream_t stream);
void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* out, cudaStream_t stream);
void gelu_mul(const float* gate, const float* up, int64_t count, float* out, cudaStream_t stream);
void add(const float* a, const float* b, int64_t count, float* out, cudaStream_t stream);
void scale(const float* x, int64_t count, float factor, float* out, cudaStream_t stream);
void softcap(const float* x, int64_t count, float cap, float* out, cudaStream_t stream);
// cache_dtype kF32, kBF16 (rounded to nearest even) or kF8E4M3 (codes of value / scale, KvScales).
void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens, int64_t kv_dim,
              DType cache_dtype, KvScales scales, void* k_cache, void* v_cache, cudaStream_t stream);

// Matmul helpers. y[r, :] += bias for num_rows rows; bias: [1, cols] of any weight dtype.
void add_bias(float* y, const WeightView& bias, int64_t num_rows, cudaStream_t stream);
// out[i] = x[i] rounded to dtype (kBF16 or kF16, round to nearest even). out: count elements.
void cast_from_f32(const float* x, int64_t count, DType dtype, void* out, cudaStream_t stream);

// out[i] = a uniform value in [-1, 1) from a hash of (seed, i), rounded to dtype: benchmark and
// probe inputs that are neither zeros nor the same in every run.
void fill_random(void* out, int64_t count, DType dtype, uint64_t seed, cudaStream_t stream);
// Reads bytes of src (a multiple of 64, 16-byte aligned) once, each of num_blocks blocks summing its
// share into sums[block]: the read-only stream the benchmarks' bandwidth fractions also divide by.
void read_stream(const void* src, int64_t bytes, float* sums, int num_blocks, cudaStream_t stream);

// Paged attention. Keys are processed in splits of split_keys cache positions (split s covers
// [s * split_keys, (s + 1) * split_keys)); each split's partial softmax goes to the workspace and a
// second kernel combines them in split order. The split size, not the batch, fixes the reduction
// order, so a fixed split_keys gives batch-invariant results.
struct AttentionPlan {
  int32_t split_keys = 0;
  int32_t num_splits = 1;
  size_t workspace_bytes = 0;  // [num_splits, num_tokens, num_heads, head_dim + 2] float32, 0 when one split
  // Decode-only bf16 batches of 2-16 splits (16 where the GPU takes such clusters, else 8): the
  // splits of one (sequence, KV head) run as one thread-block cluster and combine through
  // distributed shared memory (no workspace, no second kernel).
  bool combine_in_cluster = false;
  // Decode-only bf16 batches outside the invariant mode: split s of a sequence takes the s-th of
  // num_splits equal runs of its own visible keys, not [s * split_keys, (s + 1) * split_keys), so a
  // block table padded wider than the context (CUDA graphs' buckets) leaves no split idle.
  bool balanced_splits = false;
};

// fixed_split_keys > 0 pins the split size (batch-invariant mode); 0 picks one that fills
// num_sms multiprocessors. Needs batch.num_tokens and batch.max_query_len (host-side sizes).
AttentionPlan plan_paged_attention(const PagedBatch& batch, const AttentionParams& params, int32_t fixed_split_keys,
                                   int32_t num_sms);
// Caches of params.cache_dtype: kF32, kBF16 or kF8E4M3 with params.cache_scales (MLA's bf16 latent
// head decodes on its own tensor-core kernel).
// front, when given (only with plan.balanced_splits: decode-only bf16 or fp8 batches outside the
// invariant mode), is the attention front end of this batch folded into the decode kernel, in place of an
// attention_front_end launch before this one: q is then unused, the rotated q read from front.q,
// and front's K/V rows are written by the attention itself. The bits are those of the two launches.
void paged_attention(const float* q, const void* k_cache, const void* v_cache, const PagedBatch& batch,
                     const AttentionParams& params, const AttentionPlan& plan, void* workspace, float* out,
                     cudaStream_t stream, const AttentionFrontEnd* front = nullptr);

}  // namespace deepinfer::kernels::cuda
