// Request handling end to end: stop strings and stop token ids on a model with a tokenizer
// (expected outputs worked out from an unstopped run), penalties against the formulas applied
// by hand to the model's raw logits, aborts at every stage freeing everything, and the errors a
// bad request gets.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "deepinfer/llm.h"
#include "engine_test_util.h"
#include "text_model_dir.h"

namespace deepinfer::testing {
namespace {

// The text model's tokenizer maps byte b to id b; 'a'..'h' get a +100 bias so greedy decoding
// writes letters (the random model's own choice among them).
SamplingParams letters_params(int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  for (int32_t c = 'a'; c <= 'h'; ++c) p.logit_bias[c] = 100.0f;
  return p;
}

class TextEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    LLMConfig config;
    config.model_dir = dir_.path();
    config.batch_invariant = true;
    config.show_progress = false;
    config.kv_cache_bytes = int64_t{16} << 20;
    llm_ = std::move(LLM::open(config).value());
  }

  SampleResult generate(const SamplingParams& params, const std::string& prompt = "The quick brown fox") {
    auto results = llm_->generate({Prompt{prompt, {}}}, {params});
    EXPECT_TRUE(results.ok()) << results.error().message;
    return results->at(0).outputs.at(0);
  }

  TextModelDir dir_{/*with_chat_template=*/false};
  std::unique_ptr<LLM> llm_;
};

TEST_F(TextEngine, StopStringSplitAcrossTokensIsCaughtAndNotEmitted) {
  const SampleResult base = generate(letters_params(24));
  ASSERT_EQ(base.text.size(), 24u);
  ASSERT_EQ(base.finish_reason, "length");
  // Every token is one letter, so a 3-letter stop string always spans three tokens.
  const std::string stop = base.text.substr(5, 3);
  const size_t at = base.text.find(stop);
  SamplingParams params = letters_params(24);
  params.stop = {stop};
  const SampleResult stopped = generate(params);
  EXPECT_EQ(stopped.text, base.text.substr(0, at));
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.stop_reason, stop);
  // The token that completed the stop string is generated; nothing after it.
  EXPECT_EQ(stopped.token_ids, std::vector<int32_t>(base.token_ids.begin(), base.token_ids.begin() + at + 3));

  params.include_stop_str_in_output = true;
  EXPECT_EQ(generate(params).text, base.text.substr(0, at + 3));
}

TEST_F(TextEngine, EarliestEndingStopStringWins) {
  const SampleResult base = generate(letters_params(24));
  const std::vector<std::string> stops = {base.text.substr(12, 4), base.text.substr(7, 2), "zz"};
  // By hand: the stop whose first occurrence ends first (the longest among equal ends).
  size_t best_end = std::string::npos;
  std::string best;
  for (const std::string& s : stops) {
    const size_t found = base.text.find(s);
    if (found == std::string::npos) continue;
    const size_t end = found + s.size();
    if (end < best_end || (end == best_end && s.size() > best.size())) {
      best_end = end;
      best = s;
    }
  }
  SamplingParams params = letters_params(24);
  params.stop = stops;
  const SampleResult stopped = generate(params);
  EXPECT_EQ(stopped.stop_reason, best);
  EXPECT_EQ(stopped.text, base.text.substr(0, best_end - best.size()));

  params.stop = {"zz", "XYZ"};  // never written: runs to max_tokens
  const SampleResult unstopped = generate(params);
  EXPECT_EQ(unstopped.text, base.text);
  EXPECT_EQ(unstopped.finish_reason, "length");
}

TEST_F(TextEngine, StopTokenIdEndsTheSampleWithoutItsText) {
  const SampleResult base = generate(letters_params(24));
  const int32_t stop_token = base.token_ids.at(6);
  const auto at =
      static_cast<size_t>(std::find(base.token_ids.begin(), base.token_ids.end(), stop_token) - base.token_ids.begin());
  SamplingParams params = letters_params(24);
  params.stop_token_ids = {stop_token};
  const SampleResult stopped = generate(params);
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.stop_reason, std::to_string(stop_token));
  EXPECT_EQ(stopped.token_ids, std::vector<int32_t>(base.token_ids.begin(), base.token_ids.begin() + at + 1));
  EXPECT_EQ(stopped.text, base.text.substr(0, at));
  params.include_stop_str_in_output = true;
  EXPECT_EQ(generate(params).text, base.text.substr(0, at + 1));
}

