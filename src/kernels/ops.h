// The numeric ops of a transformer forward pass, on raw pointers and shapes.
// Every op exists twice with the same signature: kernels::ref (plain scalar code, never
// optimised; the oracle for every other implementation) and kernels::cpu (vectorised,
// multithreaded with OpenMP). Kernels see pointers, shapes and dtypes, never engine types.
// Activations are float32 row-major; weights are F32, BF16 or F16 as stored on disk, or FP8 / MXFP4
// with block scales (WeightView) where the backend keeps them packed.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace deepinfer::kernels {

// Values per e8m0 scale of an MXFP4 row (the OCP MX block).
inline constexpr int64_t kMxfp4Block = 32;

// A weight as stored in the checkpoint: row-major [rows, cols]; for a vector rows == 1.
// For linear layers rows = output features, cols = input features (PyTorch's layout).
// Block-quantised weights (only matmul reads them, on backends that keep them packed) carry their
// scales, one per scale_block_rows x scale_block_cols block. kF8E4M3 (the checkpoint's
// weight_block_size): data e4m3 [rows, cols], scales float32 [ceil(rows / scale_block_rows),
// ceil(cols / scale_block_cols)], value = e4m3 * its block's scale. kMxfp4 (blocks of 1 x
// kMxfp4Block, cols a multiple of it): data [rows, cols / 2] bytes, element 2j the low nibble of
// byte j and 2j + 1 the high one, each an e2m1 code; scales e8m0 bytes [rows, cols / kMxfp4Block],
// value = e2m1 * 2^(scale - 127).
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* scales = nullptr;  // kF8E4M3 and kMxfp4 only
  int32_t scale_block_rows = 0;
  int32_t scale_block_cols = 0;
};

// A kF8E4M3 weight's float32 scales: one row of them per block of scale_block_rows rows, and how
// many its first `rows` rows take.
inline int64_t block_scale_row_stride(const WeightView& w) {
  return (w.cols + w.scale_block_cols - 1) / w.scale_block_cols;
}
inline int64_t block_scale_count(const WeightView& w, int64_t rows) {
  return (rows + w.scale_block_rows - 1) / w.scale_block_rows * block_scale_row_stride(w);
}

// Bytes w holds: its values and, when block-quantised, its scales.
inline int64_t weight_bytes(const WeightView& w) {
  if (w.dtype == DType::kMxfp4) return w.rows * w.cols / 2 + w.rows * (w.cols / kMxfp4Block);
  int64_t bytes = w.rows * w.cols * static_cast<int64_t>(dtype_size_bytes(w.dtype));
  if (w.dtype == DType::kF8E4M3) bytes += block_scale_count(w, w.rows) * static_cast<int64_t>(sizeof(float));
  return bytes;
}

// The scales of a kF8E4M3 KV cache, one per column ([kv_dim] floats each: a per-tensor or per-head
// scale repeated over its columns; null: every scale 1). Column c of a row holds the e4m3 code of
// value / scale[c] (nearest even, saturated at 448) and reads back as code * scale[c]. kF32 and kBF16
// caches (bf16: the value rounded to nearest even) take no scales.
struct KvScales {
  const float* k = nullptr;
  const float* v = nullptr;
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
  // Host-side sizes for device launches (grid shapes, workspaces); host kernels ignore them.
  int32_t num_tokens = 0;     // query_start[num_seqs]
  int32_t max_query_len = 0;  // the most new tokens of any sequence
  // Some sequences are consecutive rows of one cached sequence, split into one-token sequences
  // over the same table (a speculative verify step): every row's KV must be in the cache before
  // any row attends, so a backend may not write a row's KV inside its own attention.
  bool rows_share_sequences = false;
  // [num_tokens] or null: token t also sees the lookahead[t] keys after its own position (this
  // step's own rows, so every row's KV is written before any row attends); a sliding window still
  // counts back from its own position. Gemma 3's image tokens see their whole image this way.
  const int32_t* lookahead = nullptr;
};

struct AttentionParams {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;  // query head h reads kv head h / (num_heads / num_kv_heads)
  int32_t head_dim = 0;
  float scale = 0.0f;          // multiplies q.k before the softmax
  int32_t sliding_window = 0;  // 0: full causal; else a query at p sees keys k with p - k < window
  // [num_heads] or null. GPT-OSS's attention sinks: a learned logit per query head that joins the
  // softmax denominator (exp(sink) next to the keys' exp(score)) but carries no value.
  const float* sinks = nullptr;
  // The model's weights are 16-bit: a device backend may round q, k and v to bf16 for tensor-core
  // attention (fp32 softmax and sums). Host kernels ignore it.
  bool allow_bf16 = false;
  // Element type of the K/V caches (Backend::kv_cache_dtype): kF32, kBF16 or kF8E4M3 (with
  // cache_scales).
  DType cache_dtype = DType::kF32;
  KvScales cache_scales = {};
};

