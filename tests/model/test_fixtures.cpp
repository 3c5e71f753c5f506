// The dense architectures against transformers: per-position top-k logprobs and greedy
// continuations of tiny random models, computed by transformers in float32.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "engine/generator.h"
#include "fixtures.h"
#include "model/model.h"

namespace deepinfer {
namespace {

using testing::expect_greedy_matches;
using testing::expect_matches_score;
using testing::fixture_dir;
using testing::load_expected;
using testing::logprob_close;

struct Loaded {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CausalLM> model;
};

Loaded load(const std::string& name, const std::string& device = "cpu") {
  Loaded loaded;
  loaded.backend = std::move(make_backend(device).value());
  auto model = load_model(fixture_dir(name), *loaded.backend, false);
  if (!model.ok()) ADD_FAILURE() << model.error().message;
  else loaded.model = std::move(*model);
  return loaded;
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, ScoreMatchesTransformers) {
  const nlohmann::json expected = load_expected(GetParam());
  Loaded loaded = load(GetParam());
  ASSERT_TRUE(loaded.model);
  const auto tokens = expected["score"]["tokens"].get<std::vector<int32_t>>();
  Generator generator(*loaded.model, 16, static_cast<int64_t>(tokens.size()));
  auto logits = generator.append(tokens, true);
  ASSERT_TRUE(logits.ok()) << logits.error().message;
  expect_matches_score(expected["score"], *logits, loaded.model->config().vocab_size);
}

TEST_P(FixtureTest, GreedyMatchesTransformersUpToFirstNearTie) {
  const nlohmann::json expected = load_expected(GetParam());
  Loaded loaded = load(GetParam());
  ASSERT_TRUE(loaded.model);
  const auto& greedy = expected["greedy"];
  Generator generator(*loaded.model, 4);
  expect_greedy_matches(greedy, generator);
}

// Chunked prefill over a cached prefix and different page sizes give the same logits as one pass.
TEST_P(FixtureTest, ChunkingAndBlockSizeDoNotChangeLogits) {
  const nlohmann::json expected = load_expected(GetParam());
  Loaded loaded = load(GetParam());
  ASSERT_TRUE(loaded.model);
  const auto tokens = expected["score"]["tokens"].get<std::vector<int32_t>>();
  const auto n = static_cast<int64_t>(tokens.size());
  Generator whole(*loaded.model, 128, n, 512);
  const std::vector<float> reference = whole.append(tokens, true).value();
  for (const auto& [block_size, chunk] : std::vector<std::pair<int32_t, int32_t>>{{1, 5}, {16, 7}, {3, 32}}) {
    Generator chunked(*loaded.model, block_size, n, chunk);
    const std::vector<float> got = chunked.append(tokens, true).value();
    ASSERT_EQ(got.size(), reference.size());
    float max_diff = 0.0f;
    for (size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, std::abs(got[i] - reference[i]));
    EXPECT_LT(max_diff, 1e-4f) << "block_size " << block_size << " chunk " << chunk;
  }
}

// The optimised CPU backend and the scalar reference backend agree on the whole model.
TEST_P(FixtureTest, CpuBackendMatchesReferenceBackend) {
  const nlohmann::json expected = load_expected(GetParam());
  const auto tokens = expected["score"]["tokens"].get<std::vector<int32_t>>();
  Loaded cpu = load(GetParam(), "cpu");
  Loaded ref = load(GetParam(), "ref");
  ASSERT_TRUE(cpu.model && ref.model);
  Generator cpu_gen(*cpu.model, 8, static_cast<int64_t>(tokens.size()));
  Generator ref_gen(*ref.model, 8, static_cast<int64_t>(tokens.size()));
  const std::vector<float> a = cpu_gen.append(tokens, true).value();
  const std::vector<float> b = ref_gen.append(tokens, true).value();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 2e-5f + 2e-5f * std::abs(b[i])) << "index " << i;
}

INSTANTIATE_TEST_SUITE_P(Transformers, FixtureTest, ::testing::ValuesIn(testing::fixture_names()),
                         [](const auto& info) { return info.param; });

TEST(Fixtures, RequiredArchitecturesArePresent) {
  const auto names = testing::fixture_names();
  for (const char* required :
       {"llama", "llama3_tied", "qwen2", "qwen3", "mistral_swa", "gpt_oss", "gemma3", "gemma3_old", "deepseek_v2",
        "deepseek_v3", "deepseek_v3_fp8", "gpt_oss_mxfp4", "qwen3_moe", "mixtral"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
  }
}

}  // namespace
}  // namespace deepinfer
