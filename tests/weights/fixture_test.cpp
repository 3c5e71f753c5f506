// The tiny checkpoints in tests/data/ were written by transformers and the reference
// safetensors library (tools/reference/make_fixtures.py). Reading them checks the reader on
// the reference writer's bytes, and checks the parsed config against the tensors transformers
// actually saved: their shapes follow head_dim, the kv heads, the biases and tied embeddings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "weights/hf_config.h"
#include "weights/safetensors.h"

namespace deepinfer {
namespace {

std::string fixture(const std::string& name) { return std::string(DEEPINFER_TEST_DATA_DIR) + "/" + name; }

std::vector<std::string> checkpoint_dirs() {
  std::vector<std::string> dirs;
  for (const auto& entry : std::filesystem::directory_iterator(DEEPINFER_TEST_DATA_DIR)) {
    if (std::filesystem::exists(entry.path() / "config.json") &&
        std::filesystem::exists(entry.path() / "model.safetensors")) {
      dirs.push_back(entry.path().filename().string());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// The tensors of a Llama-family decoder (Llama, Mistral, Qwen2, Qwen3) with the shapes the
// parsed config implies.
std::map<std::string, std::vector<int64_t>> expected_tensors(const ModelConfig& c) {
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  std::map<std::string, std::vector<int64_t>> tensors = {{"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}},
                                                         {"model.norm.weight", {c.hidden_size}}};
  if (!c.tie_word_embeddings) tensors["lm_head.weight"] = {c.vocab_size, c.hidden_size};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    tensors[p + "input_layernorm.weight"] = {c.hidden_size};
    tensors[p + "post_attention_layernorm.weight"] = {c.hidden_size};
    tensors[p + "self_attn.q_proj.weight"] = {q_dim, c.hidden_size};
    tensors[p + "self_attn.k_proj.weight"] = {kv_dim, c.hidden_size};
    tensors[p + "self_attn.v_proj.weight"] = {kv_dim, c.hidden_size};
    tensors[p + "self_attn.o_proj.weight"] = {c.hidden_size, q_dim};
    if (c.attention_bias) {
      tensors[p + "self_attn.q_proj.bias"] = {q_dim};
      tensors[p + "self_attn.k_proj.bias"] = {kv_dim};
      tensors[p + "self_attn.v_proj.bias"] = {kv_dim};
    }
    if (c.model_type == "qwen3") {
      tensors[p + "self_attn.q_norm.weight"] = {c.head_dim};
      tensors[p + "self_attn.k_norm.weight"] = {c.head_dim};
    }
    tensors[p + "mlp.gate_proj.weight"] = {c.intermediate_size, c.hidden_size};
    tensors[p + "mlp.up_proj.weight"] = {c.intermediate_size, c.hidden_size};
    tensors[p + "mlp.down_proj.weight"] = {c.hidden_size, c.intermediate_size};
  }
  return tensors;
}

TEST(FixtureTest, ConfigMatchesTheSavedTensors) {
  const std::vector<std::string> dirs = checkpoint_dirs();
  ASSERT_GE(dirs.size(), 7u) << "tests/data should hold the transformers fixtures";
  for (const std::string& name : dirs) {
    SCOPED_TRACE(name);
    Result<ModelConfig> config = ModelConfig::load(fixture(name));
    ASSERT_TRUE(config.ok()) << config.error().message;
    // MoE / MLA fixtures, Gemma's sandwich norms and image-text models (a vision tower beside the
    // decoder) have other tensor sets; tests/model loads and checks them.
    if (config->moe || config->mla || config->model_type.starts_with("gemma") ||
        config->raw.contains("vision_config")) {
      continue;
    }
    Result<WeightStore> store = WeightStore::open_dir(fixture(name), false);
    ASSERT_TRUE(store.ok()) << store.error().message;
    EXPECT_EQ(store->metadata().at("format"), "pt");
    EXPECT_EQ(config->dtype, DType::kF32);
    const auto expected = expected_tensors(*config);
    EXPECT_EQ(store->names().size(), expected.size());
    for (const auto& [tensor, shape] : expected) {
      Result<TensorView> view = store->get(tensor, shape);
      ASSERT_TRUE(view.ok()) << view.error().message;
      EXPECT_EQ(view->dtype, DType::kF32);
    }
  }
}

TEST(FixtureTest, RopeAndWindowsOfEachFixture) {
  const ModelConfig tied = ModelConfig::load(fixture("llama3_tied")).value();  // old format
  EXPECT_EQ(tied.rope.type, RopeType::kLlama3);
  EXPECT_EQ(tied.rope.theta, 500000.0);
  EXPECT_EQ(tied.rope.original_max_position_embeddings, 64);
  EXPECT_TRUE(tied.tie_word_embeddings);
  const ModelConfig yarn = ModelConfig::load(fixture("qwen3_yarn")).value();
  EXPECT_EQ(yarn.rope.type, RopeType::kYarn);
  EXPECT_EQ(yarn.rope.factor, 4.0);
  EXPECT_EQ(yarn.rope.original_max_position_embeddings, 16);
  EXPECT_EQ(yarn.head_dim, 24);
  EXPECT_EQ(ModelConfig::load(fixture("llama_linear")).value().rope.type, RopeType::kLinear);
  EXPECT_EQ(ModelConfig::load(fixture("mistral_swa")).value().layer_sliding_window, (std::vector<int32_t>{8, 8}));
  const ModelConfig qwen2 = ModelConfig::load(fixture("qwen2")).value();
  EXPECT_TRUE(qwen2.attention_bias);
  EXPECT_EQ(qwen2.layer_sliding_window, (std::vector<int32_t>{0, 0}));
}

}  // namespace
}  // namespace deepinfer
