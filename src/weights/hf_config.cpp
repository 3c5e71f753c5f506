// config.json -> ModelConfig. The defaults and per-family rules (sliding-window layers, q/k/v
// biases, tied embeddings) follow the transformers configuration classes of each model type.
#include "weights/hf_config.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <string_view>
#include <tuple>

#include "core/mapped_file.h"
#include "weights/hf_config_moe.h"
#include "weights/json_fields.h"

namespace deepinfer {
namespace {

using nlohmann::json;

constexpr const char* kSupportedRopeTypes = "default, linear, dynamic, llama3, yarn";
constexpr double kDefaultRopeTheta = 10000.0;
// transformers' default max_window_layers for Qwen2, Qwen2-MoE and Qwen3.
constexpr int64_t kDefaultMaxWindowLayers = 28;
// Gemma 3 configs without layer_types: every 6th layer is global.
constexpr int64_t kDefaultGemma3Pattern = 6;
// Per-layer tables are sized from num_hidden_layers before any weight is read; published models
// have at most a few hundred layers, so a larger count is a corrupt file, not a model.
constexpr int64_t kMaxLayers = 65536;

std::optional<RopeType> find_rope_type(std::string_view name) {
  // Qwen2-VL's published configs say "mrope": default frequencies over M-RoPE's sections
  // (transformers reads it as "default" too).
  if (name == "default" || name == "mrope") return RopeType::kDefault;
  if (name == "linear") return RopeType::kLinear;
  if (name == "dynamic") return RopeType::kDynamic;
  if (name == "llama3") return RopeType::kLlama3;
  if (name == "yarn") return RopeType::kYarn;
  return std::nullopt;
}

bool is_one_of(std::string_view value, std::initializer_list<std::string_view> options) {
  for (std::string_view option : options) {
    if (value == option) return true;
  }
  return false;
}

// One RoPE object: rope_parameters (new format) or rope_scaling (old). `own` reads only the
// object; `shared` also reads the enclosing config, where the old format keeps rope_theta,
// partial_rotary_factor and original_max_position_embeddings.
Result<RopeConfig> parse_rope_object(const JsonFields& own, const JsonFields& shared, double default_theta) {
  RopeConfig rope;
  const char* type_key = own.has("rope_type") || !own.has("type") ? "rope_type" : "type";
  std::optional<std::string> type_name;
  DI_ASSIGN(type_name, own.optional_string(type_key));
  const std::optional<RopeType> type = find_rope_type(type_name.value_or("default"));
  if (!type) {
    return own.error("field '" + own.path(type_key) + "' is \"" + *type_name +
                     "\", which deepinfer does not support; supported RoPE types: " + kSupportedRopeTypes);
  }
  rope.type = *type;
  DI_ASSIGN(rope.theta, shared.positive_number("rope_theta", default_theta));
  DI_ASSIGN(rope.partial_rotary_factor, shared.positive_number("partial_rotary_factor", 1.0));
  std::optional<int64_t> original_max;
  DI_ASSIGN(original_max, shared.optional_positive_int("original_max_position_embeddings"));
  rope.original_max_position_embeddings = original_max.value_or(0);
  DI_ASSIGN(rope.mrope_section, own.non_negative_int_or_list("mrope_section"));
  DI_ASSIGN(rope.mrope_interleaved, own.boolean("mrope_interleaved", false));

  if (rope.type != RopeType::kDefault && !own.has("factor")) return own.missing("factor");
  DI_ASSIGN(rope.factor, own.positive_number("factor", 1.0));
  if (rope.type == RopeType::kLlama3) {
    for (const char* key : {"low_freq_factor", "high_freq_factor"}) {
      if (!own.has(key)) return own.missing(key);
    }
    if (!original_max) return own.missing("original_max_position_embeddings");
    DI_ASSIGN(rope.low_freq_factor, own.positive_number("low_freq_factor", 1.0));
    DI_ASSIGN(rope.high_freq_factor, own.positive_number("high_freq_factor", 4.0));
  }
  if (rope.type == RopeType::kYarn) {
    DI_ASSIGN(rope.beta_fast, own.positive_number("beta_fast", 32.0));
    DI_ASSIGN(rope.beta_slow, own.positive_number("beta_slow", 1.0));
    DI_ASSIGN(rope.attention_factor, own.optional_number("attention_factor"));
    DI_ASSIGN(rope.mscale, own.number("mscale", 0.0));
    DI_ASSIGN(rope.mscale_all_dim, own.number("mscale_all_dim", 0.0));
    DI_ASSIGN(rope.truncate, own.boolean("truncate", true));
  }
  return rope;
}

// Fills rope and sliding_rope. Formats: rope_scaling + top-level rope_theta (old, and it wins
// as in transformers), rope_parameters (new), rope_parameters keyed by layer type (new Gemma 3),
// rope_local_base_freq for the sliding layers (old Gemma 3).
Result<void> parse_rope(const JsonFields& fields, const std::string& source, ModelConfig& config) {
  static const json kEmpty = json::object();
  const char* key = fields.has("rope_scaling") ? "rope_scaling" : "rope_parameters";
  const json* object = fields.find(key);
  if (object == nullptr) object = &kEmpty;
  if (!object->is_object()) return fields.invalid(key, "an object", *object);
  const std::string prefix = fields.path(key) + ".";

  std::optional<double> local_theta;
  DI_ASSIGN(local_theta, fields.optional_number("rope_local_base_freq"));
  const auto is_layer_type_key = [&](const char* name) {
    return object->contains(name) && (*object)[name].is_object();
  };
  if (!is_layer_type_key("full_attention") && !is_layer_type_key("sliding_attention")) {
    JsonFields own(source, *object, prefix);
    JsonFields shared = own;
    shared.add_fallback(fields);
    DI_ASSIGN(config.rope, parse_rope_object(own, shared, kDefaultRopeTheta));
    if (local_theta) {
      if (!(*local_theta > 0.0)) return fields.invalid("rope_local_base_freq", "a positive number", *local_theta);
      RopeConfig local;
      local.theta = *local_theta;
      local.partial_rotary_factor = config.rope.partial_rotary_factor;
      config.sliding_rope = local;
    }
    return {};
  }
  for (const char* layer_type : {"full_attention", "sliding_attention"}) {
    const json& sub = is_layer_type_key(layer_type) ? (*object)[layer_type] : kEmpty;
    JsonFields own(source, sub, prefix + layer_type + ".");
    const bool sliding = std::string_view(layer_type) == "sliding_attention";
    RopeConfig rope;
    DI_ASSIGN(rope, parse_rope_object(own, own, sliding ? local_theta.value_or(kDefaultRopeTheta) : kDefaultRopeTheta));
    if (sliding) {
      if (is_layer_type_key(layer_type)) config.sliding_rope = rope;
    } else {
      config.rope = rope;
    }
  }
  return {};
}

// Which layers use the sliding window, per model family (see each transformers config class).
Result<std::vector<int32_t>> parse_sliding_windows(const JsonFields& fields, std::string_view model_type,
                                                   int64_t num_layers) {
  std::vector<int32_t> windows(static_cast<size_t>(num_layers), 0);
  std::optional<int64_t> window;
  DI_ASSIGN(window, fields.optional_non_negative_int("sliding_window"));
  if (window && *window > INT32_MAX) return fields.invalid("sliding_window", "at most 2147483647", *window);
  // Qwen models carry sliding_window even when off; use_sliding_window gates it.
  const bool qwen =
      is_one_of(model_type, {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_5_vl", "qwen2_5_vl_text"}) ||
      fields.has("use_sliding_window");
  if (qwen) {
    bool use_sliding_window = false;
    DI_ASSIGN(use_sliding_window, fields.boolean("use_sliding_window", false));
    if (!use_sliding_window) window.reset();
  }
  if (!window || *window == 0) return windows;

  std::optional<int64_t> max_window_layers;
  DI_ASSIGN(max_window_layers, fields.optional_non_negative_int("max_window_layers"));
  const int64_t first_dense = max_window_layers.value_or(kDefaultMaxWindowLayers);
  std::optional<int64_t> pattern;
  DI_ASSIGN(pattern, fields.optional_positive_int("sliding_window_pattern"));
  if (!pattern && model_type.starts_with("gemma3")) pattern = kDefaultGemma3Pattern;
  if (!pattern && is_one_of(model_type, {"gemma2", "gpt_oss"})) pattern = 2;

  const json* layer_types = fields.find("layer_types");
  if (layer_types != nullptr) {
    bool valid = layer_types->is_array() && static_cast<int64_t>(layer_types->size()) == num_layers;
    for (size_t i = 0; valid && i < layer_types->size(); ++i) valid = (*layer_types)[i].is_string();
    if (!valid) {
      return fields.invalid("layer_types", "a list of " + std::to_string(num_layers) + " strings (one per layer)",
                            *layer_types);
    }
  }
  for (int64_t i = 0; i < num_layers; ++i) {
    bool sliding = true;  // Mistral, Mixtral, Phi-3, Qwen3-MoE: every layer
    if (layer_types != nullptr) {
      sliding = (*layer_types)[static_cast<size_t>(i)] == "sliding_attention";
    } else if (model_type == "qwen2_moe") {
      sliding = (i + 1) % 2 != 0 && i < first_dense;
    } else if (qwen && model_type != "qwen3_moe") {
      sliding = i >= first_dense;
    } else if (pattern) {
      sliding = (i + 1) % *pattern != 0;
    }
    if (sliding) windows[static_cast<size_t>(i)] = static_cast<int32_t>(*window);
  }
  return windows;
}

// Gemma3TextConfig's defaults: the text_config of multimodal Gemma 3 checkpoints lists only the
// fields that differ from them.
const json& gemma3_text_defaults() {
  static const json kDefaults = {
      {"vocab_size", 262208}, {"hidden_size", 2304}, {"intermediate_size", 9216}, {"num_hidden_layers", 26},
      {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"head_dim", 256},
      {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0},
      {"rope_local_base_freq", 10000.0}, {"query_pre_attn_scalar", 256}, {"sliding_window", 4096},
      {"hidden_activation", "gelu_pytorch_tanh"}};
  return kDefaults;
}

// Gemma's attention and output options. Attention-logit soft-capping (Gemma 2) is refused rather
// than silently ignored.
Result<void> parse_gemma_options(const JsonFields& fields, ModelConfig& config) {
  std::optional<double> value;
  DI_ASSIGN(value, fields.optional_number("attn_logit_softcapping"));
  if (value) {
    return fields.error("field '" + fields.path("attn_logit_softcapping") +
                        "' is set; attention-logit soft-capping is not supported (remove it or set it to null)");
  }
  DI_ASSIGN(value, fields.optional_number("query_pre_attn_scalar"));
  if (value && !(*value > 0.0)) return fields.invalid("query_pre_attn_scalar", "a positive number", *value);
  config.query_pre_attn_scalar = value;
  DI_ASSIGN(value, fields.optional_number("final_logit_softcapping"));
  if (value && !(*value > 0.0)) return fields.invalid("final_logit_softcapping", "a positive number or null", *value);
  config.final_logit_softcapping = value;
  std::optional<std::string> activation;
  DI_ASSIGN(activation, fields.optional_string("hidden_activation"));
  if (!activation) DI_ASSIGN(activation, fields.optional_string("hidden_act"));
  config.hidden_activation = activation.value_or("silu");
  return {};
}

Result<std::optional<DType>> parse_dtype(const JsonFields& fields) {
  const char* key = fields.has("dtype") ? "dtype" : "torch_dtype";
  std::optional<std::string> name;
  DI_ASSIGN(name, fields.optional_string(key));
  if (!name) return std::optional<DType>();
  const std::optional<DType> dtype = find_dtype(*name);
  if (!dtype || (*dtype != DType::kF32 && *dtype != DType::kBF16 && *dtype != DType::kF16)) {
    return fields.invalid(key, "one of float32, bfloat16, float16", *name);
  }
  return dtype;
}

// A Qwen2.5-VL or Qwen3-VL vision_config.
Result<std::optional<Qwen2VlVisionConfig>> parse_qwen2_vl_vision(const json& raw, const JsonFields& top,
                                                                 const std::string& source_name) {
  const auto it = raw.find("vision_config");
  if (it == raw.end() || !it->is_object()) return std::optional<Qwen2VlVisionConfig>();
  // transformers 5 names Qwen2.5-VL's qwen2_5_vl_vision and Qwen3-VL's qwen3_vl_vision; published
  // checkpoints qwen2_5_vl / qwen3_vl, or nothing.
  const std::string model_type = it->value("model_type", std::string());
  const std::string top_type = raw.value("model_type", std::string());
  const bool qwen3 =
      model_type == "qwen3_vl_vision" || model_type == "qwen3_vl" || (model_type.empty() && top_type == "qwen3_vl");
  if (!qwen3 && model_type != "qwen2_5_vl_vision" && model_type != "qwen2_5_vl" &&
      !(model_type.empty() && top_type == "qwen2_5_vl")) {
    return std::optional<Qwen2VlVisionConfig>();
  }
  const JsonFields fields(source_name, *it, "vision_config.");
  Qwen2VlVisionConfig vision;
  if (qwen3) {  // Qwen3VLVisionConfig's and the Qwen3-VL processor's defaults
    vision.qwen3 = true;
    vision.depth = 27;
    vision.hidden_size = 1152;
    vision.intermediate_size = 4304;
    vision.patch_size = 16;
    vision.out_hidden_size = 3584;
    vision.hidden_act = "gelu_pytorch_tanh";
    vision.num_position_embeddings = 2304;
    vision.deepstack_visual_indexes = {8, 16, 24};
    vision.fullatt_block_indexes.clear();
    vision.min_pixels = 65536;
    vision.max_pixels = 16777216;
    vision.image_mean = {0.5, 0.5, 0.5};
    vision.image_std = {0.5, 0.5, 0.5};
  }
  const std::pair<const char*, int64_t*> sizes[] = {{"depth", &vision.depth},
                                                    {"hidden_size", &vision.hidden_size},
                                                    {"intermediate_size", &vision.intermediate_size},
                                                    {"num_heads", &vision.num_heads},
                                                    {"in_chans", &vision.in_channels},
                                                    {"in_channels", &vision.in_channels},
                                                    {"patch_size", &vision.patch_size},
                                                    {"temporal_patch_size", &vision.temporal_patch_size},
                                                    {"spatial_merge_size", &vision.spatial_merge_size},
                                                    {"window_size", &vision.window_size},
                                                    {"out_hidden_size", &vision.out_hidden_size},
                                                    {"num_position_embeddings", &vision.num_position_embeddings}};
  for (const auto& [key, target] : sizes) {
    std::optional<int64_t> value;
    DI_ASSIGN(value, fields.optional_positive_int(key));
    if (value) *target = *value;
  }
  if (fields.has("fullatt_block_indexes")) {
    DI_ASSIGN(vision.fullatt_block_indexes, fields.non_negative_int_or_list("fullatt_block_indexes"));
  }
  if (fields.has("deepstack_visual_indexes")) {
    DI_ASSIGN(vision.deepstack_visual_indexes, fields.non_negative_int_or_list("deepstack_visual_indexes"));
  }
  std::optional<std::string> activation;
  DI_ASSIGN(activation, fields.optional_string("hidden_act"));
  if (activation) vision.hidden_act = *activation;
  if (const json* rope = fields.find("rope_parameters"); rope != nullptr && rope->is_object()) {
    const JsonFields rope_fields(source_name, *rope, "vision_config.rope_parameters.");
    DI_ASSIGN(vision.rope_theta, rope_fields.positive_number("rope_theta", vision.rope_theta));
  }
  DI_ASSIGN(vision.image_token_id, top.optional_non_negative_int("image_token_id"));
  DI_ASSIGN(vision.vision_start_token_id, top.optional_non_negative_int("vision_start_token_id"));
  DI_ASSIGN(vision.vision_end_token_id, top.optional_non_negative_int("vision_end_token_id"));
  return std::optional<Qwen2VlVisionConfig>(vision);
}

// A SigLIP vision_config (other towers' configs are left for their own parsers).
Result<std::optional<VisionConfig>> parse_vision(const json& raw, const JsonFields& top,
                                                 const std::string& source_name) {
  const auto it = raw.find("vision_config");
  if (it == raw.end() || !it->is_object() || it->value("model_type", std::string()) != "siglip_vision_model") {
    return std::optional<VisionConfig>();
  }
  const JsonFields fields(source_name, *it, "vision_config.");
  VisionConfig vision;
  const std::pair<const char*, int64_t*> sizes[] = {{"hidden_size", &vision.hidden_size},
                                                    {"intermediate_size", &vision.intermediate_size},
                                                    {"num_hidden_layers", &vision.num_hidden_layers},
                                                    {"num_attention_heads", &vision.num_attention_heads},
                                                    {"num_channels", &vision.num_channels},
                                                    {"image_size", &vision.image_size},
                                                    {"patch_size", &vision.patch_size}};
  for (const auto& [key, target] : sizes) {
    std::optional<int64_t> value;
    DI_ASSIGN(value, fields.optional_positive_int(key));
    if (value) *target = *value;
  }
  DI_ASSIGN(vision.layer_norm_eps, fields.positive_number("layer_norm_eps", vision.layer_norm_eps));
  std::optional<std::string> activation;
  DI_ASSIGN(activation, fields.optional_string("hidden_act"));
  if (activation) vision.hidden_act = *activation;
  std::optional<int64_t> tokens;
  DI_ASSIGN(tokens, top.optional_positive_int("mm_tokens_per_image"));
  if (tokens) vision.mm_tokens_per_image = *tokens;
  DI_ASSIGN(vision.image_token_id, top.optional_non_negative_int("image_token_index"));
  if (!vision.image_token_id) DI_ASSIGN(vision.image_token_id, top.optional_non_negative_int("image_token_id"));
  return std::optional<VisionConfig>(vision);
}

Result<std::string> parse_architecture(const JsonFields& top) {
  const json* architectures = top.find("architectures");
  if (architectures == nullptr) return std::string();
  if (!architectures->is_array() || architectures->empty() || !(*architectures)[0].is_string()) {
    return top.invalid("architectures", "a list of class names such as [\"LlamaForCausalLM\"]", *architectures);
  }
  return (*architectures)[0].get<std::string>();
}

Result<void> parse_shape(const JsonFields& fields, ModelConfig& config) {
  DI_ASSIGN(config.vocab_size, fields.positive_int("vocab_size"));
  DI_ASSIGN(config.hidden_size, fields.positive_int("hidden_size"));
  DI_ASSIGN(config.intermediate_size, fields.positive_int("intermediate_size"));
  DI_ASSIGN(config.num_hidden_layers, fields.positive_int("num_hidden_layers"));
  if (config.num_hidden_layers > kMaxLayers) {
    return fields.invalid("num_hidden_layers", "at most " + std::to_string(kMaxLayers), config.num_hidden_layers);
  }
  DI_ASSIGN(config.num_attention_heads, fields.positive_int("num_attention_heads"));
  std::optional<int64_t> value;
  DI_ASSIGN(value, fields.optional_positive_int("num_key_value_heads"));
  config.num_key_value_heads = value.value_or(config.num_attention_heads);
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    return fields.error("num_attention_heads (" + std::to_string(config.num_attention_heads) +
                        ") must be a multiple of num_key_value_heads (" + std::to_string(config.num_key_value_heads) +
                        ")");
  }
  DI_ASSIGN(value, fields.optional_positive_int("head_dim"));
  if (!value && config.hidden_size % config.num_attention_heads != 0) {
    return fields.error("field 'head_dim' is missing and hidden_size (" + std::to_string(config.hidden_size) +
                        ") is not a multiple of num_attention_heads (" + std::to_string(config.num_attention_heads) +
                        ")");
  }
  config.head_dim = value.value_or(config.hidden_size / config.num_attention_heads);
  DI_ASSIGN(value, fields.optional_positive_int("max_position_embeddings"));
  config.max_position_embeddings = value.value_or(0);
  DI_ASSIGN(config.rms_norm_eps, fields.positive_number("rms_norm_eps", 1e-6));
  return {};
}

}  // namespace

Result<ModelConfig> ModelConfig::parse(const std::string& json_text, const std::string& source_name) {
  json raw;
  try {
    raw = json::parse(json_text);
  } catch (const json::exception& e) {
    return Error{source_name + ": invalid JSON: " + e.what()};
  }
  if (!raw.is_object()) return Error{source_name + ": expected a JSON object, got " + std::string(raw.type_name())};

  // Multimodal checkpoints (Gemma 3, Qwen2-VL style) nest the language model in text_config.
  const auto text_it = raw.find("text_config");
  const bool nested = text_it != raw.end() && text_it->is_object() && !raw.contains("num_hidden_layers");
  JsonFields top(source_name, raw);
  JsonFields fields = nested ? JsonFields(source_name, *text_it, "text_config.") : top;
  if (nested) fields.add_fallback(top);

  ModelConfig config;
  DI_ASSIGN(config.architecture, parse_architecture(top));
  std::optional<std::string> model_type;
  DI_ASSIGN(model_type, top.optional_string("model_type"));
  config.model_type = model_type.value_or("");
  // The family rules key on the language model's type (gemma3_text inside gemma3).
  DI_ASSIGN(model_type, fields.optional_string("model_type"));
  const std::string family = model_type.value_or("");
  if (family == "gemma3_text") fields.add_fallback(gemma3_text_defaults(), "");

  DI_TRY(parse_shape(fields, config));
  DI_TRY(parse_rope(fields, source_name, config));
  DI_ASSIGN(config.tie_word_embeddings, fields.boolean("tie_word_embeddings", family.starts_with("gemma")));
  if (family == "qwen2" || family == "gpt_oss" || family == "qwen2_5_vl" || family == "qwen2_5_vl_text") {
    config.attention_bias = true;  // their attention layers always have biases, whatever the field says
  } else if (family == "qwen2_moe") {
    DI_ASSIGN(config.attention_bias, fields.boolean("qkv_bias", true));
  } else {
    DI_ASSIGN(config.attention_bias, fields.boolean("attention_bias", false));
  }
  DI_ASSIGN(config.layer_sliding_window, parse_sliding_windows(fields, family, config.num_hidden_layers));
  DI_TRY(parse_gemma_options(fields, config));
  DI_TRY(parse_moe_fields(fields, config));
  DI_ASSIGN(config.dtype, parse_dtype(fields));
  DI_ASSIGN(config.eos_token_ids, fields.non_negative_int_or_list("eos_token_id"));
  DI_ASSIGN(config.bos_token_id, fields.optional_non_negative_int("bos_token_id"));
  DI_ASSIGN(config.vision, parse_vision(raw, top, source_name));
  DI_ASSIGN(config.qwen2_vl_vision, parse_qwen2_vl_vision(raw, top, source_name));
  config.raw = std::move(raw);
  return config;
}

namespace {

// Adds generation_config.json's eos_token_id (int or list) to the config's: instruct checkpoints
// list their end-of-turn tokens there (Llama 3's <|eot_id|>, say).
Result<void> merge_generation_config(const std::string& dir, ModelConfig& config) {
  const std::string path = (std::filesystem::path(dir) / "generation_config.json").string();
  if (!std::filesystem::exists(path)) return {};
  Result<std::string> text = read_text_file(path);
  if (!text.ok()) return text.error();
  const json parsed = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) return Error{path + ": not a JSON object"};
  const JsonFields fields(path, parsed);
  std::vector<int64_t> eos_ids;
  DI_ASSIGN(eos_ids, fields.non_negative_int_or_list("eos_token_id"));
  for (int64_t id : eos_ids) {
    if (std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), id) == config.eos_token_ids.end()) {
      config.eos_token_ids.push_back(id);
    }
  }
  return {};
}

