// Qwen2.5-VL on the host backends against transformers (qwen2_vl_check.h): the windowed tower and
// merger's rows, and the whole model's logprobs over a prompt holding the image at its M-RoPE
// positions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "qwen2_vl_check.h"

namespace deepinfer {
namespace {

class Qwen2Vl : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen2Vl, EncoderAndImagePromptMatchTransformers) {
  auto backend = make_backend(GetParam());
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  testing::expect_qwen_vl_matches_transformers(**backend, 5e-6);
}

TEST_P(Qwen2Vl, TwoImagePromptMatchesTransformers) {
  auto backend = make_backend(GetParam());
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  testing::expect_qwen_vl_two_image_prompt_matches_transformers(**backend, "qwen2_5_vl");
}

INSTANTIATE_TEST_SUITE_P(HostBackends, Qwen2Vl, ::testing::Values("cpu", "ref"));

// A tower the code cannot run is named when the model loads.
TEST(Qwen2VlLoad, ConfigErrorsAreNamed) {
  auto config = ModelConfig::load(testing::fixture_dir("qwen2_5_vl"));
  ASSERT_TRUE(config.ok()) << config.error().message;
  ASSERT_TRUE(config->qwen2_vl_vision.has_value());
  EXPECT_EQ(config->qwen2_vl_vision->depth, 2);
  EXPECT_EQ(config->qwen2_vl_vision->fullatt_block_indexes, std::vector<int64_t>{1});
  EXPECT_EQ(config->qwen2_vl_vision->window_size, 56);
  EXPECT_EQ(config->rope.mrope_section, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_TRUE(config->attention_bias);
  // mrope_section must cover the rotary half's 8 frequencies.
  const auto dir = std::filesystem::temp_directory_path() / ("deepinfer-qwen2-vl-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  nlohmann::json raw = config->raw;
  raw["text_config"]["rope_parameters"]["mrope_section"] = {2, 3, 4};
  std::ofstream(dir / "config.json") << raw.dump(2);
  std::filesystem::copy_file(testing::fixture_dir("qwen2_5_vl") + "/model.safetensors", dir / "model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  auto backend = make_backend("ref").value();
  auto model = load_model(dir.string(), *backend, false);
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("mrope_section must be 3 sizes"), std::string::npos) << model.error().message;
}

}  // namespace
}  // namespace deepinfer
