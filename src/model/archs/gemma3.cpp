// Gemma 3 (text, Gemma3ForCausalLM): sliding-window and global layers (layer_types or
// sliding_window_pattern) with their own rope (rope_local_base_freq, or rope_parameters per layer
// type; linear scaling on the global layers of 4B+), softmax scale query_pre_attn_scalar^-0.5,
// RMSNorms that store w - 1 (q/k norms too), a norm on each sub-layer's output before the
// residual add (post_attention / post_feedforward) and before the MLP (pre_feedforward), GeGLU,
// embeddings scaled by sqrt(hidden) rounded to the embedding dtype, final-logit soft-capping
// when configured, tied embeddings.
// Gemma3ForConditionalGeneration (the published multimodal checkpoints): the same text model under
// language_model.model.* (transformers < 4.52) or model.language_model.* (later), without the final
// logit soft-capping (as transformers runs it), and its image
// encoder (model/layers/siglip.h), whose rows replace the image's placeholder tokens after the
// embedding scale; the image's tokens see each other both ways (ForwardBatch::lookahead).
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"
#include "model/layers/siglip.h"

namespace deepinfer::archs {

namespace {

// config.json's integer field, or -1 when absent.
int32_t token_index(const nlohmann::json& raw, const char* key) {
  const auto it = raw.find(key);
  return it != raw.end() && it->is_number_integer() ? it->get<int32_t>() : -1;
}

Result<std::unique_ptr<CausalLM>> load_gemma3(const ModelSource& source, std::shared_ptr<ImageEncoder> image_encoder) {
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
  options.image_encoder = std::move(image_encoder);
  return DenseDecoder::load(source, options);
}

}  // namespace

Result<ImageInputFormat> gemma3_image_format(const ModelConfig& config) {
  DI_CHECK(config.vision.has_value(), "gemma3_image_format needs a vision_config");
  const VisionConfig& vision = *config.vision;
  if (!vision.image_token_id || *vision.image_token_id < 0 || *vision.image_token_id >= config.vocab_size) {
    return Error{"config.json: image_token_index is missing or outside the vocabulary"};
  }
  // An image's tokens see the whole image and, through the window, what the window reaches before
  // each of them: the same keys as transformers' mask only while the window spans the image.
  for (int32_t window : config.layer_sliding_window) {
    if (window > 0 && window < vision.mm_tokens_per_image) {
      return Error{"config.json: sliding_window " + std::to_string(window) + " is shorter than an image (" +
                   std::to_string(vision.mm_tokens_per_image) + " mm_tokens_per_image)"};
    }
  }
  ImageInputFormat format;
  format.preprocessor = ImageInputFormat::Preprocessor::kGemma3;
  format.image_size = static_cast<int32_t>(vision.image_size);
  format.tokens_per_image = static_cast<int32_t>(vision.mm_tokens_per_image);
  format.image_token_id = static_cast<int32_t>(*vision.image_token_id);
  format.begin_token_id = token_index(config.raw, "boi_token_index");
  format.end_token_id = token_index(config.raw, "eoi_token_index");
  return format;
}

Result<std::shared_ptr<ImageEncoder>> build_gemma3_image_encoder(const ModelSource& source) {
  auto format = gemma3_image_format(source.config);
  if (!format.ok()) return format.error();
  auto vision_weights = gemma3_vision_weights(*source.weights);
  if (!vision_weights.ok()) return vision_weights.error();
  ModelSource vision_source = source;
  vision_source.weights = std::make_shared<const WeightStore>(std::move(*vision_weights));
  auto encoder = Gemma3ImageEncoder::load(vision_source, *format);
  if (!encoder.ok()) return encoder.error();
  return std::shared_ptr<ImageEncoder>(std::move(*encoder));
}

Result<std::unique_ptr<CausalLM>> build_gemma3(const ModelSource& source) { return load_gemma3(source, nullptr); }

Result<std::unique_ptr<CausalLM>> build_gemma3_multimodal(const ModelSource& source) {
  auto text_weights = source.weights->with_prefixes_renamed({{"language_model.model.", "model."},
                                                             {"language_model.lm_head.", "lm_head."},
                                                             {"model.language_model.", "model."}});
  if (!text_weights.ok()) return text_weights.error();
  ModelSource text = source;
  text.weights = std::make_shared<const WeightStore>(std::move(*text_weights));
  // transformers' Gemma3ForConditionalGeneration takes its logits straight from lm_head: the text
  // config's final_logit_softcapping (null in the published checkpoints) is not applied.
  text.config.final_logit_softcapping.reset();
  std::shared_ptr<ImageEncoder> image_encoder;
  if (source.config.vision) {
    auto encoder = build_gemma3_image_encoder(source);
    if (!encoder.ok()) return encoder.error();
    image_encoder = std::move(*encoder);
  }
  return load_gemma3(text, std::move(image_encoder));
}

}  // namespace deepinfer::archs
