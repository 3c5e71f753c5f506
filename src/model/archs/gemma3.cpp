// Gemma 3 (text, Gemma3ForCausalLM): sliding-window and global layers (layer_types or
// sliding_window_pattern) with their own rope (rope_local_base_freq, or rope_parameters per layer
// type; linear scaling on the global layers of 4B+), softmax scale query_pre_attn_scalar^-0.5,
// RMSNorms that store w - 1 (q/k norms too), a norm on each sub-layer's output before the
// residual add (post_attention / post_feedforward) and before the MLP (pre_feedforward), GeGLU,
// embeddings scaled by sqrt(hidden) rounded to the embedding dtype, final-logit soft-capping
// when configured, tied embeddings.
// Gemma3ForConditionalGeneration (the published multimodal checkpoints): the same text model under
// language_model.model.* (transformers < 4.52) or model.language_model.* (later); its vision tower
// (vision_tower.*, multi_modal_projector.*) is not read, so it serves text only.
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer::archs {

Result<std::unique_ptr<CausalLM>> build_gemma3(const ModelSource& source) {
  const ModelConfig& config = source.config;
  // At the top of a text model's config.json, or in a multimodal one's text_config.
  const auto text_config = config.raw.find("text_config");
  const nlohmann::json& text = text_config != config.raw.end() && text_config->is_object() ? *text_config : config.raw;
  const auto bidirectional = text.find("use_bidirectional_attention");
  if (bidirectional != text.end() && bidirectional->is_boolean() && bidirectional->get<bool>()) {
    return Error{"config.json: use_bidirectional_attention is true (an embedding model); " + config.architecture +
                 " is served as a causal language model only"};
  }
  DenseDecoderOptions options;
  options.qkv_bias = config.attention_bias;
  options.o_bias = config.attention_bias;
  options.qk_norm = true;
  options.norm_weight_offset = 1.0f;
  options.sandwich_norms = true;
  options.scale_embeddings = true;
  return DenseDecoder::load(source, options);
}

Result<std::unique_ptr<CausalLM>> build_gemma3_multimodal(const ModelSource& source) {
  auto text_weights = source.weights->with_prefixes_renamed({{"language_model.model.", "model."},
                                                             {"language_model.lm_head.", "lm_head."},
                                                             {"model.language_model.", "model."}});
  if (!text_weights.ok()) return text_weights.error();
  ModelSource text = source;
  text.weights = std::make_shared<const WeightStore>(std::move(*text_weights));
  return build_gemma3(text);
}

}  // namespace deepinfer::archs
