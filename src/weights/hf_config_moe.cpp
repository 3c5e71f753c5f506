// config.json's MoE / MLA / FP8 fields. Defaults follow the transformers configuration classes;
// each family's own spelling is accepted (n_routed_experts, num_experts, num_local_experts).
#include "weights/hf_config_moe.h"

#include <algorithm>

namespace deepinfer {
namespace {

Result<int64_t> non_negative_or(const JsonFields& fields, const char* key, int64_t fallback) {
  std::optional<int64_t> value;
  DI_ASSIGN(value, fields.optional_non_negative_int(key));
  return value.value_or(fallback);
}

Result<void> parse_moe(const JsonFields& fields, ModelConfig& config) {
  std::optional<int64_t> experts;
  for (const char* key : {"n_routed_experts", "num_local_experts", "num_experts"}) {
    DI_ASSIGN(experts, fields.optional_non_negative_int(key));
    if (experts) break;
  }
  if (!experts || *experts == 0) return {};
  MoeConfig moe;
  moe.num_experts = *experts;
  std::optional<int64_t> value;
  DI_ASSIGN(value, fields.optional_positive_int("num_experts_per_tok"));
  if (!value) DI_ASSIGN(value, fields.optional_positive_int("experts_per_token"));
  if (!value) return fields.missing("num_experts_per_tok");
  if (*value > moe.num_experts) {
    return fields.invalid("num_experts_per_tok", "at most the number of experts (" + std::to_string(moe.num_experts) + ")",
                          *value);
  }
  moe.num_experts_per_tok = *value;
  DI_ASSIGN(value, fields.optional_positive_int("moe_intermediate_size"));
  moe.moe_intermediate_size = value.value_or(config.intermediate_size);
  DI_ASSIGN(moe.num_shared_experts, non_negative_or(fields, "n_shared_experts", 0));
  DI_ASSIGN(moe.shared_expert_intermediate_size, non_negative_or(fields, "shared_expert_intermediate_size", 0));
  // Mixtral and GPT-OSS always renormalise their top-k; the others say so in norm_topk_prob.
  const bool always_normalised = config.model_type == "mixtral" || config.model_type == "gpt_oss";
  DI_ASSIGN(moe.norm_topk_prob, fields.boolean("norm_topk_prob", always_normalised));
  std::optional<std::string> text;
  DI_ASSIGN(text, fields.optional_string("scoring_func"));
  moe.scoring_func = text.value_or(config.model_type == "deepseek_v3" ? "sigmoid" : "softmax");
  if (moe.scoring_func != "softmax" && moe.scoring_func != "sigmoid") {
    return fields.invalid("scoring_func", "\"softmax\" or \"sigmoid\"", moe.scoring_func);
  }
  DI_ASSIGN(text, fields.optional_string("topk_method"));
  moe.topk_method = text.value_or(config.model_type == "deepseek_v3" ? "noaux_tc" : "greedy");
  if (moe.topk_method != "greedy" && moe.topk_method != "group_limited_greedy" && moe.topk_method != "noaux_tc") {
    return fields.invalid("topk_method", "one of greedy, group_limited_greedy, noaux_tc", moe.topk_method);
  }
  DI_ASSIGN(value, fields.optional_positive_int("n_group"));
  moe.n_group = value.value_or(1);
  DI_ASSIGN(value, fields.optional_positive_int("topk_group"));
  moe.topk_group = value.value_or(1);
  if (moe.topk_method != "greedy" &&
      (moe.num_experts % moe.n_group != 0 || moe.topk_group > moe.n_group)) {
    return fields.error("n_group (" + std::to_string(moe.n_group) + ") must divide the " +
                        std::to_string(moe.num_experts) + " experts and topk_group (" +
                        std::to_string(moe.topk_group) + ") must be at most n_group");
  }
  DI_ASSIGN(moe.routed_scaling_factor, fields.positive_number("routed_scaling_factor", 1.0));
  DI_ASSIGN(moe.first_k_dense_replace, non_negative_or(fields, "first_k_dense_replace", 0));
  DI_ASSIGN(value, fields.optional_positive_int("moe_layer_freq"));
  moe.moe_layer_freq = value.value_or(1);
  DI_ASSIGN(value, fields.optional_positive_int("decoder_sparse_step"));
  moe.decoder_sparse_step = value.value_or(1);
  if (fields.has("mlp_only_layers")) {
    const nlohmann::json& list = *fields.find("mlp_only_layers");
    bool valid = list.is_array();
    for (size_t i = 0; valid && i < list.size(); ++i) valid = list[i].is_number_integer() && list[i].get<int64_t>() >= 0;
    if (!valid) return fields.invalid("mlp_only_layers", "a list of layer indices", list);
    for (const auto& item : list) moe.mlp_only_layers.push_back(item.get<int64_t>());
  }
  config.moe = std::move(moe);
  return {};
}

Result<void> parse_mla(const JsonFields& fields, ModelConfig& config) {
  if (!fields.has("kv_lora_rank")) return {};
  MlaConfig mla;
  DI_ASSIGN(mla.q_lora_rank, fields.optional_positive_int("q_lora_rank"));
  DI_ASSIGN(mla.kv_lora_rank, fields.positive_int("kv_lora_rank"));
  DI_ASSIGN(mla.qk_nope_head_dim, fields.positive_int("qk_nope_head_dim"));
  DI_ASSIGN(mla.qk_rope_head_dim, fields.positive_int("qk_rope_head_dim"));
  DI_ASSIGN(mla.v_head_dim, fields.positive_int("v_head_dim"));
  config.mla = mla;
  return {};
}

// quantization_config: FP8's block shape (DeepSeek-V3, Qwen3-FP8), or GPT-OSS's MXFP4 experts.
Result<void> parse_quantization(const JsonFields& fields, ModelConfig& config) {
  const nlohmann::json* quant = fields.find("quantization_config");
  if (quant == nullptr) return {};
  if (!quant->is_object()) return fields.invalid("quantization_config", "an object", *quant);
  const std::string method = quant->value("quant_method", std::string());
  config.mxfp4_experts = method == "mxfp4";
  if (method != "fp8") return {};
  Fp8Config fp8;
  if (quant->contains("weight_block_size")) {
    const nlohmann::json& block = (*quant)["weight_block_size"];
    const bool valid = block.is_array() && block.size() == 2 && block[0].is_number_integer() &&
                       block[1].is_number_integer() && block[0].get<int64_t>() > 0 && block[1].get<int64_t>() > 0;
    if (!valid) {
      return fields.invalid("quantization_config", "weight_block_size of two positive integers [rows, cols]", *quant);
    }
    fp8.block_rows = block[0].get<int64_t>();
    fp8.block_cols = block[1].get<int64_t>();
  }
  config.fp8 = fp8;
  return {};
}

}  // namespace

bool MoeConfig::is_moe_layer(int64_t layer) const {
  if (layer < first_k_dense_replace || layer % moe_layer_freq != 0) return false;
  if ((layer + 1) % decoder_sparse_step != 0) return false;
  return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end();
}

Result<void> parse_moe_fields(const JsonFields& fields, ModelConfig& config) {
  DI_TRY(parse_moe(fields, config));
  DI_TRY(parse_mla(fields, config));
  DI_TRY(parse_quantization(fields, config));
  DI_ASSIGN(config.num_nextn_predict_layers, non_negative_or(fields, "num_nextn_predict_layers", 0));
  return {};
}

}  // namespace deepinfer
