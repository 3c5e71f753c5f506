// Tensor lists of dense decoder checkpoints, with transformers' and llama.cpp's names.
#include "dense_layout.h"

#include <optional>
#include <utility>

namespace deepinfer::bench {
namespace {

struct Family {
  const char* model_type;
  const char* architecture;
  const char* gguf_arch;
};

constexpr Family kFamilies[] = {
    {"llama", "LlamaForCausalLM", "llama"},
    {"mistral", "MistralForCausalLM", "llama"},
    {"qwen2", "Qwen2ForCausalLM", "qwen2"},
    {"qwen3", "Qwen3ForCausalLM", "qwen3"},
};

std::optional<Family> find_family(const ModelConfig& config) {
  for (const Family& f : kFamilies) {
    if (config.model_type == f.model_type) return f;
  }
  for (const Family& f : kFamilies) {
    if (config.architecture == f.architecture) return f;
  }
  return std::nullopt;
}

// Per-layer tensors: transformers' name after "model.layers.N.", llama.cpp's after "blk.N.".
constexpr std::pair<const char*, const char*> kLayerTensors[] = {
    {"input_layernorm.weight", "attn_norm.weight"},    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},      {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},          {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},          {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"}, {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.o_proj.bias", "attn_output.bias"},     {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},       {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},       {"mlp.gate.weight", "ffn_gate_inp.weight"},
};
// An expert's tensor after "model.layers.N.mlp.experts.E." and the stacked one after "blk.N.".
constexpr std::pair<const char*, const char*> kExpertTensors[] = {
    {"gate_proj.weight", "ffn_gate_exps.weight"},
    {"up_proj.weight", "ffn_up_exps.weight"},
    {"down_proj.weight", "ffn_down_exps.weight"},
};

// The digits at the start of text and the rest after the '.' that follows them.
std::optional<std::pair<std::string, std::string>> split_index(const std::string& text) {
  const size_t dot = text.find('.');
  if (dot == 0 || dot == std::string::npos || text.find_first_not_of("0123456789") != dot) return std::nullopt;
  return std::pair{text.substr(0, dot), text.substr(dot + 1)};
}

}  // namespace

std::string gguf_tensor_name(const std::string& hf_name) {
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  if (hf_name == "lm_head.weight") return "output.weight";
  const std::string layers = "model.layers.";
  if (!hf_name.starts_with(layers)) return "";
  const auto layer = split_index(hf_name.substr(layers.size()));
  if (!layer) return "";
  const auto& [index, rest] = *layer;
  for (const auto& [hf, gguf] : kLayerTensors) {
    if (rest == hf) return "blk." + index + "." + gguf;
  }
  const std::string experts = "mlp.experts.";
  if (!rest.starts_with(experts)) return "";
  const auto expert = split_index(rest.substr(experts.size()));
  if (!expert) return "";
  for (const auto& [hf, gguf] : kExpertTensors) {
    if (expert->second == hf) return "blk." + index + "." + gguf;
  }
  return "";
}

Result<DenseLayout> dense_layout(const ModelConfig& config) {
  const std::optional<Family> family = find_family(config);
  if (!family) {
    return Error{"unsupported architecture '" + config.architecture + "' (model_type '" + config.model_type +
                 "'): expected Llama, Mistral, Qwen2 or Qwen3 (e.g. model_type \"qwen3\")"};
  }
  DenseLayout layout;
  layout.family = family->model_type;
  layout.gguf_arch = family->gguf_arch;
  auto add = [&layout](const std::string& hf_name, std::vector<int64_t> shape, TensorRole role,
                       int64_t num_rope_heads = 0) {
    layout.tensors.push_back({hf_name, gguf_tensor_name(hf_name), std::move(shape), role, num_rope_heads});
  };

  const int64_t hidden = config.hidden_size;
  const int64_t q_rows = config.num_attention_heads * config.head_dim;
  const int64_t kv_rows = config.num_key_value_heads * config.head_dim;
  const int64_t ffn = config.intermediate_size;
  const bool qwen2 = layout.family == "qwen2";
  const bool qwen3 = layout.family == "qwen3";
  // Llama-style checkpoints put biases on all four projections when attention_bias is set;
  // Qwen2 has them on q/k/v only; Mistral and Qwen3 have none.
  const bool qkv_bias = qwen2 || (layout.family == "llama" && config.attention_bias);
  const bool o_bias = layout.family == "llama" && config.attention_bias;
  // llama.cpp's `llama` graph applies rope to interleaved pairs; Qwen graphs use rotate-half.
  const bool permute_rope = layout.gguf_arch == "llama";
  const int64_t q_heads = permute_rope ? config.num_attention_heads : 0;
  const int64_t kv_heads = permute_rope ? config.num_key_value_heads : 0;

  add("model.embed_tokens.weight", {config.vocab_size, hidden}, TensorRole::kMatrix);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    add(hf + "input_layernorm.weight", {hidden}, TensorRole::kNorm);
    add(hf + "self_attn.q_proj.weight", {q_rows, hidden}, TensorRole::kMatrix, q_heads);
    add(hf + "self_attn.k_proj.weight", {kv_rows, hidden}, TensorRole::kMatrix, kv_heads);
    add(hf + "self_attn.v_proj.weight", {kv_rows, hidden}, TensorRole::kMatrix);
    if (qkv_bias) {
      add(hf + "self_attn.q_proj.bias", {q_rows}, TensorRole::kBias, q_heads);
      add(hf + "self_attn.k_proj.bias", {kv_rows}, TensorRole::kBias, kv_heads);
      add(hf + "self_attn.v_proj.bias", {kv_rows}, TensorRole::kBias);
    }
    if (qwen3) {
      add(hf + "self_attn.q_norm.weight", {config.head_dim}, TensorRole::kNorm);
      add(hf + "self_attn.k_norm.weight", {config.head_dim}, TensorRole::kNorm);
    }
    add(hf + "self_attn.o_proj.weight", {hidden, q_rows}, TensorRole::kMatrix);
    if (o_bias) add(hf + "self_attn.o_proj.bias", {hidden}, TensorRole::kBias);
    add(hf + "post_attention_layernorm.weight", {hidden}, TensorRole::kNorm);
    add(hf + "mlp.gate_proj.weight", {ffn, hidden}, TensorRole::kMatrix);
    add(hf + "mlp.up_proj.weight", {ffn, hidden}, TensorRole::kMatrix);
    add(hf + "mlp.down_proj.weight", {hidden, ffn}, TensorRole::kMatrix);
  }
  add("model.norm.weight", {hidden}, TensorRole::kNorm);
  if (!config.tie_word_embeddings) add("lm_head.weight", {config.vocab_size, hidden}, TensorRole::kMatrix);
  return layout;
}

}  // namespace deepinfer::bench
