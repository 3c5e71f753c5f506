// Grouped-query self-attention over the paged KV cache: q/k/v projections (optional biases; one
// stacked product on device backends), optional per-head QK RMSNorm (Qwen3, Gemma 3), rope, cache
// write (one Backend::attention_front_end), paged attention (optional sliding window, sinks and
// softmax scale), output projection.
#pragma once

#include <optional>
#include <string>

#include "model/layers/linear.h"
#include "model/layers/rope.h"

namespace deepinfer {

// A ForwardBatch copied to the backend, plus its kernels::PagedBatch view.
struct DeviceBatch {
  DeviceBuffer token_ids;     // [num_tokens] i32
  DeviceBuffer positions;     // [num_tokens] i32
  DeviceBuffer mrope_positions;  // [2, num_tokens] i32 or empty (ForwardBatch::mrope_positions)
  DeviceBuffer slot_mapping;  // [num_tokens] i32
  DeviceBuffer query_start;   // [num_seqs + 1] i32
  DeviceBuffer seq_len;       // [num_seqs] i32
  DeviceBuffer block_table;   // [num_seqs, max_blocks_per_seq] i32
  kernels::PagedBatch paged;
  // The sliding-window layers' own tables when the cache keeps them apart (ForwardBatch's
  // swa_* fields); swa_paged.block_table is null otherwise and those layers use paged.
  DeviceBuffer swa_slot_mapping;  // [num_tokens] i32
  DeviceBuffer swa_block_table;   // [num_seqs, max_blocks_per_seq] i32
  DeviceBuffer swa_seq_len;       // [num_seqs] i32, a replay's (ForwardBatch::swa_seq_len)
  kernels::PagedBatch swa_paged;
  int64_t num_tokens = 0;
  // ForwardBatch::embedding_rows, their floats in the same buffer.
  struct EmbeddingRows {
    int32_t first_token = 0;
    int32_t num_tokens = 0;
    const float* rows = nullptr;
    int32_t num_sets = 1;  // set s at rows + s * num_tokens * hidden (ForwardBatch::EmbeddingRows)
  };
  std::vector<EmbeddingRows> embedding_rows;
  // The step's draws when they came with it (StepInputs), in the same buffer; null otherwise.
  const kernels::SampleParams* draws = nullptr;
  // What finish_inputs (model/step_inputs.h) does on the device before the forward. Input tokens
  // taken from the draws of the step before: those draws, null when it takes none, and per token
  // the draw or -1.
  const int32_t* take_from = nullptr;
  const int32_t* draw_of_token = nullptr;
  // A block table kept on the device between steps (null when the step brought its whole table):
  // its table_rows rows are copied to scratch, then row s < rows is rebuilt from row source[s] of
  // scratch (a row of the last step; or past the table's rows, a row this step sent), or kept when
  // source[s] is -1.
  struct TableRebuild {
    int32_t* table = nullptr;
    int32_t* scratch = nullptr;
    const int32_t* source = nullptr;
    int32_t table_rows = 0;
    int32_t rows = 0;
    int32_t width = 0;
  } rebuild;

  static DeviceBatch upload(Backend& backend, const ForwardBatch& batch, int32_t block_size);
};

struct AttentionOptions {
  bool qkv_bias = false;
  bool o_bias = false;
  bool qk_norm = false;
  float qk_norm_weight_offset = 0.0f;  // Gemma's (1 + w) norms: 1
  int32_t sliding_window = 0;
  // The softmax scale's denominator when it is not head_dim: scale = query_pre_attn_scalar^-0.5 (Gemma).
  std::optional<double> query_pre_attn_scalar;
  bool sinks = false;  // GPT-OSS: <prefix>.sinks [num_heads], one extra softmax logit per head
};

// The scales of one layer's fp8 KV cache (kernels::KvScales), on the backend and on the host.
struct KvCacheScales {
  DeviceBuffer k, v;  // [kv_dim] floats each; empty: every scale is 1
  std::vector<float> host_k, host_v;

  kernels::KvScales view() const { return {k.as<float>(), v.as<float>()}; }
  // For a kF8E4M3 cache: the checkpoint's <prefix>.k_scale and .v_scale (one scale, one per kv
  // head or one per column: vLLM's and llm-compressor's fp8 checkpoints) or <prefix>.kv_scale for
  // both; without them every scale is 1 (values past 448 saturate). Other caches take none.
  // keys_are_values (MLA's latent row): k_scale (or kv_scale) serves both, as vLLM's MLA cache
  // write takes it; v_scale is not read.
  static Result<KvCacheScales> load(const ModelSource& source, const std::string& prefix, DType cache_dtype,
                                    int32_t num_kv_heads, int32_t head_dim, bool keys_are_values = false);
  // Multiplies count codes widened to float32 (whole cache rows) by their columns' scales.
  static void apply(const std::vector<float>& scales, size_t count, float* values);
};

class AttentionLayer {
 public:
  // prefix: e.g. "model.layers.3.self_attn"
  static Result<AttentionLayer> load(const ModelSource& source, const std::string& prefix,
                                     const AttentionOptions& options, const RopeTable& rope);

