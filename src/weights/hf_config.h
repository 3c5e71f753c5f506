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

  bool operator==(const RopeConfig&) const = default;
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
