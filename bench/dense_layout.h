// The tensors of a dense decoder checkpoint (Llama, Mistral, Qwen2, Qwen3) as transformers names
// them, each with its llama.cpp GGUF name; shared by deepinfer-make-random-model and
// deepinfer-hf-to-gguf so both agree on one list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "weights/hf_config.h"

namespace deepinfer::bench {

enum class TensorRole : uint8_t { kMatrix, kNorm, kBias };

struct DenseTensor {
  std::string hf_name;    // model.layers.3.self_attn.q_proj.weight
  std::string gguf_name;  // blk.3.attn_q.weight
  std::vector<int64_t> shape;  // transformers order: [rows, cols] for matrices
  TensorRole role = TensorRole::kMatrix;
  // > 0 for q/k projections of a GGUF `llama` model: the rows hold this many heads, which
  // llama.cpp wants in interleaved-pair rope order rather than transformers' rotate-half order.
  int64_t num_rope_heads = 0;
};

struct DenseLayout {
  std::string family;     // "llama", "mistral", "qwen2" or "qwen3"
  std::string gguf_arch;  // llama.cpp's architecture name: "llama", "qwen2" or "qwen3"
  std::vector<DenseTensor> tensors;
};

// Lists every tensor the checkpoint of this config holds, in llama.cpp's order (embedding,
// layers, final norm, output head). Errors name the architecture when it is not one of the four.
Result<DenseLayout> dense_layout(const ModelConfig& config);

// llama.cpp's name of a transformers tensor of these families and of Qwen3-MoE
// (model.layers.3.self_attn.q_proj.weight -> blk.3.attn_q.weight; every expert's
// model.layers.3.mlp.experts.7.gate_proj.weight -> blk.3.ffn_gate_exps.weight, the experts stacked
// in order), or "" for a name llama.cpp's graphs of these families do not have.
std::string gguf_tensor_name(const std::string& hf_name);

}  // namespace deepinfer::bench
