// The tensors of a mixture-of-experts checkpoint (DeepSeek-V2/V3 with MLA, Qwen3-MoE, Mixtral,
// GPT-OSS) in the published per-expert naming, for deepinfer-make-random-model; Qwen3-MoE's also
// with llama.cpp's names (its qwen3moe graph), for deepinfer-hf-to-gguf.
#pragma once

#include "dense_layout.h"

namespace deepinfer::bench {

// Every tensor of the config's checkpoint; errors name the model_type when it is not one of the five.
Result<DenseLayout> moe_layout(const ModelConfig& config);

}  // namespace deepinfer::bench
