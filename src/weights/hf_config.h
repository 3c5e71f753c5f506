// A Hugging Face config.json, parsed into the fields the engine uses. Accepts the current
// transformers format (rope_parameters, dtype) and the older one (rope_scaling, rope_theta,
// torch_dtype) found on most published checkpoints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/result.h"

namespace deepinfer {

enum class RopeType : uint8_t { kDefault, kLinear, kDynamic, kLlama3, kYarn };

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;  // 0: unset
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> attention_factor;  // yarn's mscale override
  double mscale = 0.0;                     // DeepSeek's yarn variant: mscale / mscale_all_dim
  double mscale_all_dim = 0.0;
  bool truncate = true;                    // yarn: round the correction range (transformers default)
  double partial_rotary_factor = 1.0;
  // M-RoPE (Qwen2-VL): the rotary frequencies in consecutive sections taking the temporal, height
  // and width positions; empty: one position for all.
  std::vector<int64_t> mrope_section;
  // Qwen3-VL: the sections interleaved (frequency i takes the height position when i % 3 == 1 and
  // i < 3 x its section, the width position when i % 3 == 2 and i < 3 x its section, else the
  // temporal one) instead of consecutive.
  bool mrope_interleaved = false;

  bool operator==(const RopeConfig&) const = default;
};

// Mixture-of-experts fields under every spelling the families use (DeepSeek, Qwen, Mixtral, GPT-OSS).
struct MoeConfig {
  int64_t num_experts = 0;            // n_routed_experts | num_experts | num_local_experts
  int64_t num_experts_per_tok = 0;    // num_experts_per_tok | experts_per_token
  int64_t moe_intermediate_size = 0;  // moe_intermediate_size, else intermediate_size
  int64_t num_shared_experts = 0;     // n_shared_experts
  int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = false;
  std::string scoring_func = "softmax";  // softmax | sigmoid
  std::string topk_method = "greedy";    // greedy | group_limited_greedy | noaux_tc
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  // Which layers are MoE: i >= first_k_dense_replace, i % moe_layer_freq == 0 (DeepSeek),
  // (i + 1) % decoder_sparse_step == 0 and i not in mlp_only_layers (Qwen).
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;

  bool is_moe_layer(int64_t layer) const;
};

// Multi-head latent attention (DeepSeek-V2/V3).
struct MlaConfig {
  std::optional<int64_t> q_lora_rank;  // null: a plain q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
};

// quantization_config of FP8 block-scaled checkpoints (DeepSeek-V3): weight = fp8 * weight_scale_inv
// per [block_rows, block_cols] block.
struct Fp8Config {
  int64_t block_rows = 128;
  int64_t block_cols = 128;
};

// vision_config of an image-text checkpoint whose image encoder is a SigLIP tower (Gemma 3; its
// model_type siglip_vision_model), transformers' defaults where a field is absent, and the top-level
// fields of Gemma 3's projector and image tokens. Only field types are checked here, so a text-only
// load never fails on the tower's shape; the tower checks its shape when it loads.
struct VisionConfig {
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t num_channels = 3;
  int64_t image_size = 224;
  int64_t patch_size = 16;
  double layer_norm_eps = 1e-6;
  std::string hidden_act = "gelu_pytorch_tanh";
  int64_t mm_tokens_per_image = 256;      // rows an image becomes in the text model
  std::optional<int64_t> image_token_id;  // image_token_index (or image_token_id)

  int64_t patches_per_side() const { return image_size / patch_size; }  // floored, as transformers does
  int64_t num_patches() const { return patches_per_side() * patches_per_side(); }
};

