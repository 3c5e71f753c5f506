// The sliding-window KV split on a model that mixes window-8 and full-attention layers (the
// llama fixture's weights with layer_types [sliding, full]): a long sequence keeps O(window)
// sliding-window pages while the full layers keep all of theirs, and the logits are bit-identical
// to the unsplit cache; the window itself changes late logits (so the split is really exercised);
// the engine (batches, n > 1 forks, prefix hits) gives the same greedy tokens as one sequence.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "deepinfer/llm.h"
#include "engine/engine_core.h"
#include "engine/generator.h"
#include "fixtures.h"
#include "model/model.h"

namespace deepinfer {
namespace {

constexpr int32_t kWindow = 8;
constexpr int32_t kBlock = 4;

// tests/data/llama with its first layer sliding (window 8) and its second full, in a temp folder.
class MixedWindowModel {
 public:
  MixedWindowModel() : dir_(std::filesystem::temp_directory_path() / ("deepinfer_swa_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
    const std::string src = testing::fixture_dir("llama");
    std::filesystem::copy_file(src + "/model.safetensors", dir_ / "model.safetensors",
                               std::filesystem::copy_options::overwrite_existing);
    std::ifstream in(src + "/config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config["sliding_window"] = kWindow;
    config["layer_types"] = {"sliding_attention", "full_attention"};
    std::ofstream(dir_ / "config.json") << config.dump(2);
  }
  ~MixedWindowModel() { std::filesystem::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

std::vector<int32_t> sequence(int32_t count) {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < count; ++i) tokens.push_back((i * 37 + 11) % 397);
  return tokens;
}

int32_t live_blocks(const std::vector<int32_t>& table) {
  return static_cast<int32_t>(std::count_if(table.begin(), table.end(), [](int32_t b) { return b >= 0; }));
}

TEST(SwaCache, LongSequenceHoldsWindowPagesAndKeepsLogits) {
  const MixedWindowModel mixed;
  auto backend = make_backend("cpu").value();
  auto model = load_model(mixed.dir(), *backend, false).value();
  ASSERT_GT(model->swa_kv_bytes_per_token(), 0);
  EXPECT_EQ(2 * model->swa_kv_bytes_per_token(), model->kv_bytes_per_token());
  const std::vector<int32_t> tokens = sequence(200);

  // Split (the default) and unsplit caches, fed the same 7-token pieces, then 20 single tokens.
  std::vector<float> split_logits, full_logits;
  int32_t max_live_swa = 0;
  {
    Generator split(*model, kBlock, 256, 7);
    ASSERT_TRUE(split.kv_cache().has_swa_tables());
    for (size_t begin = 0; begin < tokens.size(); begin += 7) {
      const auto first = tokens.begin() + static_cast<std::ptrdiff_t>(begin);
      const auto count = static_cast<std::ptrdiff_t>(std::min<size_t>(7, tokens.size() - begin));
      const std::vector<int32_t> piece(first, first + count);
      const std::vector<float> logits = split.append(piece, true).value();
      split_logits.insert(split_logits.end(), logits.begin(), logits.end());
      max_live_swa = std::max(max_live_swa, split.kv_cache().num_used_swa_blocks());
      split.kv_cache().check_invariants();
    }
    // The full-attention layers keep every one of the 50 pages; the sliding ones only the window's.
    EXPECT_EQ(live_blocks(split.kv_cache().block_table(0)), 50);
    EXPECT_LE(live_blocks(split.kv_cache().swa_block_table(0)), kWindow / kBlock + 1);
  }
  EXPECT_LE(max_live_swa, kWindow / kBlock + 1);
  {
    Generator unsplit(*model, kBlock, 256, 7, /*bound_sliding_kv=*/false);
    ASSERT_FALSE(unsplit.kv_cache().has_swa_tables());
    for (size_t begin = 0; begin < tokens.size(); begin += 7) {
      const auto first = tokens.begin() + static_cast<std::ptrdiff_t>(begin);
      const auto count = static_cast<std::ptrdiff_t>(std::min<size_t>(7, tokens.size() - begin));
      const std::vector<int32_t> piece(first, first + count);
      const std::vector<float> logits = unsplit.append(piece, true).value();
      full_logits.insert(full_logits.end(), logits.begin(), logits.end());
    }
  }
  // Same kernels over the same keys: only the page ids differ, so the bits must not.
  ASSERT_EQ(split_logits, full_logits);

  // The window matters: the same weights with full attention everywhere differ late in the sequence.
  auto plain = load_model(testing::fixture_dir("llama"), *backend, false).value();
  Generator plain_gen(*plain, kBlock, 256, 64);
  const std::vector<float> plain_logits = plain_gen.append(tokens, true).value();
  const size_t vocab = 397;
  float late_diff = 0.0f;
  for (size_t i = 150 * vocab; i < plain_logits.size(); ++i) {
    late_diff = std::max(late_diff, std::abs(plain_logits[i] - split_logits[i]));
  }
  EXPECT_GT(late_diff, 1e-3f);
}

// The engine's split cache (batched sequences, n = 2 forks, a second round served from the prefix
// cache) gives the greedy tokens of one sequence on the unsplit cache.
TEST(SwaCache, EngineMatchesSingleSequenceGreedy) {
  const MixedWindowModel mixed;
  LLMConfig config;
  config.model_dir = mixed.dir();
  config.block_size = kBlock;
  config.max_num_seqs = 4;
  config.max_num_batched_tokens = 16;
  config.kv_cache_bytes = int64_t{8} << 20;
  config.show_progress = false;
  config.batch_invariant = true;  // so batching and chunking cannot move a near-tie
  auto llm = LLM::open(config).value();
  std::vector<Prompt> prompts;
  for (int32_t length : {30, 45, 9}) prompts.push_back(Prompt{"", sequence(length)});
  SamplingParams params;
  params.max_tokens = 24;
  params.temperature = 0.0;
  params.ignore_eos = true;
  params.n = 2;

  auto backend = make_backend("cpu", BackendOptions{.batch_invariant = true}).value();
  auto model = load_model(mixed.dir(), *backend, false).value();
  Generator reference(*model, kBlock, 256, 512, /*bound_sliding_kv=*/false);
  GenerateOptions options;
  options.max_tokens = 24;
  options.sampling.temperature = 0.0;
  options.ignore_eos = true;
  for (int round = 0; round < 2; ++round) {
    const auto results = llm->generate(prompts, {params}).value();
    int32_t num_cached = 0;
    ASSERT_EQ(results.size(), prompts.size());
    for (size_t p = 0; p < prompts.size(); ++p) {
      const std::vector<int32_t> want = reference.generate(prompts[p].token_ids, options).value();
      ASSERT_EQ(results[p].outputs.size(), 2u);
      for (const SampleResult& sample : results[p].outputs) {
        EXPECT_EQ(sample.token_ids, want) << "round " << round << " prompt " << p << " sample " << sample.index;
      }
      num_cached += results[p].num_cached_tokens;
    }
    // The second round is served partly from the prefix cache (as far as the small sliding pool
    // still holds the windows' pages), and gives the same tokens.
    if (round == 1) {
      EXPECT_GT(num_cached, 0);
    }
  }
}

// Every engine mode splits the cache of a mixed model, sized for max_num_seqs windows plus one
// step's tokens (PROMPT/COMPLETION hand over each kind of layer by its own table).
TEST(SwaCache, EngineSplitsInEveryMode) {
  const MixedWindowModel mixed;
  auto backend = make_backend("cpu").value();
  auto model = load_model(mixed.dir(), *backend, false).value();
  EngineConfig config;
  config.block_size = kBlock;
  config.kv_cache_bytes = int64_t{4} << 20;
  config.scheduler.max_num_seqs = 4;
  config.scheduler.max_num_batched_tokens = 16;
  for (const EngineMode mode : {EngineMode::kNormal, EngineMode::kPrompt, EngineMode::kCompletion}) {
    config.mode = mode;
    EngineCore engine(*model, nullptr, config);
    // 4 sequences x (2 window pages + 3) + 16 / 4 pages of new tokens.
    EXPECT_EQ(engine.stats().num_swa_kv_blocks, 4 * (kWindow / kBlock + 3) + 16 / kBlock);
  }
}

}  // namespace
}  // namespace deepinfer
