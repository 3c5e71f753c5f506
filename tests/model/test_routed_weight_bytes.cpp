// routed_weight_bytes_per_step on the DeepSeek-V3-architecture model models/deepinfer-tiny-v3
// (bf16, 8 routed experts of 3 x 192 x 256, top-2, MoE layers 1 and 2): one token reads exactly
// weight_bytes_per_token; a batch adds one expert's bytes per extra expert it routes to.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/generator.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer {
namespace {

std::string model_dir() { return std::string(DEEPINFER_TEST_DATA_DIR) + "/../../models/deepinfer-tiny-v3"; }

TEST(RoutedWeightBytes, CountsTheExpertsAStepRoutesTo) {
  auto backend = make_backend("cpu", BackendOptions{});
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  auto model = load_model(model_dir(), **backend, false);
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto* decoder = dynamic_cast<DenseDecoder*>(model->get());
  ASSERT_NE(decoder, nullptr);
  const ModelConfig& config = (*model)->config();
  ASSERT_TRUE(config.moe.has_value());
  // gate, up and down of one expert, bf16.
  const int64_t expert_bytes = 3 * config.moe->moe_intermediate_size * config.hidden_size * 2;
  const int64_t top_k = config.moe->num_experts_per_tok;

  Generator generator(**model, 16, 64);
  decoder->reset_expert_token_counts();
  ASSERT_TRUE(generator.append({17}, false).ok());
  EXPECT_EQ((*model)->routed_weight_bytes_per_step(), (*model)->weight_bytes_per_token());

  decoder->reset_expert_token_counts();
  ASSERT_TRUE(generator.append({0, 2347, 343, 81, 23, 611, 9, 1200, 77, 5}, false).ok());
  int64_t extra_experts = 0;
  for (const auto& layer : decoder->expert_token_counts().counts) {
    extra_experts += std::count_if(layer.begin(), layer.end(), [](int64_t count) { return count > 0; }) - top_k;
  }
  EXPECT_GT(extra_experts, 0) << "ten tokens should reach more than top_k experts in some layer";
  EXPECT_EQ((*model)->routed_weight_bytes_per_step(), (*model)->weight_bytes_per_token() + extra_experts * expert_bytes);
}

}  // namespace
}  // namespace deepinfer
