#include "model/flop_count.h"

namespace deepinfer {

double decoder_matmul_params(const ModelConfig& c) {
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  const double hidden = d(c.hidden_size);
  const double heads = d(c.num_attention_heads);
  double attention = 0.0;
  if (c.mla) {
    const MlaConfig& m = *c.mla;
    const double q_out = heads * d(m.qk_nope_head_dim + m.qk_rope_head_dim);
    attention = (m.q_lora_rank ? hidden * d(*m.q_lora_rank) + d(*m.q_lora_rank) * q_out : hidden * q_out) +
                hidden * d(m.kv_lora_rank + m.qk_rope_head_dim) +
                d(m.kv_lora_rank) * heads * d(m.qk_nope_head_dim + m.v_head_dim) + heads * d(m.v_head_dim) * hidden;
  } else {
    const double q_dim = heads * d(c.head_dim);
    const double kv_dim = d(c.num_key_value_heads * c.head_dim);
    attention = hidden * (q_dim + 2 * kv_dim) + q_dim * hidden;
  }
  double total = 0.0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    double mlp = 3 * hidden * d(c.intermediate_size);
    if (c.moe && c.moe->is_moe_layer(layer)) {
      const MoeConfig& m = *c.moe;
      const double shared = m.shared_expert_intermediate_size > 0 ? d(m.shared_expert_intermediate_size)
                                                                  : d(m.num_shared_experts * m.moe_intermediate_size);
      mlp = hidden * d(m.num_experts) + 3 * hidden * (d(m.num_experts_per_tok * m.moe_intermediate_size) + shared);
    }
    total += attention + mlp;
  }
  return total;
}

double prompt_attention_flops(const ModelConfig& c, double n) {
  const double qk =
      c.mla ? static_cast<double>(c.mla->qk_nope_head_dim + c.mla->qk_rope_head_dim) : static_cast<double>(c.head_dim);
  const double v = c.mla ? static_cast<double>(c.mla->v_head_dim) : static_cast<double>(c.head_dim);
  double pairs = 0.0;  // (query, visible key) pairs over all layers
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const size_t i = static_cast<size_t>(layer);
    const double window = i < c.layer_sliding_window.size() ? c.layer_sliding_window[i] : 0;
    // sum over queries q < n of min(q + 1, window)
    pairs += window <= 0 || window >= n ? n * (n + 1) / 2 : window * (window + 1) / 2 + (n - window) * window;
  }
  return 2.0 * (qk + v) * static_cast<double>(c.num_attention_heads) * pairs;
}

}  // namespace deepinfer
