// Tensor lists of dense decoder checkpoints, with transformers' and llama.cpp's names.
#include "dense_layout.h"

#include <optional>

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

}  // namespace

Result<DenseLayout> dense_layout(const ModelConfig& config) {
  const std::optional<Family> family = find_family(config);
  if (!family) {
    return Error{"unsupported architecture '" + config.architecture + "' (model_type '" + config.model_type +
                 "'): expected Llama, Mistral, Qwen2 or Qwen3 (e.g. model_type \"qwen3\")"};
  }
  DenseLayout layout;
  layout.family = family->model_type;
  layout.gguf_arch = family->gguf_arch;
  auto add = [&layout](std::string hf_name, std::string gguf_name, std::vector<int64_t> shape, TensorRole role,
                       int64_t num_rope_heads = 0) {
    layout.tensors.push_back({std::move(hf_name), std::move(gguf_name), std::move(shape), role, num_rope_heads});
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

  add("model.embed_tokens.weight", "token_embd.weight", {config.vocab_size, hidden}, TensorRole::kMatrix);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    const std::string gg = "blk." + std::to_string(i) + ".";
    add(hf + "input_layernorm.weight", gg + "attn_norm.weight", {hidden}, TensorRole::kNorm);
    add(hf + "self_attn.q_proj.weight", gg + "attn_q.weight", {q_rows, hidden}, TensorRole::kMatrix, q_heads);
    add(hf + "self_attn.k_proj.weight", gg + "attn_k.weight", {kv_rows, hidden}, TensorRole::kMatrix, kv_heads);
    add(hf + "self_attn.v_proj.weight", gg + "attn_v.weight", {kv_rows, hidden}, TensorRole::kMatrix);
    if (qkv_bias) {
      add(hf + "self_attn.q_proj.bias", gg + "attn_q.bias", {q_rows}, TensorRole::kBias, q_heads);
      add(hf + "self_attn.k_proj.bias", gg + "attn_k.bias", {kv_rows}, TensorRole::kBias, kv_heads);
      add(hf + "self_attn.v_proj.bias", gg + "attn_v.bias", {kv_rows}, TensorRole::kBias);
    }
    if (qwen3) {
      add(hf + "self_attn.q_norm.weight", gg + "attn_q_norm.weight", {config.head_dim}, TensorRole::kNorm);
      add(hf + "self_attn.k_norm.weight", gg + "attn_k_norm.weight", {config.head_dim}, TensorRole::kNorm);
    }
    add(hf + "self_attn.o_proj.weight", gg + "attn_output.weight", {hidden, q_rows}, TensorRole::kMatrix);
    if (o_bias) add(hf + "self_attn.o_proj.bias", gg + "attn_output.bias", {hidden}, TensorRole::kBias);
    add(hf + "post_attention_layernorm.weight", gg + "ffn_norm.weight", {hidden}, TensorRole::kNorm);
    add(hf + "mlp.gate_proj.weight", gg + "ffn_gate.weight", {ffn, hidden}, TensorRole::kMatrix);
    add(hf + "mlp.up_proj.weight", gg + "ffn_up.weight", {ffn, hidden}, TensorRole::kMatrix);
    add(hf + "mlp.down_proj.weight", gg + "ffn_down.weight", {hidden, ffn}, TensorRole::kMatrix);
  }
  add("model.norm.weight", "output_norm.weight", {hidden}, TensorRole::kNorm);
  if (!config.tie_word_embeddings) {
    add("lm_head.weight", "output.weight", {config.vocab_size, hidden}, TensorRole::kMatrix);
  }
  return layout;
}

}  // namespace deepinfer::bench