// The dense attention layer's front end (Backend::attention_front_end): per-head RMSNorm of q and
// k when q_norm.data is set, rope of q and k (the ops rms_norm and rope), then k and v into the
// cache (write_kv). Rows of q, k and v sit q_stride, k_stride, v_stride floats apart (one [q|k|v]
// product, or three). The normed, rotated q goes to q_out, contiguous [num_tokens, num_heads,
// head_dim] (null: back into q); k is scratch afterwards.
struct AttentionFrontEnd {
  float* q = nullptr;  // [num_tokens, num_heads, head_dim] per row
  float* q_out = nullptr;
  float* k = nullptr;  // [num_tokens, num_kv_heads, head_dim] per row
  const float* v = nullptr;
  int64_t q_stride = 0;
  int64_t k_stride = 0;
  int64_t v_stride = 0;
  int64_t num_tokens = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  WeightView q_norm;  // [1, head_dim], or data null: no qk-norm
  WeightView k_norm;
  float norm_weight_offset = 0.0f;
  float norm_eps = 0.0f;
  const int32_t* positions = nullptr;  // [num_tokens]
  int32_t rotary_dim = 0;
  const float* inv_freq = nullptr;  // [rotary_dim / 2]
  float attention_scaling = 1.0f;
  RopeLayout layout = RopeLayout::kRotateHalf;
  const int32_t* slot_mapping = nullptr;  // [num_tokens]; < 0 skips the token's cache write
  DType cache_dtype = DType::kF32;
  KvScales cache_scales = {};
  void* k_cache = nullptr;  // [num_slots, num_kv_heads * head_dim] of cache_dtype
  void* v_cache = nullptr;
};

// Mixture-of-experts routing (kernels moe_route / moe_experts; model/layers/moe.h builds these).
enum class MoeScoring : uint8_t { kSoftmax, kSigmoid };
// How a group of experts is ranked in grouped top-k: its best expert (DeepSeek-V2
// group_limited_greedy) or the sum of its best two (DeepSeek-V3 noaux_tc).
enum class MoeGroupScore : uint8_t { kMax, kTopTwoSum };
enum class ExpertActivation : uint8_t {
  kSiluGated,      // down(silu(gate) * up)
  kClampedSwiglu,  // GPT-OSS: g = min(gate, limit), u = clamp(up, +-limit), down((u + 1) * g * sigmoid(alpha g))
};

struct MoeRouting {
  int32_t num_experts = 0;
  int32_t top_k = 0;
  MoeScoring scoring = MoeScoring::kSoftmax;
  int32_t num_groups = 1;  // > 1: pick top_groups groups first, then top_k experts inside them
  int32_t top_groups = 1;
  MoeGroupScore group_score = MoeGroupScore::kMax;
  bool normalize = false;  // divide the top-k weights by their sum (+1e-20)
  float scaling = 1.0f;    // routed_scaling_factor, applied after normalisation
};

// One layer's routed experts. Each array has num_experts views; biases may be null arrays.
struct MoeExperts {
  int32_t num_experts = 0;
  int32_t top_k = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  const WeightView* gate = nullptr;  // [num_experts] x [intermediate, hidden]
  const WeightView* up = nullptr;    // [num_experts] x [intermediate, hidden]
  const WeightView* down = nullptr;  // [num_experts] x [hidden, intermediate]
  const WeightView* gate_bias = nullptr;  // [num_experts] x [1, intermediate] or null
  const WeightView* up_bias = nullptr;
  const WeightView* down_bias = nullptr;  // [num_experts] x [1, hidden] or null
  ExpertActivation activation = ExpertActivation::kSiluGated;
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;
};

