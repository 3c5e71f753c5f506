// Tensor lists of MoE checkpoints, per family, in transformers' published names.
#include "moe_layout.h"

namespace deepinfer::bench {
namespace {

class LayoutBuilder {
 public:
  // gguf_names: each tensor also gets llama.cpp's name (gguf_tensor_name).
  LayoutBuilder(DenseLayout& layout, bool gguf_names) : layout_(layout), gguf_names_(gguf_names) {}
  void matrix(const std::string& name, std::vector<int64_t> shape) { add(name, std::move(shape), TensorRole::kMatrix); }
  void norm(const std::string& name, int64_t dim) { add(name, {dim}, TensorRole::kNorm); }
  void bias(const std::string& name, std::vector<int64_t> shape) { add(name, std::move(shape), TensorRole::kBias); }

 private:
  void add(const std::string& name, std::vector<int64_t> shape, TensorRole role) {
    layout_.tensors.push_back({name, gguf_names_ ? gguf_tensor_name(name) : "", std::move(shape), role, 0});
  }
  DenseLayout& layout_;
  bool gguf_names_;
};

void add_gated_mlp(LayoutBuilder& b, const std::string& prefix, int64_t hidden, int64_t inter,
                   const char* gate = "gate_proj", const char* up = "up_proj", const char* down = "down_proj") {
  b.matrix(prefix + gate + ".weight", {inter, hidden});
  b.matrix(prefix + up + ".weight", {inter, hidden});
  b.matrix(prefix + down + ".weight", {hidden, inter});
}

void add_mla(LayoutBuilder& b, const std::string& p, const ModelConfig& c) {
  const MlaConfig& m = *c.mla;
  const int64_t heads = c.num_attention_heads;
  const int64_t q_rows = heads * (m.qk_nope_head_dim + m.qk_rope_head_dim);
  if (m.q_lora_rank) {
    b.matrix(p + "q_a_proj.weight", {*m.q_lora_rank, c.hidden_size});
    b.norm(p + "q_a_layernorm.weight", *m.q_lora_rank);
    b.matrix(p + "q_b_proj.weight", {q_rows, *m.q_lora_rank});
  } else {
    b.matrix(p + "q_proj.weight", {q_rows, c.hidden_size});
  }
  b.matrix(p + "kv_a_proj_with_mqa.weight", {m.kv_lora_rank + m.qk_rope_head_dim, c.hidden_size});
  b.norm(p + "kv_a_layernorm.weight", m.kv_lora_rank);
  b.matrix(p + "kv_b_proj.weight", {heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank});
  b.matrix(p + "o_proj.weight", {c.hidden_size, heads * m.v_head_dim});
}

void add_gqa(LayoutBuilder& b, const std::string& p, const ModelConfig& c, bool biases, bool qk_norm, bool sinks) {
  const int64_t q_rows = c.num_attention_heads * c.head_dim;
  const int64_t kv_rows = c.num_key_value_heads * c.head_dim;
  b.matrix(p + "q_proj.weight", {q_rows, c.hidden_size});
  b.matrix(p + "k_proj.weight", {kv_rows, c.hidden_size});
  b.matrix(p + "v_proj.weight", {kv_rows, c.hidden_size});
  b.matrix(p + "o_proj.weight", {c.hidden_size, q_rows});
  if (biases) {
    b.bias(p + "q_proj.bias", {q_rows});
    b.bias(p + "k_proj.bias", {kv_rows});
    b.bias(p + "v_proj.bias", {kv_rows});
    b.bias(p + "o_proj.bias", {c.hidden_size});
  }
  if (qk_norm) {
    b.norm(p + "q_norm.weight", c.head_dim);
    b.norm(p + "k_norm.weight", c.head_dim);
  }
  if (sinks) b.bias(p + "sinks", {c.num_attention_heads});
}

}  // namespace

Result<DenseLayout> moe_layout(const ModelConfig& c) {
  const std::string& type = c.model_type;
  const bool deepseek = type == "deepseek_v2" || type == "deepseek_v3";
  if (!c.moe || (!deepseek && type != "qwen3_moe" && type != "mixtral" && type != "gpt_oss")) {
    return Error{"model_type '" + type + "' is not a MoE family make-random-model knows (deepseek_v2, deepseek_v3, "
                 "qwen3_moe, mixtral, gpt_oss)"};
  }
  if (deepseek && !c.mla) return Error{"a DeepSeek config needs kv_lora_rank and the other MLA fields"};
  DenseLayout layout;
  layout.family = type;
  // llama.cpp names: Qwen3-MoE's (its qwen3moe graph); the other families' GGUF layouts differ more.
  const bool qwen3_moe = type == "qwen3_moe";
  if (qwen3_moe) layout.gguf_arch = "qwen3moe";
  LayoutBuilder b(layout, qwen3_moe);
  const MoeConfig& moe = *c.moe;
  const int64_t hidden = c.hidden_size;
  const int64_t experts = moe.num_experts;
  const int64_t inter = moe.moe_intermediate_size;
  b.matrix("model.embed_tokens.weight", {c.vocab_size, hidden});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    b.norm(p + "input_layernorm.weight", hidden);
    b.norm(p + "post_attention_layernorm.weight", hidden);
    if (deepseek) {
      add_mla(b, p + "self_attn.", c);
    } else {
      add_gqa(b, p + "self_attn.", c, type == "gpt_oss" || c.attention_bias, type == "qwen3_moe", type == "gpt_oss");
    }
    if (!moe.is_moe_layer(i)) {
      add_gated_mlp(b, p + "mlp.", hidden, c.intermediate_size);
      continue;
    }
    if (type == "gpt_oss") {
      b.matrix(p + "mlp.router.weight", {experts, hidden});
      b.bias(p + "mlp.router.bias", {experts});
      b.matrix(p + "mlp.experts.gate_up_proj", {experts, hidden, 2 * inter});
      b.bias(p + "mlp.experts.gate_up_proj_bias", {experts, 2 * inter});
      b.matrix(p + "mlp.experts.down_proj", {experts, inter, hidden});
      b.bias(p + "mlp.experts.down_proj_bias", {experts, hidden});
      continue;
    }
    const bool mixtral = type == "mixtral";
    const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
    b.matrix(block + "gate.weight", {experts, hidden});
    if (moe.topk_method == "noaux_tc") b.bias(block + "gate.e_score_correction_bias", {experts});
    for (int64_t e = 0; e < experts; ++e) {
      const std::string ep = block + "experts." + std::to_string(e) + ".";
      if (mixtral) {
        add_gated_mlp(b, ep, hidden, inter, "w1", "w3", "w2");
      } else {
        add_gated_mlp(b, ep, hidden, inter);
      }
    }
    if (moe.num_shared_experts > 0) add_gated_mlp(b, block + "shared_experts.", hidden, moe.num_shared_experts * inter);
  }
  b.norm("model.norm.weight", hidden);
  if (!c.tie_word_embeddings) b.matrix("lm_head.weight", {c.vocab_size, hidden});
  return layout;
}

}  // namespace deepinfer::bench