// Greedy choice after logit_bias, repetition, frequency and presence penalties, applied in
// that order in float32 to the raw logits of every step (vLLM's definitions).
int32_t penalized_argmax(std::vector<float> logits, const SamplingParams& p, const std::vector<int32_t>& prompt,
                         const std::vector<int32_t>& output) {
  for (const auto& [id, bias] : p.logit_bias) logits[static_cast<size_t>(id)] += bias;
  if (p.repetition_penalty != 1.0) {
    std::set<int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(output.begin(), output.end());
    const auto penalty = static_cast<float>(p.repetition_penalty);
    for (int32_t id : seen) {
      float& l = logits[static_cast<size_t>(id)];
      l = l > 0.0f ? l / penalty : l * penalty;
    }
  }
  std::map<int32_t, int32_t> counts;
  for (int32_t id : output) ++counts[id];
  for (const auto& [id, count] : counts) {
    float& l = logits[static_cast<size_t>(id)];
    l -= static_cast<float>(p.frequency_penalty) * static_cast<float>(count);
    l -= static_cast<float>(p.presence_penalty);
  }
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

TEST_F(TextEngine, PenaltiesFollowTheirFormulas) {
  TestModel raw = load_test_model(dir_.path(), /*batch_invariant=*/true);
  const std::vector<int32_t> prompt = llm_->tokenize("hello hello world").value();
  SamplingParams plain;
  plain.temperature = 0.0;
  plain.max_tokens = 16;
  plain.ignore_eos = true;
  std::vector<SamplingParams> cases(4, plain);
  cases[0].repetition_penalty = 1.8;
  cases[1].frequency_penalty = 1.5;
  cases[2].presence_penalty = 1.5;
  cases[3].repetition_penalty = 1.3;
  cases[3].frequency_penalty = 0.7;
  cases[3].presence_penalty = -0.5;
  cases[3].logit_bias = {{prompt[0], 3.0f}, {'o', -2.0f}};
  const auto unpenalized = llm_->generate({Prompt{"", prompt}}, {plain}).value().at(0).outputs.at(0).token_ids;
  int32_t num_changed = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto got = llm_->generate({Prompt{"", prompt}}, {cases[c]}).value().at(0).outputs.at(0).token_ids;
    ASSERT_EQ(got.size(), 16u);
    std::vector<int32_t> sequence = prompt;
    sequence.insert(sequence.end(), got.begin(), got.end() - 1);
    const auto rows = forward_logits(*raw.model, sequence, static_cast<int32_t>(prompt.size()) - 1);
    for (size_t s = 0; s < got.size(); ++s) {
      const std::vector<int32_t> before(got.begin(), got.begin() + static_cast<ptrdiff_t>(s));
      EXPECT_EQ(got[s], penalized_argmax(rows[s], cases[c], prompt, before)) << "case " << c << " step " << s;
    }
    if (got != unpenalized) ++num_changed;
  }
  EXPECT_GE(num_changed, 3) << "the penalties should change the greedy output";
}

class EngineRequests : public ::testing::Test {
 protected:
  void SetUp() override { loaded_ = load_test_model("qwen3", /*batch_invariant=*/true); }
  CausalLM& model() { return *loaded_.model; }
  int32_t vocab() { return static_cast<int32_t>(model().config().vocab_size); }

  // A finished engine holds nothing: no running or waiting sequence, no block in use.
  static void expect_clean(const EngineCore& engine) {
    engine.check_invariants();
    EXPECT_FALSE(engine.has_unfinished_requests());
    EXPECT_EQ(engine.stats().num_running, 0u);
    EXPECT_EQ(engine.stats().num_waiting, 0u);
    EXPECT_EQ(engine.stats().kv_usage, 0.0);
  }

  TestModel loaded_;
};

