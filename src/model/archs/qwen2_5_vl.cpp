// Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration): the Qwen2 text model (biases on q/k/v) under
// model.* (published checkpoints, transformers 5) or model.language_model.* (4.52-4.57), with
// M-RoPE (rope_parameters' or rope_scaling's mrope_section), and its image encoder
// (model/layers/qwen2_vl_vision.h), whose rows replace the image's placeholder tokens. Unlike
// Gemma 3's, the image's tokens attend causally; they take M-RoPE positions from their place in
// the image's merged grid, and the text after an image continues from its largest.
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"
#include "model/layers/qwen2_vl_vision.h"

namespace deepinfer::archs {

Result<ImageInputFormat> qwen_vl_image_format(const ModelConfig& config) {
  DI_CHECK(config.qwen2_vl_vision.has_value(), "qwen_vl_image_format needs a Qwen-VL vision_config");
  const Qwen2VlVisionConfig& vision = *config.qwen2_vl_vision;
  const auto token = [&](const std::optional<int64_t>& id, const char* field) -> Result<int32_t> {
    if (!id || *id >= config.vocab_size) {
      return Error{std::string("config.json: ") + field + " is missing or outside the vocabulary"};
    }
    return static_cast<int32_t>(*id);
  };
  ImageInputFormat format;
  format.preprocessor = ImageInputFormat::Preprocessor::kQwen2Vl;
  DI_ASSIGN(format.image_token_id, token(vision.image_token_id, "image_token_id"));
  DI_ASSIGN(format.begin_token_id, token(vision.vision_start_token_id, "vision_start_token_id"));
  DI_ASSIGN(format.end_token_id, token(vision.vision_end_token_id, "vision_end_token_id"));
  format.patch_size = static_cast<int32_t>(vision.patch_size);
  format.temporal_patch_size = static_cast<int32_t>(vision.temporal_patch_size);
  format.merge_size = static_cast<int32_t>(vision.spatial_merge_size);
  format.min_pixels = vision.min_pixels;
  format.max_pixels = vision.max_pixels;
  for (size_t c = 0; c < 3; ++c) {
    format.image_mean[c] = static_cast<float>(vision.image_mean[c]);
    format.image_std[c] = static_cast<float>(vision.image_std[c]);
  }
  format.deepstack_layers = static_cast<int32_t>(vision.deepstack_visual_indexes.size());
  format.bidirectional = false;
  format.mrope = true;
  return format;
}

Result<QwenVlVision> qwen_vl_vision(const ModelSource& source) {
  auto format = qwen_vl_image_format(source.config);
  if (!format.ok()) return format.error();
  auto vision_weights = qwen2_vl_vision_weights(*source.weights);
  if (!vision_weights.ok()) return vision_weights.error();
  ModelSource vision = source;
  vision.weights = std::make_shared<const WeightStore>(std::move(*vision_weights));
  return QwenVlVision{std::move(vision), *format};
}

Result<std::shared_ptr<ImageEncoder>> build_qwen2_5_vl_image_encoder(const ModelSource& source) {
  auto vision = qwen_vl_vision(source);
  if (!vision.ok()) return vision.error();
  auto encoder = Qwen2VlImageEncoder::load(vision->source, vision->format);
  if (!encoder.ok()) return encoder.error();
  return std::shared_ptr<ImageEncoder>(std::move(*encoder));
}

Result<std::unique_ptr<CausalLM>> build_qwen2_5_vl(const ModelSource& source) {
  if (source.config.rope.mrope_section.empty()) {
    return Error{"config.json: Qwen2.5-VL's rope_parameters (or rope_scaling) has no mrope_section"};
  }
  auto text_weights = source.weights->with_prefixes_renamed({{"model.language_model.", "model."}});
  if (!text_weights.ok()) return text_weights.error();
  ModelSource text = source;
  text.weights = std::make_shared<const WeightStore>(std::move(*text_weights));
  DenseDecoderOptions options;
  options.qkv_bias = true;
  if (source.config.qwen2_vl_vision) {
    auto encoder = build_qwen2_5_vl_image_encoder(source);
    if (!encoder.ok()) return encoder.error();
    options.image_encoder = std::move(*encoder);
  }
  return DenseDecoder::load(text, options);
}

}  // namespace deepinfer::archs