  int64_t kv_dim() const { return static_cast<int64_t>(params_.num_kv_heads) * params_.head_dim; }
  int32_t sliding_window() const { return params_.sliding_window; }
  int64_t q_dim() const { return static_cast<int64_t>(params_.num_heads) * params_.head_dim; }
  int64_t weight_bytes() const;
  // The cache's element type (Backend::kv_cache_dtype of the weights) and one token's K and V bytes.
  DType kv_cache_dtype() const { return params_.cache_dtype; }
  int64_t kv_bytes_per_token() const { return 2 * kv_dim() * static_cast<int64_t>(dtype_size_bytes(params_.cache_dtype)); }
  // Sliding-window layers size their cache by shape.num_swa_blocks when it is non-zero.
  void allocate_kv_cache(Backend& backend, const KvCacheShape& shape);
  bool uses_swa_tables(const KvCacheShape& shape) const {
    return params_.sliding_window > 0 && shape.num_swa_blocks > 0;
  }
  // One block's K then V rows: 2 * block_size * kv_dim floats. A bf16 cache widens its values to
  // float32 on the way out (exact) and rounds to nearest even on the way in.
  int64_t kv_floats_per_block() const { return 2 * block_size_ * kv_dim(); }
  void copy_kv_block(Backend& backend, int32_t src_block, int32_t dst_block) const;
  void read_kv_block(Backend& backend, int32_t block, float* host) const;
  // Appends where block's K and V go when a host page holds them as float32 from src_offset on.
  void kv_block_pieces(int32_t block, size_t src_offset, std::vector<HostPiece>& pieces) const;
  // The same block in the cache's own element type (the KV store's pages): kv_bytes_per_block()
  // bytes, K then V, moved without conversion.
  int64_t kv_bytes_per_block() const { return 2 * static_cast<int64_t>(block_bytes()); }
  void read_kv_block_raw(Backend& backend, int32_t block, uint8_t* host) const;
  void raw_kv_block_pieces(int32_t block, size_t src_offset, std::vector<HostPiece>& pieces) const;

  // x: [num_tokens, hidden] normalised input; out: [num_tokens, hidden]. scratch holds at least
  // scratch_floats(num_tokens) floats.
  void forward(Backend& backend, const DeviceBatch& batch, const float* x, float* scratch, float* out) const;
  int64_t scratch_floats(int64_t num_tokens) const { return num_tokens * (3 * q_dim() + 2 * kv_dim()); }
  // The same on the residual stream (ResidualStream): residual += forward(norm(residual)). Only
  // where takes_residual_stream(): q|k|v stacked and no biases.
  bool takes_residual_stream() const {
    return qkv_.has_value() && qkv_bias_.data == nullptr && o_proj_.bias.data == nullptr;
  }
  DType weight_dtype() const { return qkv_ ? qkv_->dtype : q_proj_.weight.dtype; }
  void forward_residual(Backend& backend, const DeviceBatch& batch, const ResidualStream& stream,
                        float* scratch) const;

 private:
  Linear q_proj_, k_proj_, v_proj_, o_proj_;
  // [q_dim + 2 * kv_dim, hidden]: q, k and v stacked at load (Backend::load_stacked_weight, or
  // load_stacked_packed_weight for FP8; device backends), one product for all three, with their
  // biases stacked alike in qkv_bias_ (data null without). q/k/v_proj_ are then empty.
  std::optional<kernels::WeightView> qkv_;
  kernels::WeightView qkv_bias_;
  std::optional<RmsNorm> q_norm_, k_norm_;
  kernels::AttentionParams params_;
  size_t block_bytes() const;  // one block of K (or of V) in the cache
  // The front end and attention over q, k and v as forward's products leave them in scratch;
  // returns attention's output ([num_tokens, q_dim], in scratch).
  float* attend(Backend& backend, const DeviceBatch& batch, float* scratch) const;
  int32_t rotary_dim_ = 0;
  float rope_attention_scaling_ = 1.0f;
  DeviceBuffer inv_freq_;  // [rotary_dim / 2] f32
  // M-RoPE (RopeTable::mrope_axis): inv_freq_ with every entry outside the temporal, height or
  // width section zeroed. A zero frequency leaves its pair as it is, so rotating by each in turn
  // with its own positions is M-RoPE, exactly.
  DeviceBuffer mrope_inv_freq_[3];
  DeviceBuffer sinks_;     // [num_heads] f32, when the layer has sinks
  KvCacheScales cache_scales_;  // params_.cache_scales' buffers
  bool swa_tables_ = false;  // reads the batch's sliding-window tables
  DeviceBuffer k_cache_, v_cache_;  // [num_blocks * block_size, kv_dim] of params_.cache_dtype
  int32_t block_size_ = 0;
};

}  // namespace deepinfer
