// routed_weight_bytes_per_step on the DeepSeek-V3-architecture model models/deepinfer-tiny-v3
// (bf16, 8 routed experts of 3 x 192 x 256, top-2, MoE layers 1 and 2): one token reads exactly
// weight_bytes_per_token; a batch adds one expert's bytes per extra expert it routes to. And the
// counts' summaries deepinfer bench prints (the busiest tenth's share, busiest over mean).
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

TEST(RoutedWeightBytes, CountSummaries) {
  ExpertTokenCounts counts;
  EXPECT_EQ(counts.busiest_share(0.1), 0.0);
  EXPECT_EQ(counts.busiest_over_mean(), 0.0);
  // 20 experts: the busiest tenth is 2 of them. Layer 0 even; layer 1 skewed; layer 2 idle.
  counts.counts = {std::vector<int64_t>(20, 5), std::vector<int64_t>(20, 1), std::vector<int64_t>(20, 0)};
  counts.counts[1][7] = 61;
  counts.counts[1][3] = 20;
  // Busiest two: 5 + 5 of 100 in layer 0, 61 + 20 of 99 in layer 1.
  EXPECT_DOUBLE_EQ(counts.busiest_share(0.1), 91.0 / 199.0);
  // 11 of the 20 (ceil 10.2): 55 tokens in layer 0, 61 + 20 + 9 in layer 1.
  EXPECT_DOUBLE_EQ(counts.busiest_share(0.51), (55.0 + 61 + 20 + 9) / 199.0);
  // Layer 0: 5 / 5; layer 1: 61 / (99 / 20); the idle layer is left out.
  EXPECT_DOUBLE_EQ(counts.busiest_over_mean(), (1.0 + 61.0 * 20 / 99) / 2);
}

}  // namespace
}  // namespace deepinfer
