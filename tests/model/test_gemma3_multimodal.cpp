// Gemma3ForConditionalGeneration, the layout of the published multimodal Gemma 3 checkpoints: the
// gemma3 fixture's weights rewritten under both of transformers' spellings (language_model.model.*
// before 4.52, model.language_model.* after; text_config nested in a gemma3 config beside a
// vision_config, vision tensors that are not read) give the plain Gemma3ForCausalLM fixture's
// logits bit for bit, and those match transformers (test_fixtures.cpp). The vision tower itself is
// not run (issue 28).
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
                                 {"vision_config",
                                  {{"model_type", "siglip_vision_model"},
                                   {"hidden_size", 16},
                                   {"num_attention_heads", 2},
                                   {"image_size", 32},
                                   {"patch_size", 8}}},
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
  // A vision tower's tensors sit beside the language model's and are not read.
  const std::vector<float> patch(16 * 3 * 8 * 8, 0.5f);
  const std::string vision = text_prefix.starts_with("model.") ? "model.vision_tower." : "vision_tower.";
  TensorView patch_embedding;
  patch_embedding.name = vision + "vision_model.embeddings.patch_embedding.weight";
  patch_embedding.shape = {16, 3, 8, 8};
  patch_embedding.data = patch.data();
  patch_embedding.size_bytes = patch.size() * sizeof(float);
  tensors.push_back(patch_embedding);
  ASSERT_TRUE(write_safetensors((dir / "model.safetensors").string(), tensors).ok());
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
  const std::vector<float> want = score(testing::fixture_dir("gemma3"), tokens);
  ASSERT_FALSE(want.empty());
  const auto root = std::filesystem::temp_directory_path() / ("deepinfer-gemma3-mm-" + std::to_string(::getpid()));
  for (const std::string prefix : {"language_model.model.", "model.language_model."}) {
    const auto dir = root / prefix;
    write_multimodal_copy(dir, prefix);
    EXPECT_EQ(score(dir.string(), tokens), want) << prefix;
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace deepinfer
