// Disaggregated (PROMPT -> COMPLETION) engines on sliding-window models: the handover moves the
// full-attention layers' blocks by the main table and the sliding layers' by their window table,
// so both engines split the cache as a unified engine does; with the persistent store on, the
// PROMPT engine keeps only the full-attention layers' pages and replays on a hit.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../kvstore/kvstore_test_util.h"
#include "engine/swa_replay.h"
#include "engine_test_util.h"

namespace deepinfer::testing {
namespace {

constexpr int32_t kBlock = 4;
constexpr int32_t kPrompt = 41;  // 10 full pages and one token: five windows (8) long
constexpr int32_t kMaxTokens = 8;

std::vector<int32_t> prompt() {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < kPrompt; ++i) tokens.push_back((i * 37 + 11) % 397);
  return tokens;
}

SamplingParams greedy() {
  SamplingParams params;
  params.temperature = 0.0;
  params.max_tokens = kMaxTokens;
  params.ignore_eos = true;
  params.logprobs = 0;
  return params;
}

// store_dir empty: no persistent store.
EngineConfig engine_config(EngineMode mode, const std::string& fixture, const std::string& store_dir = "",
                           int32_t replay_tokens = kSwaReplayDefault) {
  EngineConfig config = small_engine_config(64, kBlock);
  config.mode = mode;
  if (store_dir.empty()) return config;
  config.kv_store.dir = store_dir;
  config.kv_store.cost_guard = false;
  config.kv_store.swa_replay_tokens = replay_tokens;
  config.kv_store.model_identity = fingerprint_model_dir(fixture_dir(fixture)).value();
  return config;
}

// The unified (NORMAL) engine's run of the prompt, without a store.
SampleRun unified_run(const std::string& fixture) {
  TestModel m = load_test_model(fixture, true);
  const EngineConfig config = engine_config(EngineMode::kNormal, fixture);
  return run_together(*m.model, config, {{prompt(), greedy()}}).at(0).samples.at(0);
}

struct Prefill {
  PrefilledRequest request;
  SampleRun first;  // the first token, as the PROMPT engine reported it
  int32_t num_cached_tokens = 0;
  EngineStats stats;
};

Prefill run_prompt_engine(CausalLM& model, const EngineConfig& config) {
  EngineCore engine(model, nullptr, config);
  EXPECT_TRUE(engine.add_request(0, prompt(), greedy()).ok());
  OutputCollector collector;
  run_engine(engine, collector);
  Prefill prefill;
  prefill.first = collector.runs().at(0).samples.at(0);
  prefill.num_cached_tokens = collector.runs().at(0).num_cached_tokens;
  prefill.stats = engine.stats();
  std::vector<PrefilledRequest> handed = engine.take_prefilled();
  EXPECT_EQ(handed.size(), 1u);
  if (!handed.empty()) prefill.request = std::move(handed.front());
  return prefill;
}

// The COMPLETION engine's run, the handed-over first token in front.
SampleRun run_completion_engine(CausalLM& model, const EngineConfig& config, Prefill prefill,
                                EngineStats* stats = nullptr) {
  EngineCore engine(model, nullptr, config);
  const Result<void> added = engine.add_prefilled_request(std::move(prefill.request));
  EXPECT_TRUE(added.ok()) << added.error().message;
  OutputCollector collector;
  run_engine(engine, collector);
  EXPECT_EQ(engine.stats().kv_usage, 0.0);
  if (stats != nullptr) *stats = engine.stats();
  SampleRun run = collector.runs().at(0).samples.at(0);
  EXPECT_EQ(run.finish_reason, FinishReason::kLength);
  // The handed-over token comes back first, without its logprob.
  run.logprobs.insert(run.logprobs.begin(), prefill.first.logprobs.begin(), prefill.first.logprobs.end());
  return run;
}

bool every_layer_slides(const CausalLM& model) {
  const auto& windows = model.config().layer_sliding_window;
  return std::all_of(windows.begin(), windows.end(), [](int32_t w) { return w > 0; });
}

// Bytes of one page of the full-attention layers' KV, from config.json (f32 K and V rows).
int64_t full_layer_page_bytes(const std::string& fixture) {
  std::ifstream in(fixture_dir(fixture) + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  int64_t full_layers = 0;
  if (config.contains("layer_types")) {
    for (const auto& type : config["layer_types"]) full_layers += type == "full_attention" ? 1 : 0;
  }  // else Mistral: every layer slides
  return full_layers * config["num_key_value_heads"].get<int64_t>() * config["head_dim"].get<int64_t>() * 2 * kBlock *
         4;
}

class DisaggSwa : public ::testing::TestWithParam<std::string> {};

// The continuation equals the unified engine's bit for bit. For a mixed model both engines
// split the cache (Mistral: the PROMPT engine keeps one table, the COMPLETION engine splits; the
// layout handed over is the same). The COMPLETION engine serves one sequence with 8-token steps,
// so a mixed model's sliding-window pool there (1 x (2 + 3) + 2 = 7 blocks) is smaller than the
// prompt's 11 blocks: it takes window blocks only.
TEST_P(DisaggSwa, HandoverEqualsUnifiedEngine) {
  const std::string fixture = GetParam();
  const SampleRun want = unified_run(fixture);
  TestModel prompt_model = load_test_model(fixture, true);
  TestModel completion_model = load_test_model(fixture, true);
  const Prefill prefill = run_prompt_engine(*prompt_model.model, engine_config(EngineMode::kPrompt, fixture));
  EXPECT_EQ(prefill.first.finish_reason, FinishReason::kPrefilled);
  ASSERT_EQ(prefill.first.token_ids.size(), 1u);
  // The layers without a window for all 11 blocks; the sliding ones for the 3 blocks from
  // (41 - 8) / 4 = 8 on, the window of the next token.
  const CausalLM& model = *prompt_model.model;
  const int64_t full_bytes = model.handover_kv_bytes_per_block(KvLayers::kFull);
  const int64_t swa_bytes = model.handover_kv_bytes_per_block(KvLayers::kSliding);
  EXPECT_GT(swa_bytes, 0);
  EXPECT_EQ(full_bytes + swa_bytes, model.kv_bytes_per_token() * kBlock);
  EXPECT_EQ(prefill.request.kv.size(), static_cast<size_t>(11 * full_bytes));
  EXPECT_EQ(prefill.request.swa_first_block, 8);
  EXPECT_EQ(prefill.request.swa_kv.size(), static_cast<size_t>(3 * swa_bytes));
  EngineConfig completion_config = small_engine_config(64, kBlock, 8, 1);
  completion_config.mode = EngineMode::kCompletion;
  {  // Sliding-window KV that starts after the window's first block is refused.
    EngineCore engine(*completion_model.model, nullptr, completion_config);
    PrefilledRequest short_window = prefill.request;
    short_window.swa_first_block = 9;
    short_window.swa_kv.resize(static_cast<size_t>(2 * swa_bytes));
    const Result<void> added = engine.add_prefilled_request(std::move(short_window));
    ASSERT_FALSE(added.ok());
    EXPECT_NE(added.error().message.find("from block 8"), std::string::npos) << added.error().message;
  }
  EngineStats completion_stats;
  const SampleRun got = run_completion_engine(*completion_model.model, completion_config, prefill, &completion_stats);
  EXPECT_EQ(got.token_ids, want.token_ids);
  EXPECT_TRUE(same_bits(got.logprobs, want.logprobs));
  if (every_layer_slides(*prompt_model.model)) {
    // Without the store a model whose every layer slides keeps one table that drops old pages.
    EXPECT_EQ(prefill.stats.num_swa_kv_blocks, 0);
  } else {
    EXPECT_GT(prefill.stats.num_swa_kv_blocks, 0);
    EXPECT_EQ(completion_stats.num_swa_kv_blocks, 7);
  }
}

// A PROMPT engine with the store keeps only the full-attention layers' KV (none when every layer
// slides); a second PROMPT engine on the store hits the 40-token prefix, replays (exact mode: the
// sliding layers' 8 or 16 tokens; default: R = max(128, W) covers the whole prefix) and hands over
// a request whose continuation equals the unified engine's (the COMPLETION engines have no store).
TEST_P(DisaggSwa, StoredPromptEnginesReplayAndHandOver) {
  const std::string fixture = GetParam();
  const SampleRun want = unified_run(fixture);
  TestModel prompt_model = load_test_model(fixture, true);
  TestModel completion_model = load_test_model(fixture, true);
  CausalLM& model = *prompt_model.model;
  const EngineConfig completion_config = engine_config(EngineMode::kCompletion, fixture);
  TempDir dir;

  const Prefill cold = run_prompt_engine(model, engine_config(EngineMode::kPrompt, fixture, dir.path()));
  EXPECT_GT(cold.stats.num_swa_kv_blocks, 0);
  EXPECT_EQ(cold.num_cached_tokens, 0);
  EXPECT_EQ(run_completion_engine(*completion_model.model, completion_config, cold).token_ids, want.token_ids);
  const std::vector<StoredPage> pages = stored_pages(dir.path());
  EXPECT_EQ(pages.size(), static_cast<size_t>(kPrompt / kBlock));
  const int64_t full_bytes = full_layer_page_bytes(fixture);
  EXPECT_LT(full_bytes, model.kv_bytes_per_token() * kBlock);  // fewer layers than the handover's
  for (const StoredPage& page : pages) {
    ASSERT_TRUE(page.header.has_value()) << page.path;
    EXPECT_EQ(page.header->payload_bytes, static_cast<uint64_t>(full_bytes)) << page.path;
  }

  for (const int32_t replay : {kSwaReplayExact, kSwaReplayDefault}) {
    SCOPED_TRACE(replay);
    const Prefill hit = run_prompt_engine(model, engine_config(EngineMode::kPrompt, fixture, dir.path(), replay));
    EXPECT_EQ(hit.num_cached_tokens, kPrompt - 1);
    ASSERT_TRUE(hit.stats.kv_store.has_value());
    EXPECT_EQ(hit.stats.kv_store->tokens_replayed,
              std::min(kPrompt - 1, swa_replay_tokens(model.config(), replay, kBlock)));
    EXPECT_EQ(hit.first.token_ids, cold.first.token_ids);
    EXPECT_EQ(run_completion_engine(*completion_model.model, completion_config, hit).token_ids, want.token_ids);
  }
  EXPECT_EQ(stored_pages(dir.path()).size(), pages.size());  // the hits stored nothing new
}

// A cluster's store transfer mode: the PROMPT engine's pages go to the store and nothing else is
// handed over but the first token; a COMPLETION engine on the same store loads the 40-token
// prefix (the sliding layers rebuilt by the replay), computes the last token and the first
// output again, and, the first token already delivered, reports only the tokens after it: the
// unified engine's continuation (tokens; the replay's logprobs may differ in the last bits, as in
// StoredPromptEnginesReplayAndHandOver).
TEST_P(DisaggSwa, CompletionFromTheStoreContinuesAfterTheDeliveredToken) {
  const std::string fixture = GetParam();
  const SampleRun want = unified_run(fixture);
  TestModel prompt_model = load_test_model(fixture, true);
  TestModel completion_model = load_test_model(fixture, true);
  TempDir dir;
  Prefill prefill = run_prompt_engine(*prompt_model.model, engine_config(EngineMode::kPrompt, fixture, dir.path()));
  PrefilledRequest from_store = std::move(prefill.request);
  from_store.kv.clear();
  from_store.swa_kv.clear();
  from_store.kv_not_carried = true;
  from_store.first_token_delivered = true;
  EngineCore engine(*completion_model.model, nullptr,
                    engine_config(EngineMode::kCompletion, fixture, dir.path(), kSwaReplayExact));
  ASSERT_TRUE(engine.add_prefilled_request(std::move(from_store)).ok());
  OutputCollector collector;
  run_engine(engine, collector);
  EXPECT_EQ(engine.stats().kv_usage, 0.0);
  EXPECT_EQ(collector.runs().at(0).num_cached_tokens, kPrompt - 1);
  const SampleRun& rest = collector.runs().at(0).samples.at(0);
  std::vector<int32_t> tokens = prefill.first.token_ids;
  tokens.insert(tokens.end(), rest.token_ids.begin(), rest.token_ids.end());
  EXPECT_EQ(tokens, want.token_ids);
  EXPECT_EQ(rest.logprobs.size(), static_cast<size_t>(kMaxTokens - 1));
  EXPECT_EQ(rest.finish_reason, FinishReason::kLength);
}

// One COMPLETION engine takes the 41-token prompt, then a second prompt sharing its first 20
// tokens. The first request's blocks that had left the window were never sent, so the second
// must not find them in the prefix cache: its continuation equals the unified engine's. The
// first prompt again then hits its 40 tokens (the window's blocks were sent) and writes only
// the last block.
TEST_P(DisaggSwa, SharedPrefixNeverHitsBlocksThatWereNotHandedOver) {
  const std::string fixture = GetParam();
  std::vector<int32_t> second = prompt();
  second.resize(20);
  for (int32_t i = 0; i < 3; ++i) second.push_back((i * 53 + 5) % 397);
  const std::vector<RequestSpec> requests = {{prompt(), greedy()}, {second, greedy()}, {prompt(), greedy()}};
  TestModel prompt_model = load_test_model(fixture, true);
  TestModel completion_model = load_test_model(fixture, true);
  const auto want = run_each_alone(*prompt_model.model, engine_config(EngineMode::kNormal, fixture), requests);
  EngineCore prompt_engine(*prompt_model.model, nullptr, engine_config(EngineMode::kPrompt, fixture));
  EngineCore completion_engine(*completion_model.model, nullptr, engine_config(EngineMode::kCompletion, fixture));
  OutputCollector prefill, completion;
  for (int64_t id = 0; id < 3; ++id) {
    ASSERT_TRUE(prompt_engine.add_request(id, requests[static_cast<size_t>(id)].prompt, greedy()).ok());
    run_engine(prompt_engine, prefill);
    std::vector<PrefilledRequest> handed = prompt_engine.take_prefilled();
    ASSERT_EQ(handed.size(), 1u);
    ASSERT_TRUE(completion_engine.add_prefilled_request(std::move(handed.front())).ok());
    run_engine(completion_engine, completion);
    EXPECT_EQ(completion.runs().at(id).samples.at(0).token_ids, want.at(id).samples.at(0).token_ids) << id;
  }
  EXPECT_EQ(completion.runs().at(1).num_cached_tokens, 0);
  EXPECT_EQ(completion.runs().at(2).num_cached_tokens, kPrompt - 1);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DisaggSwa, ::testing::Values("gemma3", "gpt_oss", "mistral_swa"));

}  // namespace
}  // namespace deepinfer::testing
