// config.json's MoE / MLA / FP8 / MXFP4 fields: each family's spelling and defaults, the layer pattern,
// and errors that name the field.
#include <gtest/gtest.h>

#include "weights/hf_config.h"

namespace deepinfer {
namespace {

ModelConfig parse(const std::string& extra) {
  const std::string text = R"({"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
      "num_attention_heads": 4, "vocab_size": 100, )" + extra + "}";
  auto config = ModelConfig::parse(text, "config.json");
  EXPECT_TRUE(config.ok()) << config.error().message;
  return config.ok() ? *config : ModelConfig{};
}

TEST(HfConfigMoe, DeepseekV3DefaultsAndMla) {
  // The published DeepSeek-V3 config names neither scoring_func nor topk_method in transformers 5.
  const ModelConfig c = parse(R"("model_type": "deepseek_v3", "n_routed_experts": 16, "num_experts_per_tok": 3,
      "n_group": 4, "topk_group": 2, "n_shared_experts": 1, "moe_intermediate_size": 37, "first_k_dense_replace": 1,
      "routed_scaling_factor": 2.5, "norm_topk_prob": true, "q_lora_rank": 48, "kv_lora_rank": 32,
      "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12, "num_nextn_predict_layers": 1,
      "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 64]})");
  ASSERT_TRUE(c.moe && c.mla && c.fp8);
  EXPECT_EQ(c.moe->num_experts, 16);
  EXPECT_EQ(c.moe->scoring_func, "sigmoid");
  EXPECT_EQ(c.moe->topk_method, "noaux_tc");
  EXPECT_EQ(c.moe->routed_scaling_factor, 2.5);
  EXPECT_FALSE(c.moe->is_moe_layer(0));
  EXPECT_TRUE(c.moe->is_moe_layer(1));
  EXPECT_EQ(c.mla->q_lora_rank, 48);
  EXPECT_EQ(c.mla->v_head_dim, 12);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.fp8->block_rows, 128);
  EXPECT_EQ(c.fp8->block_cols, 64);
  const ModelConfig lite = parse(R"("model_type": "deepseek_v2", "n_routed_experts": 8, "num_experts_per_tok": 2,
      "q_lora_rank": null, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12)");
  ASSERT_TRUE(lite.mla);
  EXPECT_FALSE(lite.mla->q_lora_rank.has_value());
  EXPECT_EQ(lite.moe->scoring_func, "softmax");
  EXPECT_EQ(lite.moe->topk_method, "greedy");
  EXPECT_FALSE(lite.fp8.has_value());
}

TEST(HfConfigMoe, QwenMixtralAndGptOssSpellings) {
  // transformers 5 writes num_local_experts for Qwen3-MoE; older configs num_experts.
  for (const char* key : {"num_experts", "num_local_experts"}) {
    const ModelConfig c = parse(std::string(R"("model_type": "qwen3_moe", ")") + key +
                                R"(": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 37,
        "norm_topk_prob": true, "mlp_only_layers": [0, 2], "decoder_sparse_step": 1)");
    ASSERT_TRUE(c.moe) << key;
    EXPECT_EQ(c.moe->num_experts, 8);
    EXPECT_TRUE(c.moe->norm_topk_prob);
    EXPECT_EQ(c.moe->mlp_only_layers, (std::vector<int64_t>{0, 2}));
    EXPECT_FALSE(c.moe->is_moe_layer(0));
    EXPECT_TRUE(c.moe->is_moe_layer(1));
    EXPECT_FALSE(c.moe->is_moe_layer(2));
  }
  const ModelConfig mixtral = parse(R"("model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2)");
  ASSERT_TRUE(mixtral.moe);
  EXPECT_TRUE(mixtral.moe->norm_topk_prob);  // Mixtral always renormalises
  EXPECT_EQ(mixtral.moe->moe_intermediate_size, 96);  // its experts use intermediate_size
  const ModelConfig oss = parse(R"("model_type": "gpt_oss", "num_local_experts": 32, "experts_per_token": 4)");
  ASSERT_TRUE(oss.moe);
  EXPECT_EQ(oss.moe->num_experts_per_tok, 4);
  EXPECT_FALSE(oss.mxfp4_experts);
  // The published GPT-OSS checkpoints' quantization_config.
  const ModelConfig published = parse(R"("model_type": "gpt_oss", "num_local_experts": 32, "experts_per_token": 4,
      "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]})");
  EXPECT_TRUE(published.mxfp4_experts);
  EXPECT_FALSE(published.fp8.has_value());
  EXPECT_TRUE(parse(R"("model_type": "qwen3")").moe == std::nullopt);
}

TEST(HfConfigMoe, ErrorsNameTheField) {
  const std::string base = R"({"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 100, "model_type": "deepseek_v3", )";
  const auto error_of = [&](const std::string& extra) {
    auto config = ModelConfig::parse(base + extra + "}", "config.json");
    return config.ok() ? std::string() : config.error().message;
  };
  EXPECT_NE(error_of(R"("n_routed_experts": 4, "num_experts_per_tok": 5)").find("num_experts_per_tok"),
            std::string::npos);
  EXPECT_NE(error_of(R"("n_routed_experts": 4)").find("num_experts_per_tok"), std::string::npos);
  EXPECT_NE(error_of(R"("n_routed_experts": 6, "num_experts_per_tok": 2, "n_group": 4)").find("n_group"),
            std::string::npos);
  EXPECT_NE(error_of(R"("n_routed_experts": 4, "num_experts_per_tok": 2, "scoring_func": "relu")").find("scoring_func"),
            std::string::npos);
  EXPECT_NE(error_of(R"("kv_lora_rank": 32, "qk_nope_head_dim": 16)").find("qk_rope_head_dim"), std::string::npos);
  EXPECT_NE(error_of(R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [128]})")
                .find("weight_block_size"),
            std::string::npos);
}

}  // namespace
}  // namespace deepinfer