// Expert parallelism's dispatch with a fixed number of rows for each destination rank (moe_dispatch):
// the placement, and where the plan goes. Row r of the send buffer is row r % room of destination
// r / room; so every rank sends and receives world * room rows, whatever the routing.
struct ExpertDispatch {
  // Logical expert e's physical slots, ascending: replica_slots[replica_offsets[e] .. replica_offsets[e + 1]).
  const int32_t* replica_offsets = nullptr;  // [num_logical + 1]
  const int32_t* replica_slots = nullptr;    // [num_physical]; slot p sits on rank p / slots_per_rank
  int32_t num_logical = 0;
  int32_t slots_per_rank = 0;
  int32_t world = 1;
  int32_t rank = 0;
  int64_t room = 0;  // rows each destination has: num_tokens * min(top_k, slots_per_rank) at least
  // Outputs. send_slot[r]: the slot, on its destination, of the expert send row r is for, or -1 where
  // the row is empty; row_of_slot[t * top_k + j]: the send row of token t's j-th choice.
  int32_t* send_slot = nullptr;      // [world * room]
  int32_t* row_of_slot = nullptr;    // [num_tokens * top_k]
  int64_t* routed_tokens = nullptr;  // [num_logical]: each logical expert's choices are added; may be null
  // moe_dispatch_scratch_ints ints a device backend plans in (host backends need none).
  int32_t* scratch = nullptr;
};
inline int64_t moe_dispatch_scratch_ints(int64_t num_slots, int32_t world, int64_t room) {
  return int64_t{world} * room + 2 * num_slots;
}

// Products of each head's slice of strided rows with that head's own weight (MLA's absorbed W_UK
// and W_UV): y[t, h, 0:w.rows] = x[t, h, 0:w.cols] @ W_h^T for t < num_rows, h < num_heads, W_h
// being w (head 0's [N, K] matrix) advanced by h * w_head_stride rows. Head h of row t of x starts
// at x + t * x_row_stride + h * x_head_stride floats; likewise y. x rounds to w's dtype as in matmul.
struct HeadProducts {
  const float* x = nullptr;
  int64_t x_row_stride = 0;
  int64_t x_head_stride = 0;
  WeightView w;
  int64_t w_head_stride = 0;
  int32_t num_heads = 0;
  int64_t num_rows = 0;
  float* y = nullptr;
  int64_t y_row_stride = 0;
  int64_t y_head_stride = 0;
};

// MLA attention of a prompt chunk in the expanded form (Backend::mla_expanded_attention): each
// visible key's latent row c (kv_lora_rank) and rope key r (qk_rope_head_dim) expand per head h to
// the key [W_UK_h c ; r] and the value W_UV_h c, where kv_b holds each head's nope rows of W_UK
// and then its v_dim rows of W_UV; then causal attention of q (nope + rope per head, rope applied)
// over them. The same product as the absorbed form, at (nope + rope + v) per (query, key, head)
// instead of 2 kv_lora_rank + rope, plus one expansion per key.
struct MlaExpandedAttention {
  const float* q = nullptr;              // [num_tokens, num_heads, nope + rope]
  const void* latent_cache = nullptr;    // [num_blocks * block_size, kv_lora_rank + rope] of cache_dtype
  DType cache_dtype = DType::kF32;
  KvScales cache_scales = {};            // both the latent row's (K = V)
  WeightView kv_b;                       // [num_heads * (nope + v_dim), kv_lora_rank]
  int32_t num_heads = 0;
  int32_t kv_lora_rank = 0;
  int32_t nope = 0;
  int32_t rope = 0;
  int32_t v_dim = 0;
  float scale = 0.0f;                    // multiplies q.k before the softmax
  float* out = nullptr;                  // [num_tokens, num_heads, v_dim]
};

// sample_rows sums the cumulative probability per chunk of this many token ids, then over the
// chunks: the same bits whether one thread walks the row or each thread of a device block a chunk.
inline constexpr int64_t kCdfChunk = 256;

// One draw of sample_rows: the sampler's settings for one logits row (SamplingParams' filter
// fields, with the engine's draw u = deterministic_uniform(seed, position, sample_index)).
struct SampleParams {
  int32_t row = 0;           // the logits row this draw reads
  int32_t top_k = 0;         // keep the top_k most likely; <= 0 or >= vocab: off; 1: greedy
  double temperature = 1.0;  // 0: greedy
  double top_p = 1.0;        // in (0, 1]; 1: off
  double min_p = 0.0;        // in [0, 1]; 0: off
  double u = 0.0;            // the uniform draw, in [0, 1)
};

// Floats of workspace moe_experts needs for num_tokens tokens (the tail: a device backend's
// per-expert grouping offsets, so the whole call lives in caller-owned memory).
inline int64_t moe_workspace_floats(int64_t num_tokens, const MoeExperts& experts) {
  return num_tokens * experts.top_k * (2 * experts.hidden + 2 * experts.intermediate) + 5 * experts.num_experts + 16;
}

