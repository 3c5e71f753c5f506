// Gemma 3's image encoder on the host backends against transformers (gemma3_vision_check.h). Both
// land within float32 rounding: 5.1e-7 of the largest value for the tower, 1.9e-7 for the projector;
// the whole model's prompt with an image gives transformers' logprobs.
#include <gtest/gtest.h>

#include "gemma3_vision_check.h"

namespace deepinfer {
namespace {

class Siglip : public ::testing::TestWithParam<std::string> {};

TEST_P(Siglip, TowerAndProjectorMatchTransformers) {
  auto backend = make_backend(GetParam());
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  testing::expect_gemma3_vision_matches_transformers(**backend, 5e-6);
}

TEST_P(Siglip, ImagePromptMatchesTransformers) {
  auto backend = make_backend(GetParam());
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  testing::expect_gemma3_image_prompt_matches_transformers(**backend, 5e-6);
}

TEST_P(Siglip, TwoImagePromptMatchesTransformers) {
  auto backend = make_backend(GetParam());
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  testing::expect_gemma3_two_image_prompt_matches_transformers(**backend);
}

INSTANTIATE_TEST_SUITE_P(HostBackends, Siglip, ::testing::Values("cpu", "ref"));

// A tower shape or activation the code cannot run is named when the tower loads (a text-only load
// of the same checkpoint never looks at it).
TEST(SiglipLoad, UnsupportedTowersAreNamed) {
  const std::string dir = testing::fixture_dir("gemma3_vision");
  auto config = ModelConfig::load(dir);
  ASSERT_TRUE(config.ok()) << config.error().message;
  auto store = WeightStore::open_dir(dir, false);
  ASSERT_TRUE(store.ok());
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.ok());
  ModelSource source;
  source.config = *config;
  source.weights = std::make_shared<const WeightStore>(std::move(gemma3_vision_weights(*store).value()));
  source.backend = backend->get();
  source.arena = std::make_shared<WeightArena>();
  VisionConfig relu = *config->vision;
  relu.hidden_act = "relu";
  auto refused = SiglipVisionTower::load(source, "vision_tower.", relu);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message,
            "vision_config: hidden_act 'relu' is not supported (SigLIP towers run the tanh GELU: gelu_pytorch_tanh)");
  VisionConfig three_heads = *config->vision;
  three_heads.num_attention_heads = 3;
  refused = SiglipVisionTower::load(source, "vision_tower.", three_heads);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("hidden_size 32 over 3 attention heads"), std::string::npos)
      << refused.error().message;
}

}  // namespace
}  // namespace deepinfer
