// Qwen3-VL on the host backends against transformers (qwen2_vl_check.h): the tower with its
// interpolated position embeddings, the merger's and DeepStack mergers' rows, and the whole model's
// logprobs over a prompt holding the image at its interleaved M-RoPE positions, DeepStack rows added
// to the first layers' outputs.
#include <gtest/gtest.h>

#include "qwen2_vl_check.h"

namespace deepinfer {
namespace {

class Qwen3Vl : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen3Vl, EncoderAndImagePromptMatchTransformers) {
  auto backend = make_backend(GetParam());
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  testing::expect_qwen_vl_matches_transformers(**backend, 5e-6, "qwen3_vl");
}

TEST_P(Qwen3Vl, TwoImagePromptMatchesTransformers) {
  auto backend = make_backend(GetParam());
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  testing::expect_qwen_vl_two_image_prompt_matches_transformers(**backend, "qwen3_vl");
}

INSTANTIATE_TEST_SUITE_P(HostBackends, Qwen3Vl, ::testing::Values("cpu", "ref"));

// The config as transformers wrote it and the processor's preprocessor_config.json.
TEST(Qwen3VlConfig, ReadsTheTowerTheRopeAndTheProcessor) {
  auto config = ModelConfig::load(testing::fixture_dir("qwen3_vl"));
  ASSERT_TRUE(config.ok()) << config.error().message;
  ASSERT_TRUE(config->qwen2_vl_vision.has_value());
  const Qwen2VlVisionConfig& vision = *config->qwen2_vl_vision;
  EXPECT_TRUE(vision.qwen3);
  EXPECT_EQ(vision.patch_size, 16);
  EXPECT_EQ(vision.num_position_embeddings, 16);
  EXPECT_EQ(vision.deepstack_visual_indexes, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(vision.image_mean, (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(vision.min_pixels, 64 * 64);
  EXPECT_EQ(vision.max_pixels, 32 * 32 * 64);
  EXPECT_TRUE(config->rope.mrope_interleaved);
  EXPECT_EQ(config->rope.mrope_section, (std::vector<int64_t>{2, 3, 3}));
}

}  // namespace
}  // namespace deepinfer
