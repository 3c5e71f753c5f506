// config.json parsing for the sliding-window families: Gemma 3's attention scale, soft-capping,
// activation, the defaults its multimodal text_config omits and its SigLIP vision_config; GPT-OSS's
// published config.
// Expected values follow transformers' Gemma3TextConfig and GptOssConfig.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "weights/hf_config.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;

ModelConfig parse_ok(const std::string& text) {
  Result<ModelConfig> config = ModelConfig::parse(text, "config.json");
  EXPECT_TRUE(config.ok()) << config.error().message;
  return config.ok() ? config.value() : ModelConfig{};
}

std::string parse_error(const std::string& text) {
  Result<ModelConfig> config = ModelConfig::parse(text, "config.json");
  EXPECT_FALSE(config.ok());
  return config.ok() ? "" : config.error().message;
}

const char* kGemma3Text = R"("architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
    "head_dim": 256, "hidden_size": 1152, "intermediate_size": 6912, "max_position_embeddings": 32768,
    "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "rms_norm_eps": 1e-06,
    "sliding_window": 512, "vocab_size": 262144, "rope_local_base_freq": 10000, "rope_theta": 1000000,
    "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256)";

TEST(HfConfigSwaTest, Gemma3ScaleSoftcapAndActivation) {
  const ModelConfig plain = parse_ok(std::string("{") + kGemma3Text + R"(, "final_logit_softcapping": null,
      "attn_logit_softcapping": null})");
  EXPECT_EQ(plain.query_pre_attn_scalar, 256.0);
  EXPECT_FALSE(plain.final_logit_softcapping.has_value());
  EXPECT_EQ(plain.hidden_activation, "gelu_pytorch_tanh");
  const ModelConfig capped = parse_ok(std::string("{") + kGemma3Text + R"(, "final_logit_softcapping": 30.0})");
  EXPECT_EQ(capped.final_logit_softcapping, 30.0);
  // Llama-family configs name the activation hidden_act.
  const ModelConfig llama = parse_ok(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8,
      "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "hidden_act": "silu"})");
  EXPECT_EQ(llama.hidden_activation, "silu");
  EXPECT_FALSE(llama.query_pre_attn_scalar.has_value());
}

TEST(HfConfigSwaTest, AttentionLogitSoftcappingIsRefused) {
  Result<ModelConfig> config =
      ModelConfig::parse(std::string("{") + kGemma3Text + R"(, "attn_logit_softcapping": 50.0})", "config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.error().message, HasSubstr("'attn_logit_softcapping' is set"));
  config = ModelConfig::parse(std::string("{") + kGemma3Text + R"(, "final_logit_softcapping": -1})", "config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.error().message, HasSubstr("final_logit_softcapping"));
}

// google/gemma-3-4b-it's text_config lists only what differs from Gemma3TextConfig.
TEST(HfConfigSwaTest, Gemma3SparseTextConfigTakesTheClassDefaults) {
  const ModelConfig c = parse_ok(R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
      "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                      "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                      "sliding_window": 1024}})");
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.vocab_size, 262208);
  EXPECT_EQ(c.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.hidden_activation, "gelu_pytorch_tanh");
  EXPECT_EQ(c.rope.type, RopeType::kLinear);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.theta, 1e6);
  ASSERT_TRUE(c.sliding_rope.has_value());
  EXPECT_EQ(c.sliding_rope->type, RopeType::kDefault);  // the local rope is never scaled
  EXPECT_EQ(c.sliding_rope->theta, 1e4);
  EXPECT_TRUE(c.tie_word_embeddings);
  for (int i = 0; i < 34; ++i) EXPECT_EQ(c.layer_sliding_window[i], (i + 1) % 6 ? 1024 : 0) << "layer " << i;
}

// google/gemma-3-4b-it's vision_config and image fields (SiglipVisionConfig's defaults for the rest).
TEST(HfConfigSwaTest, Gemma3SiglipVisionConfig) {
  const std::string text = R"("text_config": {"hidden_size": 2560, "model_type": "gemma3_text"})";
  const ModelConfig c = parse_ok(R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
      "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144, "mm_tokens_per_image": 256,
      )" + text + R"(, "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
      "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14,
      "vision_use_head": false}})");
  ASSERT_TRUE(c.vision.has_value());
  EXPECT_EQ(c.vision->hidden_size, 1152);
  EXPECT_EQ(c.vision->num_hidden_layers, 27);
  EXPECT_EQ(c.vision->num_channels, 3);
  EXPECT_EQ(c.vision->layer_norm_eps, 1e-6);
  EXPECT_EQ(c.vision->num_patches(), 64 * 64);
  EXPECT_EQ(c.vision->mm_tokens_per_image, 256);
  EXPECT_EQ(c.vision->image_token_id, 262144);
  EXPECT_EQ(c.vision->hidden_act, "gelu_pytorch_tanh");
  // A text-only Gemma 3 has none; a field of the wrong type is named.
  EXPECT_FALSE(parse_ok(std::string("{") + kGemma3Text + "}").vision.has_value());
  EXPECT_THAT(parse_error(R"({"architectures": ["Gemma3ForConditionalGeneration"], )" + text +
                          R"(, "vision_config": {"model_type": "siglip_vision_model", "hidden_size": -3}})"),
              HasSubstr("vision_config.hidden_size"));
}

// openai/gpt-oss-20b's config.json (old rope format, yarn without truncation).
TEST(HfConfigSwaTest, GptOss20b) {
  std::string layer_types;
  for (int i = 0; i < 24; ++i) {
    layer_types += std::string(i ? ", " : "") + (i % 2 ? "\"full_attention\"" : "\"sliding_attention\"");
  }
  const ModelConfig c = parse_ok(R"({"architectures": ["GptOssForCausalLM"], "attention_bias": true,
      "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
      "initial_context_length": 4096, "intermediate_size": 2880, "layer_types": [)" + layer_types + R"(],
      "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
      "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
      "rms_norm_eps": 1e-05, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
      "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false}, "rope_theta": 150000,
      "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": false, "vocab_size": 201088})");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.theta, 150000.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_FALSE(c.sliding_rope.has_value());
  EXPECT_FALSE(c.tie_word_embeddings);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(c.layer_sliding_window[i], i % 2 ? 0 : 128) << "layer " << i;
}

}  // namespace
}  // namespace deepinfer