// The rows expert-parallel MoE layers send to other ranks (pack_rows / unpack_rows), a row of width
// floats as payload_row_bytes(dtype, width) bytes: kF32 as is; kBF16 rounded to nearest even; kF8E4M3
// as e4m3 codes (nearest even, saturated at 448) of value / scale, one float32 scale per
// kPayloadBlock values (the block's max |value| / 448, at least FLT_MIN), stored after the codes,
// which are padded to a multiple of 4 bytes; the scale is at most FLT_MAX / 448, so an infinity
// saturates to the largest code instead of turning its block into NaN. DeepSeek dispatches in this
// FP8 layout.
inline constexpr int64_t kPayloadBlock = 128;
inline bool is_payload_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF8E4M3;
}
// Where an FP8 row's scales start, after its padded codes.
inline int64_t payload_scales_offset(int64_t width) { return (width + 3) / 4 * 4; }
inline int64_t payload_row_bytes(DType dtype, int64_t width) {
  if (dtype == DType::kF8E4M3) {
    return payload_scales_offset(width) +
           (width + kPayloadBlock - 1) / kPayloadBlock * static_cast<int64_t>(sizeof(float));
  }
  return width * static_cast<int64_t>(dtype_size_bytes(dtype));
}

#define DEEPINFER_KERNEL_OPS                                                                                  \
  /* Router: scores = softmax or sigmoid of logits [num_tokens, num_experts]; experts are chosen by          \
     scores + selection_bias (DeepSeek-V3's e_score_correction_bias; data may be null), within the best      \
     groups when routing.num_groups > 1 (other groups' experts never chosen); weights are the unbiased       \
     scores of the chosen, normalised and scaled per routing. expert_ids, expert_weights: [num_tokens,       \
     top_k], best first (ties: lower expert id). */                                                          \
  void moe_route(const float* logits, const WeightView& selection_bias, int64_t num_tokens,                 \
                 const MoeRouting& routing, int32_t* expert_ids, float* expert_weights);                     \
                                                                                                              \
  /* out[t] = sum_j expert_weights[t, j] * expert_{expert_ids[t, j]}(x[t]), summed in j order, a negative   \
     id adding nothing (an empty row of expert parallelism's fixed-size exchange). x, out: [num_tokens,      \
     hidden]; workspace: moe_workspace_floats(num_tokens, experts) floats; expert_token_counts:              \
     [num_experts] int64, each expert's routed-token count is added (may be null). */                         \
  void moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights, \
                   const MoeExperts& experts, float* workspace, int64_t* expert_token_counts, float* out);      \
                                                                                                              \
  /* moe_experts' last step on expert outputs computed elsewhere (expert parallelism): out[t] = sum over j    \
     in order of expert_weights[t, j] * y[row_of_slot[t * top_k + j]] (row t * top_k + j when row_of_slot is   \
     null; a negative row adds nothing), summed from 0 as moe_experts sums, so the same outputs give the same  \
     bits. y: [*, hidden]; out: [num_tokens, hidden]. */                                                      \
  void moe_combine(const float* y, const int32_t* row_of_slot, const float* expert_weights, int64_t num_tokens, \
                   int32_t top_k, int64_t hidden, float* out);                                                 \
                                                                                                              \
  /* Expert parallelism's send rows with room rows per destination (ExpertDispatch), planned where the ids    \
     are. Slot s = t * top_k + j (in order) takes the replica of logical expert e = expert_ids[s] numbered     \
     (rank + the earlier slots choosing e) modulo e's replica count, and the next row of that replica's rank;  \
     send row r is x[t] for the slot planned there, zeros where none is. send_rows: [world * room, hidden].   \
     The host's order (model/layers/moe_parallel.cpp), so both exchanges send the same rows. */                 \
  void moe_dispatch(const float* x, int64_t num_tokens, int64_t hidden, const int32_t* expert_ids,             \
                    int32_t top_k, const ExpertDispatch& dispatch, float* send_rows);                          \
                                                                                                              \
  /* token_ids[i] = the token draw params[i] picks from logits row params[i].row ([*, vocab] f32, each row     \
     with a finite value): greedy (temperature 0 or top_k 1) is the highest logit, the lowest id among ties;   \
     else probabilities exp((logit - max) / temperature) in float64, then min_p, top_k, top_p (vLLM's order;   \
     ranks by logit, then lower id first) and the first kept token, in id order, whose float64 cumulative      \
     probability exceeds u times the kept total, summed per chunk of kCdfChunk ids and then over the chunks     \
     (the contract of sampling/sampler.h's sample_token). */                                                    \
  void sample_rows(const float* logits, int64_t vocab, const SampleParams* params, int64_t num_draws,            \
                   int32_t* token_ids);                                                                         \
                                                                                                              \
  /* dst[r * width + i] = src[row_of[r] * width + i] for i < width where row_of[r] >= 0 (row r of src when    \
     row_of is null); the other rows are kept. src and dst do not overlap. */                                  \
  void gather_rows(const int32_t* src, const int32_t* row_of, int64_t num_rows, int64_t width, int32_t* dst);    \
                                                                                                              \
  /* dst[r * dst_stride + i] = src[r * src_stride + i] for r < num_rows, i < width (no overlap). */           \
  void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst,          \
                 int64_t dst_stride);                                                                        \
                                                                                                              \
  /* num_rows rows of width floats into payload_row_bytes(dtype, width) bytes each (kF32, kBF16 or            \
     kF8E4M3, as that layout says), and back: unpack_rows(pack_rows(x)) is x rounded to dtype. */             \
  void pack_rows(const float* x, int64_t num_rows, int64_t width, DType dtype, void* out);                    \
  void unpack_rows(const void* packed, int64_t num_rows, int64_t width, DType dtype, float* out);             \
                                                                                                              \
  /* out[t, :] = table[token_ids[t], :] as float32. out: [num_tokens, table.cols] */                          \
  void embedding(const WeightView& table, const int32_t* token_ids, int64_t num_tokens, float* out);          \
                                                                                                              \
  /* out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * (weight + weight_offset). x, out: [num_rows, dim];   \
     weight: [1, dim]. out may alias x. */                                                                    \
  void rms_norm(const float* x, const WeightView& weight, float weight_offset, int64_t num_rows, int64_t dim,  \
                float eps, float* out);                                                                       \
                                                                                                              \
  /* out[r, :] = (x[r, :] - mean) / sqrt(var + eps) * weight + bias, mean and the biased variance of the row  \
     in float64 (LayerNorm). x, out: [num_rows, dim]; weight, bias: [1, dim]. out may alias x. */             \
  void layer_norm(const float* x, const WeightView& weight, const WeightView& bias, int64_t num_rows,         \
                  int64_t dim, float eps, float* out);                                                        \
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
  /* out[i] = gelu_tanh(gate[i]) * up[i] (PyTorch's gelu approximate="tanh", Gemma's GeGLU); out may       \
     alias gate or up. */                                                                                     \
  void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* out);                          \
                                                                                                              \
  /* out[i] = gelu(gate[i]) * up[i], the exact GELU x * (1 + erf(x / sqrt(2))) / 2 (PyTorch's nn.GELU(), the    \
     Qwen2-VL patch merger's); out may alias gate or up. */                                                      \
  void gelu_mul(const float* gate, const float* up, int64_t count, float* out);                               \
                                                                                                              \
  /* out[i] = a[i] + b[i]; out may alias a or b. */                                                           \
  void add(const float* a, const float* b, int64_t count, float* out);                                        \
                                                                                                              \
  /* out[i] = x[i] * factor; out may alias x. */                                                              \
  void scale(const float* x, int64_t count, float factor, float* out);                                        \
                                                                                                              \
  /* out[i] = tanh(x[i] / cap) * cap (logit soft-capping, cap > 0); out may alias x. */                       \
  void softcap(const float* x, int64_t count, float cap, float* out);                                         \
                                                                                                              \
  /* Copies new K/V rows into the cache: cache row slot_mapping[t] (= block_id * block_size + offset)         \
     gets k[t, :] / v[t, :] as cache_dtype elements (kF32, kBF16, kF8E4M3 with scales: KvScales). k, v:       \
     [num_tokens, kv_dim]; caches: [num_blocks * block_size, kv_dim]. A negative slot skips token t (a        \
     replayed token whose KV is already cached). */                                                           \
  void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens,             \
                int64_t kv_dim, DType cache_dtype, KvScales scales, void* k_cache, void* v_cache);            \
                                                                                                              \
  /* Causal (optionally sliding-window, optionally with sinks) grouped-query attention of the batch's new     \
     tokens over the cache. q, out: [num_tokens, num_heads, head_dim]; caches: [num_blocks, block_size,       \
     num_kv_heads, head_dim] of params.cache_dtype, read back as write_kv wrote them. Each token's result     \
     depends only on its own sequence (batch invariant). */                                                   \
  void paged_attention(const float* q, const void* k_cache, const void* v_cache, const PagedBatch& batch,     \
                       const AttentionParams& params, float* out);

namespace ref {
DEEPINFER_KERNEL_OPS
}  // namespace ref

namespace cpu {
DEEPINFER_KERNEL_OPS
}  // namespace cpu

}  // namespace deepinfer::kernels
