// Architecture builders, one per file in this folder; registry.cpp maps config.json's
// "architectures" names to them.
#pragma once

#include <memory>

#include "model/model.h"

namespace deepinfer::archs {

using Builder = Result<std::unique_ptr<CausalLM>> (*)(const ModelSource& source);

Result<std::unique_ptr<CausalLM>> build_llama(const ModelSource& source);
Result<std::unique_ptr<CausalLM>> build_qwen2(const ModelSource& source);
Result<std::unique_ptr<CausalLM>> build_qwen3(const ModelSource& source);
Result<std::unique_ptr<CausalLM>> build_mistral(const ModelSource& source);
Result<std::unique_ptr<CausalLM>> build_deepseek_v2(const ModelSource& source);
Result<std::unique_ptr<CausalLM>> build_deepseek_v3(const ModelSource& source);
Result<std::unique_ptr<CausalLM>> build_qwen3_moe(const ModelSource& source);
Result<std::unique_ptr<CausalLM>> build_mixtral(const ModelSource& source);
Result<std::unique_ptr<CausalLM>> build_gpt_oss(const ModelSource& source);
Result<std::unique_ptr<CausalLM>> build_gemma3(const ModelSource& source);
Result<std::unique_ptr<CausalLM>> build_gemma3_multimodal(const ModelSource& source);
Result<std::unique_ptr<CausalLM>> build_qwen2_5_vl(const ModelSource& source);
Result<std::unique_ptr<CausalLM>> build_qwen3_vl(const ModelSource& source);

// A multimodal architecture's image encoder alone, from the checkpoint's vision weights (the
// config's vision part must be set); what load_image_encoder runs.
using ImageEncoderBuilder = Result<std::shared_ptr<ImageEncoder>> (*)(const ModelSource& source);
Result<std::shared_ptr<ImageEncoder>> build_gemma3_image_encoder(const ModelSource& source);
Result<std::shared_ptr<ImageEncoder>> build_qwen2_5_vl_image_encoder(const ModelSource& source);
Result<std::shared_ptr<ImageEncoder>> build_qwen3_vl_image_encoder(const ModelSource& source);

// A Qwen-VL checkpoint's vision side: its tensors as the towers name them (visual.*), and the image
// format of its config (qwen_vl_image_format).
struct QwenVlVision {
  ModelSource source;
  ImageInputFormat format;
};
Result<QwenVlVision> qwen_vl_vision(const ModelSource& source);

// What a Gemma3ForConditionalGeneration config's images look like to the prompt (config.vision
// must be set); errors name the config field.
Result<ImageInputFormat> gemma3_image_format(const ModelConfig& config);
// The same for a Qwen2_5_VLForConditionalGeneration or Qwen3VLForConditionalGeneration config
// (config.qwen2_vl_vision must be set).
Result<ImageInputFormat> qwen_vl_image_format(const ModelConfig& config);

// nullptr when the architecture is not supported.
Builder find_builder(const std::string& architecture);
std::vector<std::string> registered_architectures();

}  // namespace deepinfer::archs