TEST_F(EngineRequests, AbortMidPrefillFreesEverything) {
  std::mt19937 rng(1);
  EngineCore engine(model(), nullptr, small_engine_config(16, 16, /*budget=*/8));
  SamplingParams params;
  params.n = 3;  // samples 1 and 2 wait for sample 0's prefill
  ASSERT_TRUE(engine.add_request(7, random_tokens(rng, 40, vocab()), params).ok());
  OutputCollector collector;
  collector.absorb(engine.step());
  engine.check_invariants();
  EXPECT_GT(engine.stats().kv_usage, 0.0);
  EXPECT_TRUE(collector.runs().empty());  // 8 of 40 prompt tokens ran
  engine.abort_request(7);
  collector.absorb(engine.step());
  expect_clean(engine);
  const RequestRun& run = collector.runs().at(7);
  EXPECT_TRUE(run.finished);
  EXPECT_EQ(run.num_prompt_tokens, 40);
  ASSERT_EQ(run.samples.size(), 3u);
  for (const auto& [index, sample] : run.samples) {
    EXPECT_EQ(sample.finish_reason, FinishReason::kAbort) << index;
    EXPECT_TRUE(sample.token_ids.empty()) << index;
  }
  engine.abort_request(7);  // already gone: nothing happens
  EXPECT_TRUE(engine.step().empty());
}

