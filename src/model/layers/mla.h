// Multi-head latent attention (DeepSeek-V2/V3) in its serving form: the KV cache keeps one
// compressed row per token (kv_lora_rank latent + qk_rope_head_dim rope key, shared by all
// heads); attention runs over the latent with W_UK absorbed into the query and W_UV applied to
// the attended latent, so K/V are never expanded per head. Prompt chunks, whose queries outnumber
// what one expansion of the keys costs, take the expanded form where the backend offers it
// (Backend::mla_expanded_attention).
#pragma once

#include <optional>
#include <string>

#include "model/layers/attention.h"

namespace deepinfer {

struct MlaOptions {
  int32_t num_heads = 0;
  int64_t q_lora_rank = 0;  // 0: a plain q_proj (DeepSeek-V2-Lite)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool attention_bias = false;  // biases on q_a_proj / kv_a_proj_with_mqa / o_proj
  float softmax_scale = 0.0f;   // (nope + rope)^-0.5 times yarn's mscale correction when configured
  kernels::RopeLayout rope_layout = kernels::RopeLayout::kInterleaved;
};

// MLA shapes from config.json, and the softmax scale: (nope + rope)^-0.5, times mscale^2 with
// mscale = 0.1 * mscale_all_dim * ln(factor) + 1 under yarn scaling when mscale_all_dim is set
// (DeepSeek's attention-scale correction).
Result<MlaOptions> mla_options_from_config(const ModelConfig& config);

class MlaLayer {
 public:
  // prefix: e.g. "model.layers.3.self_attn"; rope: the table over qk_rope_head_dim.
  static Result<MlaLayer> load(const ModelSource& source, const std::string& prefix, const MlaOptions& options,
                               const RopeTable& rope);

  // Floats one token's cache row holds: kv_lora_rank + qk_rope_head_dim.
  int64_t kv_row_floats() const { return options_.kv_lora_rank + options_.qk_rope_head_dim; }
  int64_t weight_bytes() const;
  // The cache's element type (Backend::kv_cache_dtype of the weights) and one token's bytes.
  DType kv_cache_dtype() const { return cache_dtype_; }
  int64_t kv_bytes_per_token() const { return kv_row_floats() * static_cast<int64_t>(dtype_size_bytes(cache_dtype_)); }
  void allocate_kv_cache(Backend& backend, const KvCacheShape& shape);
  // One block's latent rows as float32 (a bf16 cache widens them on the way out, exactly, and
  // rounds to nearest even on the way in).
  int64_t kv_floats_per_block() const { return block_size_ * kv_row_floats(); }
  void copy_kv_block(Backend& backend, int32_t src_block, int32_t dst_block) const;
  void read_kv_block(Backend& backend, int32_t block, float* host) const;
  void kv_block_pieces(int32_t block, size_t src_offset, std::vector<HostPiece>& pieces) const;
  // The same block in the cache's own element type (the KV store's pages).
  int64_t kv_bytes_per_block() const { return block_size_ * kv_bytes_per_token(); }
  void read_kv_block_raw(Backend& backend, int32_t block, uint8_t* host) const;
  void raw_kv_block_pieces(int32_t block, size_t src_offset, std::vector<HostPiece>& pieces) const;
  int64_t scratch_floats(int64_t num_tokens) const;

  // x: [num_tokens, hidden] normalised input; out: [num_tokens, hidden].
  void forward(Backend& backend, const DeviceBatch& batch, const float* x, float* scratch, float* out) const;

 private:
  int64_t q_head_dim() const { return options_.qk_nope_head_dim + options_.qk_rope_head_dim; }

  MlaOptions options_;
  std::optional<Linear> q_proj_;             // [heads * q_head_dim, hidden] when q_lora_rank == 0
  std::optional<Linear> q_a_proj_, q_b_proj_;  // [q_lora_rank, hidden], [heads * q_head_dim, q_lora_rank]
  std::optional<RmsNorm> q_a_norm_;
  Linear kv_a_proj_;  // [kv_lora_rank + rope, hidden]
  RmsNorm kv_a_norm_;
  Linear kv_b_proj_;  // [heads * (nope + v), kv_lora_rank]
  Linear o_proj_;     // [hidden, heads * v]
  // Head 0's matrices of the per-head products (kernels::HeadProducts): W_UK transposed
  // ([kv_lora_rank, nope], heads back to back), and W_UV ([v, kv_lora_rank] rows of kv_b_proj,
  // nope + v rows apart).
  kernels::WeightView w_uk_t_;
  kernels::WeightView w_uv_;
  int32_t rotary_dim_ = 0;
  float rope_attention_scaling_ = 1.0f;
  DeviceBuffer inv_freq_;  // [rotary_dim / 2] f32
  DType cache_dtype_ = DType::kF32;
  KvCacheScales cache_scales_;  // one scale per column for K = V: cache_scales_.k serves both
  DeviceBuffer cache_;  // [num_blocks * block_size, kv_lora_rank + rope] of cache_dtype_
  int32_t block_size_ = 0;
};

}  // namespace deepinfer