// A Qwen2.5-VL or Qwen3-VL directory's preprocessor_config.json bounds the resized pixel count
// (min_pixels / max_pixels, or size.shortest_edge / longest_edge as transformers 5 writes them) and
// gives the normalisation (image_mean, image_std); absent: the processor's defaults.
Result<void> merge_preprocessor_config(const std::string& dir, ModelConfig& config) {
  if (!config.qwen2_vl_vision) return {};
  const std::string path = (std::filesystem::path(dir) / "preprocessor_config.json").string();
  if (!std::filesystem::exists(path)) return {};
  Result<std::string> text = read_text_file(path);
  if (!text.ok()) return text.error();
  const json parsed = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) return Error{path + ": not a JSON object"};
  JsonFields fields(path, parsed);
  const auto size = parsed.find("size");
  JsonFields sizes = size != parsed.end() && size->is_object() ? JsonFields(path, *size, "size.") : fields;
  Qwen2VlVisionConfig& vision = *config.qwen2_vl_vision;
  for (const auto& [key, size_key, target] : {std::tuple{"min_pixels", "shortest_edge", &vision.min_pixels},
                                              std::tuple{"max_pixels", "longest_edge", &vision.max_pixels}}) {
    std::optional<int64_t> value;
    DI_ASSIGN(value, fields.optional_positive_int(key));
    if (!value) DI_ASSIGN(value, sizes.optional_positive_int(size_key));
    if (value) *target = *value;
  }
  if (vision.min_pixels > vision.max_pixels) return Error{path + ": min_pixels is over max_pixels"};
  for (const auto& [key, target] :
       {std::pair{"image_mean", &vision.image_mean}, std::pair{"image_std", &vision.image_std}}) {
    const auto values = parsed.find(key);
    if (values == parsed.end()) continue;
    const bool three_numbers = values->is_array() && values->size() == 3 &&
                               std::all_of(values->begin(), values->end(), [](const json& v) { return v.is_number(); });
    if (!three_numbers) return Error{path + ": " + key + " must be 3 numbers (red, green, blue)"};
    *target = values->get<std::vector<double>>();
    if (std::string_view(key) == "image_std" &&
        std::any_of(target->begin(), target->end(), [](double v) { return v <= 0; })) {
      return Error{path + ": image_std must be positive"};
    }
  }
  return {};
}

}  // namespace

Result<ModelConfig> ModelConfig::load(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  Result<std::string> text = read_text_file(path);
  if (!text.ok()) return Error{text.error().message + " (every model directory needs a config.json)"};
  Result<ModelConfig> config = parse(*text, path);
  if (!config.ok()) return config;
  DI_TRY(merge_generation_config(dir, *config));
  DI_TRY(merge_preprocessor_config(dir, *config));
  return config;
}

}  // namespace deepinfer
