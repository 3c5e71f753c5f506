// decoder_matmul_params from the models' own config.json files (bench/configs) against the active
// parameter counts their publishers state: Qwen3-30B-A3B 3.3B activated, counting the embedding and
// the output head (Qwen3's model card); GPT-OSS-20B 3.61B active, the output head counted and the
// embedding not (OpenAI's model card); DeepSeek-V2-Lite 2.4B activated (the DeepSeek-V2 paper;
// counted as GPT-OSS's). Ours leaves out norms, biases and sinks: within 3 %. prompt_attention_flops
// against the pairs counted one by one, for full and sliding-window layers.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "model/flop_count.h"

namespace deepinfer {
namespace {

ModelConfig bench_config(const std::string& name) {
  const std::string path = std::string(DEEPINFER_SOURCE_DIR) + "/bench/configs/" + name + ".json";
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  auto config = ModelConfig::parse(text.str(), path);
  EXPECT_TRUE(config.ok()) << (config.ok() ? "" : config.error().message);
  return config.ok() ? *config : ModelConfig{};
}

double embedding(const ModelConfig& c) { return static_cast<double>(c.vocab_size * c.hidden_size); }

TEST(FlopCount, ActiveParametersMatchThePublishedCounts) {
  const ModelConfig qwen3 = bench_config("qwen3-30b-a3b");
  const ModelConfig gpt_oss = bench_config("gpt-oss-20b");
  const ModelConfig v2_lite = bench_config("deepseek-v2-lite");
  EXPECT_NEAR((decoder_matmul_params(qwen3) + 2 * embedding(qwen3)) / 3.3e9, 1.0, 0.03);
  EXPECT_NEAR((decoder_matmul_params(gpt_oss) + embedding(gpt_oss)) / 3.61e9, 1.0, 0.03);
  EXPECT_NEAR((decoder_matmul_params(v2_lite) + embedding(v2_lite)) / 2.4e9, 1.0, 0.03);
}

TEST(FlopCount, PromptAttentionCountsTheKeysEachLayerSees) {
  ModelConfig gpt_oss = bench_config("gpt-oss-20b");
  ASSERT_EQ(gpt_oss.layer_sliding_window.size(), static_cast<size_t>(gpt_oss.num_hidden_layers));
  for (const double n : {1.0, 100.0, 128.0, 129.0, 4096.0}) {
    double pairs = 0.0;
    for (const int32_t window : gpt_oss.layer_sliding_window) {
      for (int64_t q = 0; q < static_cast<int64_t>(n); ++q) {
        pairs += window > 0 ? std::min<double>(static_cast<double>(q + 1), window) : static_cast<double>(q + 1);
      }
    }
    const double per_pair = 2.0 * 2 * static_cast<double>(gpt_oss.head_dim * gpt_oss.num_attention_heads);
    EXPECT_DOUBLE_EQ(prompt_attention_flops(gpt_oss, n), per_pair * pairs) << "n " << n;
  }
  // MLA: q.k over nope + rope dims, p.v over v_head_dim.
  const ModelConfig v2_lite = bench_config("deepseek-v2-lite");
  const double n = 1000.0;
  EXPECT_DOUBLE_EQ(prompt_attention_flops(v2_lite, n),
                   2.0 * (192 + 128) * 16 * static_cast<double>(v2_lite.num_hidden_layers) * n * (n + 1) / 2);
}

}  // namespace
}  // namespace deepinfer