// vision_config of a Qwen2.5-VL (model_type qwen2_5_vl) or Qwen3-VL (qwen3_vl) checkpoint,
// transformers' defaults where a field is absent, and the top-level image token ids. As for
// VisionConfig, only types are checked here; the tower checks its shape when it loads.
struct Qwen2VlVisionConfig {
  // Qwen3-VL's tower: LayerNorm blocks with a GELU MLP, learned position embeddings interpolated to
  // the grid, no windows, and DeepStack mergers.
  bool qwen3 = false;
  int64_t num_position_embeddings = 0;                 // Qwen3-VL: a square grid of learned positions
  std::vector<int64_t> deepstack_visual_indexes = {};  // Qwen3-VL: the blocks DeepStack reads
  int64_t depth = 32;
  int64_t hidden_size = 3584;  // the tower's width (published checkpoints: 1280)
  int64_t intermediate_size = 3420;
  int64_t num_heads = 16;
  int64_t in_channels = 3;  // in_channels, or the older in_chans
  int64_t patch_size = 14;
  int64_t temporal_patch_size = 2;
  int64_t spatial_merge_size = 2;
  int64_t window_size = 112;  // pixels a side of a windowed block's attention window
  std::vector<int64_t> fullatt_block_indexes = {7, 15, 23, 31};
  int64_t out_hidden_size = 3584;  // the merger's output: the text model's width
  std::string hidden_act = "silu";
  double rope_theta = 10000.0;
  // Qwen2VLImageProcessor's bounds on an image's resized pixel count (its defaults, or the
  // directory's preprocessor_config.json when ModelConfig::load finds one).
  int64_t min_pixels = 56 * 56;
  int64_t max_pixels = 28 * 28 * 1280;
  std::vector<double> image_mean = {0.48145466, 0.4578275, 0.40821073};  // OpenAI CLIP's (Qwen3-VL: 0.5)
  std::vector<double> image_std = {0.26862954, 0.26130258, 0.27577711};
  std::optional<int64_t> image_token_id;
  std::optional<int64_t> vision_start_token_id;
  std::optional<int64_t> vision_end_token_id;
};

struct ModelConfig {
  std::string architecture;  // architectures[0], e.g. "LlamaForCausalLM"
  std::string model_type;    // e.g. "llama"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads when absent
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  // The sliding-window layers' own RoPE where it differs (Gemma 3: rope_parameters keyed by
  // layer type, or the older rope_local_base_freq); those layers use rope when absent.
  std::optional<RopeConfig> sliding_rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections have biases (Qwen2 always does)
  // Per-layer sliding window: 0 = full attention. Filled from sliding_window together with
  // use_sliding_window / max_window_layers (Qwen2) or layer_types (newer configs).
  std::vector<int32_t> layer_sliding_window;
  // Gemma: the softmax scale is query_pre_attn_scalar^-0.5 instead of head_dim^-0.5.
  std::optional<double> query_pre_attn_scalar;
  // Gemma: logits = tanh(logits / c) * c when set.
  std::optional<double> final_logit_softcapping;
  // The MLP's activation: hidden_activation (Gemma) or hidden_act, e.g. "silu", "gelu_pytorch_tanh".
  std::string hidden_activation = "silu";
  std::optional<MoeConfig> moe;  // set when the config names a number of experts
  std::optional<MlaConfig> mla;  // set when the config has kv_lora_rank
  std::optional<Fp8Config> fp8;  // set for quantization_config.quant_method "fp8"
  bool mxfp4_experts = false;    // quantization_config.quant_method "mxfp4" (GPT-OSS's published experts)
  std::optional<VisionConfig> vision;    // set for a SigLIP vision_config
  std::optional<Qwen2VlVisionConfig> qwen2_vl_vision;  // set for a Qwen2.5-VL vision_config
  int64_t num_nextn_predict_layers = 0;  // DeepSeek-V3's MTP layers after the decoder layers
  std::optional<DType> dtype;  // "dtype" or "torch_dtype"
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
  nlohmann::json raw;  // the whole file, for architecture-specific fields

  // Reads config.json in dir. Errors name the file and the field: "config.json: field
  // 'hidden_size' must be a positive integer, got \"abc\"".
  static Result<ModelConfig> load(const std::string& dir);
  static Result<ModelConfig> parse(const std::string& json_text, const std::string& source_name);
};

}  // namespace deepinfer
