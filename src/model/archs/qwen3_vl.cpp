// Qwen3-VL (Qwen3VLForConditionalGeneration): the Qwen3 text model (q/k norms, no biases) under
// model.language_model.* with interleaved M-RoPE (rope_parameters' mrope_section and
// mrope_interleaved), and its image encoder (model/layers/qwen3_vl_vision.h) under model.visual.*,
// whose rows replace the image's placeholder tokens and whose DeepStack rows join the outputs of
// the first decoder layers at those tokens. The image's tokens attend causally and take M-RoPE
// positions from their place in the merged grid, as Qwen2.5-VL's.
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"
#include "model/layers/qwen3_vl_vision.h"

namespace deepinfer::archs {

Result<std::shared_ptr<ImageEncoder>> build_qwen3_vl_image_encoder(const ModelSource& source) {
  auto vision = qwen_vl_vision(source);
  if (!vision.ok()) return vision.error();
  auto encoder = Qwen3VlImageEncoder::load(vision->source, vision->format);
  if (!encoder.ok()) return encoder.error();
  return std::shared_ptr<ImageEncoder>(std::move(*encoder));
}

Result<std::unique_ptr<CausalLM>> build_qwen3_vl(const ModelSource& source) {
  if (source.config.rope.mrope_section.empty()) {
    return Error{"config.json: Qwen3-VL's text_config.rope_parameters has no mrope_section"};
  }
  if (!source.config.qwen2_vl_vision || !source.config.qwen2_vl_vision->qwen3) {
    return Error{"config.json: Qwen3VLForConditionalGeneration needs a Qwen3-VL vision_config (model_type qwen3_vl)"};
  }
  auto text_weights = source.weights->with_prefixes_renamed({{"model.language_model.", "model."}});
  if (!text_weights.ok()) return text_weights.error();
  ModelSource text = source;
  text.weights = std::make_shared<const WeightStore>(std::move(*text_weights));
  DenseDecoderOptions options;
  options.qkv_bias = source.config.attention_bias;
  options.o_bias = source.config.attention_bias;
  options.qk_norm = true;
  auto encoder = build_qwen3_vl_image_encoder(source);
  if (!encoder.ok()) return encoder.error();
  options.image_encoder = std::move(*encoder);
  return DenseDecoder::load(text, options);
}

}  // namespace deepinfer::archs