TEST_F(EngineRequests, AbortMidDecodeAndWhileWaitingFreesEverything) {
  std::mt19937 rng(2);
  EngineCore engine(model(), nullptr, small_engine_config(16, 16, 2048, /*max_num_seqs=*/1));
  SamplingParams params;
  params.max_tokens = 50;
  ASSERT_TRUE(engine.add_request(1, random_tokens(rng, 20, vocab()), params).ok());
  ASSERT_TRUE(engine.add_request(2, random_tokens(rng, 20, vocab()), params).ok());  // waits: max_num_seqs 1
  OutputCollector collector;
  while (collector.runs()[1].samples[0].token_ids.size() < 3) collector.absorb(engine.step());
  EXPECT_EQ(engine.stats().num_waiting, 1u);
  engine.abort_request(2);
  engine.abort_request(1);
  collector.absorb(engine.step());
  expect_clean(engine);
  EXPECT_EQ(collector.runs().at(1).samples.at(0).finish_reason, FinishReason::kAbort);
  EXPECT_EQ(collector.runs().at(1).samples.at(0).token_ids.size(), 3u);
  EXPECT_EQ(collector.runs().at(2).samples.at(0).finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(collector.runs().at(2).samples.at(0).token_ids.empty());
}

// max_tokens 0 only runs the prompt, e.g. for its prompt logprobs.
TEST_F(EngineRequests, ZeroMaxTokensOnlyScoresThePrompt) {
  std::mt19937 rng(3);
  const std::vector<int32_t> prompt = random_tokens(rng, 12, vocab());
  SamplingParams params;
  params.max_tokens = 0;
  params.prompt_logprobs = 1;
  EngineCore engine(model(), nullptr, small_engine_config(16));
  ASSERT_TRUE(engine.add_request(0, prompt, params).ok());
  OutputCollector collector;
  run_engine(engine, collector);
  expect_clean(engine);
  const RequestRun& run = collector.runs().at(0);
  EXPECT_TRUE(run.samples.at(0).token_ids.empty());
  EXPECT_EQ(run.samples.at(0).finish_reason, FinishReason::kLength);
  ASSERT_TRUE(run.prompt_logprobs.has_value());
  ASSERT_EQ(run.prompt_logprobs->size(), prompt.size());
  EXPECT_FALSE(run.prompt_logprobs->front().has_value());
  // Prompt token i is scored by the logits of position i - 1.
  const auto rows = forward_logits(model(), prompt, 0);
  for (size_t i = 1; i < prompt.size(); ++i) {
    const TokenLogprob want = token_logprob(rows[i - 1].data(), vocab(), prompt[i], 1);
    ASSERT_TRUE(run.prompt_logprobs->at(i).has_value());
    EXPECT_EQ(run.prompt_logprobs->at(i)->logprob, want.logprob) << i;
  }
}

// Each error names what is wrong.
TEST_F(EngineRequests, BadRequestsAreRejectedWithTheReason) {
  EngineCore engine(model(), nullptr, small_engine_config(8, 16));
  const auto error_of = [&](std::vector<int32_t> prompt, const SamplingParams& params) {
    auto added = engine.add_request(99, std::move(prompt), params);
    return added.ok() ? std::string("(accepted)") : added.error().message;
  };
  const SamplingParams ok;
  EXPECT_NE(error_of({}, ok).find("empty"), std::string::npos);
  const std::string out_of_vocab = error_of({1, 2, 397}, ok);
  EXPECT_NE(out_of_vocab.find("397"), std::string::npos) << out_of_vocab;
  EXPECT_NE(out_of_vocab.find("index 2"), std::string::npos) << out_of_vocab;
  EXPECT_NE(out_of_vocab.find("vocabulary"), std::string::npos) << out_of_vocab;
  EXPECT_NE(error_of({-1}, ok).find("-1"), std::string::npos);
  const std::string too_long = error_of(std::vector<int32_t>(256, 1), ok);  // max_position_embeddings 256
  EXPECT_NE(too_long.find("256 tokens"), std::string::npos) << too_long;
  EXPECT_NE(too_long.find("context length"), std::string::npos) << too_long;
  SamplingParams long_output;
  long_output.max_tokens = 200;  // 9 blocks of 16 > the pool's 8
  EXPECT_NE(error_of({1, 2, 3}, long_output).find("KV blocks"), std::string::npos);
  SamplingParams with_stop;
  with_stop.stop = {"\n"};
  const std::string no_tokenizer = error_of({1, 2, 3}, with_stop);
  EXPECT_NE(no_tokenizer.find("stop strings"), std::string::npos) << no_tokenizer;
  EXPECT_NE(no_tokenizer.find("tokenizer"), std::string::npos) << no_tokenizer;
  SamplingParams bad_temperature;
  bad_temperature.temperature = -1.0;
  EXPECT_NE(error_of({1, 2, 3}, bad_temperature).find("temperature"), std::string::npos);
  ASSERT_TRUE(engine.add_request(5, {1, 2, 3}, ok).ok());
  EXPECT_NE(engine.add_request(5, {1, 2, 3}, ok).error().message.find("already in use"), std::string::npos);
  engine.abort_request(5);
  engine.step();
  expect_clean(engine);  // rejected requests left nothing behind

  PrefilledRequest prefilled;
  EXPECT_NE(engine.add_prefilled_request(prefilled).error().message.find("COMPLETION"), std::string::npos);
}

TEST_F(EngineRequests, ModeAndBudgetErrors) {
  EngineConfig prompt_config = small_engine_config(8);
  prompt_config.mode = EngineMode::kPrompt;
  EngineCore prompt_engine(model(), nullptr, prompt_config);
  SamplingParams two;
  two.n = 2;
  EXPECT_NE(prompt_engine.add_request(0, {1, 2}, two).error().message.find("n = 1"), std::string::npos);

  EngineConfig unchunked = small_engine_config(8, 16, /*budget=*/16);
  unchunked.scheduler.enable_chunked_prefill = false;
  EngineCore engine(model(), nullptr, unchunked);
  SamplingParams params;
  params.max_tokens = 4;
  const auto rejected = engine.add_request(0, std::vector<int32_t>(14, 1), params);
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.error().message.find("max_num_batched_tokens"), std::string::npos) << rejected.error().message;
  ASSERT_TRUE(engine.add_request(1, std::vector<int32_t>(12, 1), params).ok());  // 12 + 4 fit one step
  OutputCollector collector;
  run_engine(engine, collector);
  EXPECT_EQ(collector.runs().at(1).samples.at(0).token_ids.size(), 4u);

  PrefilledRequest prefilled;
  prefilled.prompt_token_ids = {1, 2};
  EXPECT_NE(prompt_engine.add_prefilled_request(prefilled).error().message.find("PROMPT"), std::string::npos);
}

// The offline API checks every prompt before running any, and names the bad one.
TEST(LlmErrors, TextPromptWithoutTokenizerNamesThePrompt) {
  LLMConfig config;
  config.model_dir = fixture_dir("llama");
  config.show_progress = false;
  config.kv_cache_bytes = int64_t{4} << 20;
  auto llm = std::move(LLM::open(config).value());
  SamplingParams params;
  params.max_tokens = 3;
  auto failed = llm->generate({Prompt{"", {1, 2, 3}}, Prompt{"hello", {}}}, {params});
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.error().message.find("prompt 1"), std::string::npos) << failed.error().message;
  EXPECT_NE(failed.error().message.find("tokenizer.json"), std::string::npos) << failed.error().message;
  auto fine = llm->generate({Prompt{"", {1, 2, 3}}}, {params});
  ASSERT_TRUE(fine.ok());
  EXPECT_EQ(fine->at(0).outputs.at(0).token_ids.size(), 3u);
}

}  // namespace
}  // namespace deepinfer::testing
