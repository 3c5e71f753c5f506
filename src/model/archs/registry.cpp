// The architecture registry: one line per config.json "architectures" name.
#include <array>
#include <string_view>
#include <utility>

#include "model/archs/archs.h"

namespace deepinfer::archs {
namespace {

constexpr std::array<std::pair<std::string_view, Builder>, 13> kRegistry = {{
    {"LlamaForCausalLM", &build_llama},
    {"Qwen2ForCausalLM", &build_qwen2},
    {"Qwen3ForCausalLM", &build_qwen3},
    {"MistralForCausalLM", &build_mistral},
    {"DeepseekV2ForCausalLM", &build_deepseek_v2},
    {"DeepseekV3ForCausalLM", &build_deepseek_v3},
    {"Qwen3MoeForCausalLM", &build_qwen3_moe},
    {"MixtralForCausalLM", &build_mixtral},
    {"GptOssForCausalLM", &build_gpt_oss},
    {"Gemma3ForCausalLM", &build_gemma3},
    {"Gemma3ForConditionalGeneration", &build_gemma3_multimodal},
    {"Qwen2_5_VLForConditionalGeneration", &build_qwen2_5_vl},
    {"Qwen3VLForConditionalGeneration", &build_qwen3_vl},
}};

}  // namespace

Builder find_builder(const std::string& architecture) {
  for (const auto& [name, builder] : kRegistry) {
    if (name == architecture) return builder;
  }
  return nullptr;
}

std::vector<std::string> registered_architectures() {
  std::vector<std::string> names;
  for (const auto& entry : kRegistry) names.emplace_back(entry.first);
  return names;
}

}  // namespace deepinfer::archs
