// The numeric ops of a transformer forward pass, on raw pointers and shapes.
// Every op exists twice with the same signature: kernels::ref (plain scalar code, never
// optimised; the oracle for every other implementation) and kernels::cpu (vectorised,
// multithreaded with OpenMP). Kernels see pointers, shapes and dtypes, never engine types.
// Activations are float32 row-major; weights are F32, BF16 or F16 as stored on disk.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace deepinfer::kernels {

// A weight as stored in the checkpoint: row-major [rows, cols]; for a vector rows == 1.
// For linear layers rows = output features, cols = input features (PyTorch's layout).
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
};

enum class RopeLayout : uint8_t {
  kRotateHalf,   // pairs (i, i + rotary_dim/2): Llama/Qwen/Mistral in transformers
  kInterleaved,  // pairs (2i, 2i + 1): GPT-J style, DeepSeek's MLA rope part
};

// A batch of sequences over a paged KV cache. Sequence s owns the new tokens
// [query_start[s], query_start[s+1]) of the token dimension; they are the last tokens of its
// seq_len[s] cached tokens (already written with write_kv), so new token j of s sits at
// absolute position seq_len[s] - num_new + j. Cache position p of s lives in block
// block_table[s * max_blocks_per_seq + p / block_size], row p % block_size.
struct PagedBatch {
  int32_t num_seqs = 0;
  const int32_t* query_start = nullptr;  // [num_seqs + 1]
  const int32_t* seq_len = nullptr;      // [num_seqs]
  const int32_t* block_table = nullptr;  // [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 0;
};

struct AttentionParams {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;  // query head h reads kv head h / (num_heads / num_kv_heads)
  int32_t head_dim = 0;
  float scale = 0.0f;          // multiplies q.k before the softmax
  int32_t sliding_window = 0;  // 0: full causal; else a query at p sees keys k with p - k < window
};

#define DEEPINFER_KERNEL_OPS                                                                                  \
  /* out[t, :] = table[token_ids[t], :] as float32. out: [num_tokens, table.cols] */                          \
  void embedding(const WeightView& table, const int32_t* token_ids, int64_t num_tokens, float* out);          \
                                                                                                              \
  /* out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * (weight + weight_offset). x, out: [num_rows, dim];   \
     weight: [1, dim]. out may alias x. */                                                                    \
  void rms_norm(const float* x, const WeightView& weight, float weight_offset, int64_t num_rows, int64_t dim,  \
                float eps, float* out);                                                                       \
                                                                                                              \
  /* residual += x, then out = rms_norm(residual). residual, x, out: [num_rows, dim]; out may alias x. */     \
  void add_rms_norm(float* residual, const float* x, const WeightView& weight, float weight_offset,           \
                    int64_t num_rows, int64_t dim, float eps, float* out);                                    \
                                                                                                              \
  /* Rotates the first rotary_dim dims of every head in place. x: [num_tokens, num_heads, head_dim];          \
     positions: [num_tokens]; inv_freq: [rotary_dim / 2]. angle = float(pos) * inv_freq[i] in float32,        \
     then cos/sin of it times attention_scaling (yarn's mscale; 1 otherwise). */                              \
  void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,      \
            int32_t rotary_dim, const float* inv_freq, float attention_scaling, RopeLayout layout);           \
                                                                                                              \
  /* y[M, N] = x[M, K] @ w[N, K]^T (+ bias[1, N]). bias.data may be null. */                                  \
  void matmul(const float* x, const WeightView& w, const WeightView& bias, int64_t num_rows, float* y);       \
                                                                                                              \
  /* out[i] = silu(gate[i]) * up[i]; out may alias gate or up. */                                             \
  void silu_mul(const float* gate, const float* up, int64_t count, float* out);                               \
                                                                                                              \
  /* out[i] = a[i] + b[i]; out may alias a or b. */                                                           \
  void add(const float* a, const float* b, int64_t count, float* out);                                        \
                                                                                                              \
  /* Copies new K/V rows into the cache: cache row slot_mapping[t] (= block_id * block_size + offset)         \
     gets k[t, :] / v[t, :]. k, v: [num_tokens, kv_dim]; caches: [num_blocks * block_size, kv_dim]. */        \
  void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens,             \
                int64_t kv_dim, float* k_cache, float* v_cache);                                              \
                                                                                                              \
  /* Causal (optionally sliding-window) grouped-query attention of the batch's new tokens over the            \
     cache. q, out: [num_tokens, num_heads, head_dim]; caches: [num_blocks, block_size, num_kv_heads,          \
     head_dim]. Each token's result depends only on its own sequence (batch invariant). */                    \
  void paged_attention(const float* q, const float* k_cache, const float* v_cache, const PagedBatch& batch,   \
                       const AttentionParams& params, float* out);

namespace ref {
DEEPINFER_KERNEL_OPS
}  // namespace ref

namespace cpu {
DEEPINFER_KERNEL_OPS
}  // namespace cpu

}  // namespace deepinfer::kernels
