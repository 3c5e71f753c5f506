// Gemma3ForConditionalGeneration, the layout of the published multimodal Gemma 3 checkpoints: the
// gemma3 fixture's weights rewritten under both of transformers' spellings (language_model.model.*
// before 4.52, model.language_model.* after; text_config nested in a gemma3 config) give the plain
// Gemma3ForCausalLM fixture's logits bit for bit, less its final soft-capping, which transformers'
// Gemma3ForConditionalGeneration does not apply (the gemma3_vision fixture, from transformers,
// checks that: test_siglip.cpp). The plain fixture matches transformers (test_fixtures.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "fixtures.h"
#include "model/model.h"

namespace deepinfer {
namespace {

// Writes the gemma3 fixture as a Gemma3ForConditionalGeneration checkpoint into dir, the text
// model's "model." tensors under text_prefix.
void write_multimodal_copy(const std::filesystem::path& dir, const std::string& text_prefix) {
  std::filesystem::create_directories(dir);
  nlohmann::json text;
  std::ifstream(testing::fixture_dir("gemma3") + "/config.json") >> text;
  text.erase("architectures");
  const nlohmann::json config = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                                 {"model_type", "gemma3"},
                                 {"text_config", text},
                                 {"mm_tokens_per_image", 4},
                                 {"boi_token_index", 394},
                                 {"eoi_token_index", 395},
                                 {"image_token_index", 396}};
  std::ofstream(dir / "config.json") << config.dump(2);

  const WeightStore plain = WeightStore::open_dir(testing::fixture_dir("gemma3"), false).value();
  std::vector<TensorView> tensors;
  for (const std::string& name : plain.names()) {
    TensorView view = *plain.find(name);
    ASSERT_TRUE(name.starts_with("model.")) << name;
    view.name = text_prefix + name.substr(6);
    tensors.push_back(view);
  }
  ASSERT_TRUE(write_safetensors((dir / "model.safetensors").string(), tensors).ok());
}

// The plain fixture with final_logit_softcapping null.
void write_uncapped_copy(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  nlohmann::json config;
  std::ifstream(testing::fixture_dir("gemma3") + "/config.json") >> config;
  config["final_logit_softcapping"] = nullptr;
  std::ofstream(dir / "config.json") << config.dump(2);
  std::filesystem::copy_file(testing::fixture_dir("gemma3") + "/model.safetensors", dir / "model.safetensors");
}

std::vector<float> score(const std::string& dir, const std::vector<int32_t>& tokens) {
  auto backend = make_backend("cpu").value();
  auto model = load_model(dir, *backend, false);
  if (!model.ok()) {
    ADD_FAILURE() << model.error().message;
    return {};
  }
  Generator generator(**model, 16, static_cast<int64_t>(tokens.size()));
  return generator.append(tokens, true).value();
}

TEST(Gemma3Multimodal, BothCheckpointLayoutsGiveTheTextModelsLogits) {
  const auto tokens = testing::load_expected("gemma3")["score"]["tokens"].get<std::vector<int32_t>>();
  const auto root = std::filesystem::temp_directory_path() / ("deepinfer-gemma3-mm-" + std::to_string(::getpid()));
  write_uncapped_copy(root / "uncapped");
  const std::vector<float> want = score((root / "uncapped").string(), tokens);
  ASSERT_FALSE(want.empty());
  EXPECT_NE(want, score(testing::fixture_dir("gemma3"), tokens)) << "the fixture's soft-capping moves its logits";
  for (const std::string prefix : {"language_model.model.", "model.language_model."}) {
    const auto dir = root / prefix;
    write_multimodal_copy(dir, prefix);
    EXPECT_EQ(score(dir.string(), tokens), want) << prefix;
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace deepinfer
