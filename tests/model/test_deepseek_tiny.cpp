// Per-expert routed-token counters and the kept MTP block on the trained DeepSeek-V3-architecture
// model models/deepinfer-tiny-v3 (its logits against transformers: test_default_model.cpp).
#include <gtest/gtest.h>

#include <numeric>

#include "engine/generator.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer {
namespace {

std::string model_dir() { return std::string(DEEPINFER_TEST_DATA_DIR) + "/../../models/deepinfer-tiny-v3"; }

struct Loaded {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CausalLM> model;
};

Loaded load(const std::string& device, bool batch_invariant) {
  Loaded loaded;
  BackendOptions options;
  options.batch_invariant = batch_invariant;
  loaded.backend = std::move(make_backend(device, options).value());
  auto model = load_model(model_dir(), *loaded.backend, false);
  if (!model.ok()) {
    ADD_FAILURE() << model.error().message;
  } else {
    loaded.model = std::move(*model);
  }
  return loaded;
}

TEST(DeepinferTinyV3, KeepsMtpLayerAndCountsRoutedTokens) {
  Loaded loaded = load("cpu", false);
  ASSERT_TRUE(loaded.model);
  auto* decoder = dynamic_cast<DenseDecoder*>(loaded.model.get());
  ASSERT_NE(decoder, nullptr);
  ASSERT_EQ(decoder->mtp_layers().size(), 1u);
  const MtpLayerWeights& mtp = decoder->mtp_layers().front();
  EXPECT_TRUE(mtp.confidence_head.has_value());
  EXPECT_TRUE(mtp.embed_tokens.has_value());
  EXPECT_EQ(mtp.eh_proj.in_features, 2 * loaded.model->config().hidden_size);
  EXPECT_TRUE(std::holds_alternative<MoeLayer>(mtp.block.ffn));

  const std::vector<int32_t> tokens = {0, 17, 2347, 343, 81, 23, 611};
  Generator generator(*loaded.model, 16, 64);
  ASSERT_TRUE(generator.append(tokens, false).ok());
  ASSERT_TRUE(generator.append({5}, false).ok());
  const ExpertTokenCounts counts = decoder->expert_token_counts();
  // first_k_dense_replace 1 of 3 layers: layers 1 and 2 route every token to top-2 experts.
  ASSERT_EQ(counts.layer_ids, (std::vector<int64_t>{1, 2}));
  for (const auto& layer : counts.counts) {
    ASSERT_EQ(layer.size(), 8u);
    EXPECT_EQ(std::accumulate(layer.begin(), layer.end(), int64_t{0}), 8 * 2);
  }
  decoder->reset_expert_token_counts();
  for (const auto& layer : decoder->expert_token_counts().counts) {
    EXPECT_EQ(std::accumulate(layer.begin(), layer.end(), int64_t{0}), 0);
  }
}

}  // namespace
}  // namespace deepinfer
